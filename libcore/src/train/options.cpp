#include "mbkit/train/options.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "mbkit/backend/factory.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/nn/precision.hpp"
#include "mbkit/train/dbsl_merge.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

// options_async.cpp: the asynchronous server's methods.
void validate_async_methods(const TrainOptions& o);
// options_methods.cpp: the emulation and the synchronous straggler methods.
void validate_methods(const TrainOptions& o);

namespace {

// Cores this process may run on (its affinity mask, which mpirun and srun set when they bind).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;  // unknown: assume no spare core
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

// --prefetch: a count, or auto. A prefetch thread overlaps loading with computing only when it
// has a core of its own: pinned to one core (mpirun's binding of a rank to a core) it can only
// take turns with the computing thread, and then its wake-ups land in the middle of the
// gradient exchange (2 ranks x 1 core, mlp, batch 256: 13% more samples/s loading inline).
int prefetch_depth(const std::string& option) {
  if (option == "auto") return usable_cores() > 1 ? 2 : 0;
  const bool digits =
      !option.empty() && option.size() <= 2 &&
      std::all_of(option.begin(), option.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int depth = digits ? std::stoi(option) : -1;
  if (depth < 0 || depth > 64) {
    usage_error(cat("--prefetch: '", option, "' is not auto or a count from 0 to 64"));
  }
  return depth;
}

const char* to_string(CommMode comm) {
  return comm == CommMode::kAllreduce ? "allreduce" : "ps";
}

const char* to_string(ClockMode clock) {
  return clock == ClockMode::kVirtual ? "virtual" : "wall";
}

const char* to_string(AllreduceVia via) {
  switch (via) {
    case AllreduceVia::kSharedMemory:
      return "shm";
    case AllreduceVia::kMpi:
      return "mpi";
    case AllreduceVia::kNccl:
      return "nccl";
    case AllreduceVia::kAuto:
      break;
  }
  return "auto";
}

AllreduceVia parse_allreduce_via(const std::string& option) {
  for (const AllreduceVia via : {AllreduceVia::kAuto, AllreduceVia::kSharedMemory,
                                 AllreduceVia::kMpi, AllreduceVia::kNccl}) {
    if (option == to_string(via)) return via;
  }
  usage_error(cat("--allreduce: '", option, "' is not auto, shm, mpi or nccl"));
}

void parse_time_limit(const std::string& option, AmbOptions& amb) {
  amb.auto_time_limit = option == "auto";
  amb.time_limit.reset();
  if (option.empty() || amb.auto_time_limit) return;
  const double limit = parse_double(option, "--time-limit");
  if (!std::isfinite(limit)) usage_error(cat("--time-limit ", option, " is not a finite number"));
  if (!(limit > 0)) usage_error(cat("--time-limit ", option, " must be positive (or auto)"));
  amb.time_limit = limit;
}

namespace {

// --induce: a profile, or trace:FILE, read and checked whole now (every rank reads it).
void parse_induce(TrainOptions& o) {
  o.induce_trace.reset();
  const std::string path = emulation::trace_path_of(o.given.induce);
  if (!std::isfinite(o.trace_scale) || o.trace_scale < 0) {
    usage_error(
        cat("--trace-scale ", shortest_decimal(o.trace_scale), " is not a finite number >= 0"));
  }
  if (path.empty()) {
    if (o.given.induce == "trace:") usage_error("--induce trace: names no file (trace:FILE)");
    if (o.trace_scale != 1) usage_error("--trace-scale needs --induce trace:FILE");
    o.induce = emulation::parse_straggler_profile(o.given.induce);
    return;
  }
  o.induce.reset();
  auto trace = emulation::read_delay_trace(path);
  trace.scale = o.trace_scale;
  o.induce_trace = std::make_shared<const emulation::DelayTrace>(std::move(trace));
}

}  // namespace

void parse_option_texts(TrainOptions& o) {
  o.augment =
      o.given.augment.empty() ? data::Augmentation{} : data::parse_augmentation(o.given.augment);
  o.prefetch = prefetch_depth(o.given.prefetch);
  o.allreduce = parse_allreduce_via(o.given.allreduce);
  parse_induce(o);
  o.slowdown = emulation::parse_slowdown(o.given.slowdown);
  o.cpu_quota = emulation::parse_cpu_quota(o.given.cpu_quota);
  if (!(std::isfinite(o.cpu_quota_tick) && o.cpu_quota_tick >= 0)) {
    usage_error(cat("--cpu-quota-tick: ", shortest_decimal(o.cpu_quota_tick),
                    " is not a tick in seconds (0 or above, e.g. 0.004 for a kernel of HZ=250)"));
  }
  if (o.cpu_quota_tick > 0 && o.cpu_quota.empty()) {
    usage_error("--cpu-quota-tick needs --cpu-quota");
  }
  o.cpu_quota.tick = o.cpu_quota_tick;
  o.comm_model = parse_comm_model(o.given.comm_model);
  o.compute_model = parse_compute_models(o.given.compute_model);
  parse_time_limit(o.given.time_limit, o.amb);
  o.compression = comm::parse_compression(o.given.compress);
  parse_drop_compute(o.given.drop_compute, o.drop_compute);
  parse_delayed_gradients(o.given.delayed_gradients, o.delayed_gradients);
  parse_local_steps(o);
}

void parse_delayed_gradients(const std::string& option, DelayedGradientsOptions& delayed) {
  delayed.enabled = !option.empty();
  delayed.auto_delay = option == "auto";
  delayed.delay.reset();
  if (!delayed.enabled || delayed.auto_delay) return;
  int rounds = -1;
  const auto* end = option.data() + option.size();
  const auto [ptr, ec] = std::from_chars(option.data(), end, rounds);
  if (ec != std::errc() || ptr != end || rounds < 0 || rounds > kMaxDelayRounds) {
    usage_error(cat("--delayed-gradients '", option, "' is not a whole number of rounds from 0 to ",
                    kMaxDelayRounds, " or auto"));
  }
  delayed.delay = rounds;
}

void parse_local_steps(TrainOptions& o) {
  const std::string& text = o.given.local_steps;
  o.adacomm = text == "adacomm";
  if (o.adacomm) {
    o.local_steps = o.adacomm_tau0;
    return;
  }
  const bool digits =
      !text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) usage_error(cat("--local-steps ", text, " is not a whole number or adacomm"));
  o.local_steps = std::stoi(text);
}

void parse_drop_compute(const std::string& option, DropComputeOptions& drop) {
  drop.enabled = !option.empty();
  drop.auto_threshold = option == "auto";
  drop.threshold.reset();
  if (!drop.enabled || drop.auto_threshold) return;
  double seconds = 0;
  const auto* end = option.data() + option.size();
  const auto [ptr, ec] = std::from_chars(option.data(), end, seconds);
  if (ec != std::errc() || ptr != end || !std::isfinite(seconds) || seconds <= 0) {
    usage_error(cat("--drop-compute '", option, "' is not positive SECONDS or auto"));
  }
  drop.threshold = seconds;
}

int anytime_partitions(const TrainOptions& o) {
  return o.amb.enabled            ? o.amb.partitions
         : o.drop_compute.enabled ? o.drop_compute.micro_batches
                                  : 1;
}

int worker_batch_size(const TrainOptions& o, int workers, int worker) {
  if (o.global_batch_size <= 0) return o.batch_size;
  const std::int64_t n = std::max(1, workers);
  return static_cast<int>(o.global_batch_size / n + (worker < o.global_batch_size % n ? 1 : 0));
}

std::int64_t global_batch_size(const TrainOptions& o, int workers) {
  return o.global_batch_size > 0 ? o.global_batch_size
                                 : static_cast<std::int64_t>(workers) * o.batch_size;
}

double lr_scale_factor(const TrainOptions& o, int workers) {
  if (o.lr_scaling == "none") return 1.0;
  const std::int64_t base = o.lr_base_batch > 0 ? o.lr_base_batch : o.batch_size;
  const double ratio =
      static_cast<double>(global_batch_size(o, workers)) / static_cast<double>(base);
  return o.lr_scaling == "sqrt" ? std::sqrt(ratio) : ratio;
}

void validate_batches(const TrainOptions& o, int workers) {
  if (o.global_batch_size > 0 && o.global_batch_size < workers) {
    usage_error(cat("--global-batch-size ", o.global_batch_size, " is less than the ", workers,
                    " workers: every worker needs at least one sample per step"));
  }
  const int smallest = worker_batch_size(o, workers, workers - 1);
  if (o.amb.enabled && o.amb.partitions > smallest) {
    usage_error(cat("--partitions ", o.amb.partitions, " is larger than the ", smallest,
                    " samples of a worker's batch: a micro-batch needs at least one sample"));
  }
  if (o.drop_compute.enabled && o.drop_compute.micro_batches > smallest) {
    usage_error(cat("--micro-batches ", o.drop_compute.micro_batches, " is larger than the ",
                    smallest, " samples of a worker's batch: a micro-batch needs at least one"));
  }
}

void validate(const TrainOptions& o) {
  if (o.data.empty()) usage_error("--data is required");
  if (!o.worker_table.empty()) metrics::parse_worker_table(o.worker_table);
  // The CPU refuses tf32 and bf16 here, before any file is opened; a GPU too old for them, when
  // its backend is made.
  backend::check_precision(o.device, nn::parse_precision(o.precision));
  if (o.batch_size < 1) usage_error(cat("--batch-size ", o.batch_size, " must be at least 1"));
  if (o.global_batch_size < 0) {
    usage_error(cat("--global-batch-size ", o.global_batch_size, " must be at least 1"));
  }
  if (o.lr_scaling != "none" && o.lr_scaling != "linear" && o.lr_scaling != "sqrt") {
    usage_error(cat("--lr-scaling: '", o.lr_scaling, "' is not none, linear or sqrt"));
  }
  if (o.lr_base_batch < 0) {
    usage_error(cat("--lr-base-batch ", o.lr_base_batch, " must be at least 1"));
  }
  if (o.lr_base_batch > 0 && o.lr_scaling == "none") {
    usage_error("--lr-base-batch needs --lr-scaling linear or sqrt");
  }
  if (o.lr_scaling != "none" && o.global_batch_size > 0 && o.lr_base_batch == 0) {
    usage_error(
        cat("--lr-scaling ", o.lr_scaling,
            " with --global-batch-size needs --lr-base-batch: the batch --lr is meant for"));
  }
  for (const auto& [flag, value] : {std::pair{"--epochs", o.epochs},
                                    {"--time-budget", o.time_budget},
                                    {"--warmup-epochs", o.warmup_epochs},
                                    {"--flush-interval", o.flush_interval}}) {
    if (!std::isfinite(value)) usage_error(cat(flag, " ", value, " is not a finite number"));
  }
  if (o.epochs < 0 || o.steps < 0 || o.time_budget < 0) {
    usage_error("--epochs, --steps and --time-budget must not be negative");
  }
  if (o.epochs == 0 && o.steps == 0 && o.time_budget == 0) {
    usage_error("give the length of the run: --epochs, --steps or --time-budget");
  }
  if (o.eval_every < 0) usage_error("--eval-every must not be negative");
  if (o.test_size < 0) usage_error("--test-size must not be negative");
  if (o.test_sample != "fixed" && o.test_sample != "random") {
    usage_error(cat("--test-sample: '", o.test_sample, "' is not fixed or random"));
  }
  if (o.test_sample == "random" && o.test_size == 0) {
    usage_error("--test-sample random needs --test-size N (the images drawn per evaluation)");
  }
  if (o.train_loss != "workers" && o.train_loss != "master") {
    usage_error(cat("--train-loss: '", o.train_loss, "' is not workers or master"));
  }
  if (o.eval_batch_size < 1) usage_error("--eval-batch-size must be at least 1");
  if (o.warmup_epochs < 0) usage_error("--warmup-epochs must not be negative");
  if (o.nan_policy != "stop" && o.nan_policy != "skip") {
    usage_error(cat("--nan-policy: '", o.nan_policy, "' is not stop or skip"));
  }
  if (!o.cuda_graphs.empty() && o.cuda_graphs != "on" && o.cuda_graphs != "off") {
    usage_error(cat("--cuda-graphs: '", o.cuda_graphs, "' is not on or off"));
  }
  if (o.cuda_graphs == "on" && o.device == "cpu") {
    usage_error("--cuda-graphs on: CUDA graphs need a GPU (--device cuda); this run is on the CPU");
  }
  if (o.weight_decay_on != "mean" && o.weight_decay_on != "sum") {
    usage_error(cat("--weight-decay-on: '", o.weight_decay_on, "' is not mean or sum"));
  }
  if (o.weight_decay_on == "sum" && o.amb.decay_per_micro_batch) {
    usage_error(
        "--decay-per-micro-batch: --weight-decay-on sum already adds the decay per micro-batch");
  }
  if (o.weight_decay_on == "sum" && o.dbsl.enabled) {
    usage_error(
        "--weight-decay-on sum: DBSL's workers train at different batches; give the decay per "
        "sample (mean)");
  }
  if (o.checkpoint_every < 0) usage_error("--checkpoint-every must not be negative");
  if (o.checkpoint_every > 0 && o.checkpoint.empty()) {
    usage_error("--checkpoint-every needs --checkpoint FILE");
  }
  if (o.checkpoint_every_epoch && o.checkpoint.empty()) {
    usage_error("--checkpoint-every-epoch needs --checkpoint FILE");
  }
  if (o.resume_anyway && o.resume.empty()) usage_error("--resume-anyway needs --resume");
  if (o.resume == "auto" && o.checkpoint.empty())
    usage_error("--resume auto needs --checkpoint FILE");
  if (o.flush_interval <= 0) usage_error("--flush-interval must be positive");
  if (o.print_every < 0) usage_error("--print-every must not be negative");
  validate_async_methods(o);
  if (o.async && o.comm != CommMode::kPs) usage_error("--async needs --comm ps");
  // ps may sum in shared memory too: the workers' gradients added in rank order, as --emulate
  // adds them (the master then updates and sends the parameters as ever).
  const bool ps_in_shared_memory =
      o.comm == CommMode::kPs && o.allreduce == AllreduceVia::kSharedMemory;
  if (o.allreduce != AllreduceVia::kAuto && o.comm != CommMode::kAllreduce &&
      !ps_in_shared_memory) {
    usage_error(cat("--allreduce ", to_string(o.allreduce),
                    " needs --comm allreduce (ps takes --allreduce shm alone)"));
  }
  if (ps_in_shared_memory && (o.async || o.dbsl.enabled || o.servers > 1)) {
    usage_error(
        cat("--allreduce shm with --comm ps sums one synchronous step's gradients for "
            "one master; not with ",
            o.async          ? "--async"
            : o.dbsl.enabled ? "mb-train-dbsl"
                             : "--servers"));
  }
  validate_methods(o);
  if (!(o.bucket_mb >= 0) || !std::isfinite(o.bucket_mb)) {
    usage_error(cat("--bucket-mb ", o.bucket_mb, " must be a non-negative number of MiB"));
  }
  if (o.bucket_mb > 0 && o.comm != CommMode::kAllreduce)
    usage_error("--bucket-mb needs --comm allreduce");
  if (o.bucket_mb > 0 && o.amb.enabled) {
    usage_error(
        "--bucket-mb: an anytime step's gradient is final only after its last "
        "micro-batch, so it cannot be summed in buckets");
  }
  if (o.servers < 1) usage_error(cat("--servers ", o.servers, " must be at least 1"));
  if (o.servers > 1 && (o.comm != CommMode::kPs || o.dbsl.enabled)) {
    usage_error(cat("--servers ", o.servers, ": several servers serve ps, synchronous or --async (",
                    o.comm != CommMode::kPs ? "--comm allreduce has none" : "not DBSL", ")"));
  }
  if (o.servers > 1 && o.async) {
    // Each asynchronous server updates its shard on its own: no rank holds the whole model of
    // one step until the run's end, where server 0 gathers it (evaluation, checkpoint).
    const char* refused = o.checkpoint_every > 0     ? "--checkpoint-every"
                          : o.checkpoint_every_epoch ? "--checkpoint-every-epoch"
                          : o.eval_every > 0         ? "--eval-every"
                          : o.eval_every_epoch       ? "--eval-every-epoch"
                          : o.train_loss == "master" ? "--train-loss master"
                                                     : nullptr;
    if (refused != nullptr) {
      usage_error(cat(refused, ": with --servers ", o.servers,
                      " --async each server updates its shard on its own and the whole model "
                      "exists only at the end (evaluated and saved there); use one server"));
    }
  }
  if (o.compression.enabled() && (o.async || o.dbsl.enabled)) {
    usage_error(cat("--compress: the ", o.async ? "asynchronous" : "DBSL",
                    " exchange sends full-precision gradients; use it with synchronous ps or "
                    "allreduce"));
  }
  if (o.compression.enabled() && o.bucket_mb > 0) {
    usage_error(
        "--compress: compressed gradients are sent at once after the backward pass, "
        "not in --bucket-mb buckets");
  }
  if (o.async_min_grads < 1) usage_error("--async-min-grads must be at least 1");
  for (const auto& [flag, value] :
       {std::pair{"--async-master-time-limit", o.async_master_time_limit},
        std::pair{"--async-delay-std", o.async_delay_std}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      usage_error(cat(flag, " ", value, " must be a non-negative number of seconds"));
    }
    if (value > 0 && !o.async) usage_error(cat(flag, " needs --async"));
  }
  if (o.async_master_time_limit > 0 && o.async_min_grads != 1) {
    usage_error(
        "--async-master-time-limit and --async-min-grads are two rules for when the master "
        "updates: give one");
  }
  if (!(o.comm_timeout > 0) || !std::isfinite(o.comm_timeout)) {
    usage_error("--comm-timeout must be a positive number of seconds");
  }
  if (o.prefetch < 0 || o.prefetch > 64) {
    usage_error(cat("--prefetch ", o.prefetch, " is not a count from 0 to 64"));
  }
  if (o.comm_wait != "yield" && o.comm_wait != "spin") {
    usage_error(cat("--comm-wait: '", o.comm_wait, "' is not yield or spin"));
  }
  if (o.clock != ClockMode::kVirtual && (o.comm_model || !o.compute_model.empty())) {
    usage_error(cat(o.comm_model ? "--comm-model" : "--compute-model", " needs --clock virtual"));
  }
  if (o.clock != ClockMode::kVirtual && !o.cpu_quota.empty()) {
    usage_error(
        "--cpu-quota needs --clock virtual (on the wall clock put the rank in a cgroup with a "
        "CFS quota instead)");
  }
  if (o.dbsl.enabled) validate_dbsl(o);
  if (o.amb.enabled) {
    if (!o.amb.time_limit && !o.amb.auto_time_limit) {
      usage_error("--time-limit is required (seconds, or auto)");
    }
    if (o.amb.time_limit && !(*o.amb.time_limit > 0 && std::isfinite(*o.amb.time_limit))) {
      usage_error(cat("--time-limit ", *o.amb.time_limit, " must be positive (or auto)"));
    }
    if (o.amb.partitions < 1) {
      usage_error(cat("--partitions ", o.amb.partitions, " must be at least 1"));
    }
    if (o.global_batch_size == 0 && o.amb.partitions > o.batch_size) {
      usage_error(cat("--partitions ", o.amb.partitions, " is larger than --batch-size ",
                      o.batch_size, ": a micro-batch needs at least one sample"));
    }
  }
}

void validate_dbsl(const TrainOptions& o) {
  const DbslOptions& d = o.dbsl;
  if (d.base_batch < 1) usage_error(cat("--base-batch ", d.base_batch, " must be at least 1"));
  if (!(d.extra_time >= 1) || !std::isfinite(d.extra_time)) {
    usage_error(cat("--extra-time ", d.extra_time, " must be at least 1"));
  }
  if (d.small_workers < 0) usage_error("--small-workers must not be negative");
  parse_update_factor(d.update_factor);
  const int sources =
      (d.time_model.empty() ? 0 : 1) + (d.time_model_ab.empty() ? 0 : 1) + (d.calibrate ? 1 : 0);
  if (sources > 1) {
    usage_error("give one time model: --time-model FILE, --time-model-ab A,B or --calibrate");
  }
  if (!d.time_model_ab.empty()) parse_time_model_ab(d.time_model_ab, "--time-model-ab");
  if (d.plan_only) {
    if (d.calibrate) usage_error("--plan cannot --calibrate: it runs no worker");
    return;
  }
  if (sources == 0 && o.compute_model.empty()) {
    usage_error(
        "the plan needs a time model: --time-model FILE, --time-model-ab A,B, --calibrate, or "
        "--compute-model under --clock virtual");
  }
  if (d.json) usage_error("--json goes with --plan");
  if (d.workers != 0 || d.train_samples != 0) {
    usage_error(cat(d.workers != 0 ? "--workers" : "--train-samples",
                    " goes with --plan (a run takes them from mpirun and --data)"));
  }
  if (o.comm != CommMode::kPs) usage_error("--comm: DBSL's rank 0 is the parameter server (ps)");
  if (o.async)
    usage_error("--async: the DBSL server merges each push at once already (--sync waits)");
  if (o.amb.enabled) usage_error("--time-limit: DBSL workers take a number of samples per round");
  if (o.global_batch_size > 0 || o.lr_scaling != "none") {
    usage_error(cat(o.global_batch_size > 0 ? "--global-batch-size" : "--lr-scaling",
                    ": DBSL's batches and merge factors come from its plan (--base-batch)"));
  }
}

const char* tool_name(const TrainOptions& o) {
  if (o.dbsl.enabled) return "mb-train-dbsl";
  return o.amb.enabled ? "mb-train-amb" : "mb-train-fmb";
}

}  // namespace mbkit::train
