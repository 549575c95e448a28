#include "mbkit/tools/mb_train.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "mbkit/cli/cli.hpp"
#include "mbkit/comm/allreduce_trial.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/config.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/anytime.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/evaluate.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/metric_log.hpp"
#include "mbkit/train/straggler.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/signals.hpp"
#include "mbkit/util/term.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::tools::train {
namespace {

using Clock = std::chrono::steady_clock;
using mbkit::train::Checkpoint;
using mbkit::train::NamedArray;

constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();
constexpr int kMaxConsecutiveSkips = 20;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Cores this process may run on (its affinity mask, which mpirun and srun set when they bind).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;  // unknown: assume no spare core
  return std::max(1, CPU_COUNT(&set));
}

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

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

mbkit::train::AllreduceVia allreduce_via(const TrainOptions& o) {
  using mbkit::train::AllreduceVia;
  if (o.allreduce != "auto" && o.comm != "allreduce") {
    usage_error(cat("--allreduce ", o.allreduce, " needs --comm allreduce"));
  }
  if (o.allreduce == "auto") return AllreduceVia::kAuto;
  if (o.allreduce == "shm") return AllreduceVia::kSharedMemory;
  if (o.allreduce == "mpi") return AllreduceVia::kMpi;
  usage_error(cat("--allreduce: '", o.allreduce, "' is not auto, shm or mpi"));
}

void validate(const TrainOptions& o) {
  if (o.data.empty()) usage_error("--data is required");
  if (o.batch_size < 1) usage_error(cat("--batch-size ", o.batch_size, " must be at least 1"));
  if (o.epochs < 0 || o.steps < 0 || o.time_budget < 0) {
    usage_error("--epochs, --steps and --time-budget must not be negative");
  }
  if (o.epochs == 0 && o.steps == 0 && o.time_budget == 0) {
    usage_error("give the length of the run: --epochs, --steps or --time-budget");
  }
  if (o.eval_every < 0) usage_error("--eval-every must not be negative");
  if (o.test_size < 0) usage_error("--test-size must not be negative");
  if (o.eval_batch_size < 1) usage_error("--eval-batch-size must be at least 1");
  if (o.warmup_epochs < 0) usage_error("--warmup-epochs must not be negative");
  if (o.nan_policy != "stop" && o.nan_policy != "skip") {
    usage_error(cat("--nan-policy: '", o.nan_policy, "' is not stop or skip"));
  }
  if (o.checkpoint_every < 0) usage_error("--checkpoint-every must not be negative");
  if (o.checkpoint_every > 0 && o.checkpoint.empty()) {
    usage_error("--checkpoint-every needs --checkpoint FILE");
  }
  if (o.resume == "auto" && o.checkpoint.empty())
    usage_error("--resume auto needs --checkpoint FILE");
  if (o.flush_interval <= 0) usage_error("--flush-interval must be positive");
  if (o.print_every < 0) usage_error("--print-every must not be negative");
  if (o.comm != "ps" && o.comm != "allreduce") {
    usage_error(cat("--comm: '", o.comm, "' is not ps or allreduce"));
  }
  if (o.async && o.comm != "ps") usage_error("--async needs --comm ps");
  allreduce_via(o);  // checks the value
  if (!(o.bucket_mb >= 0) || !std::isfinite(o.bucket_mb)) {
    usage_error(cat("--bucket-mb ", o.bucket_mb, " must be a non-negative number of MiB"));
  }
  if (o.bucket_mb > 0 && o.comm != "allreduce") usage_error("--bucket-mb needs --comm allreduce");
  if (o.bucket_mb > 0 && o.amb.enabled) {
    usage_error(
        "--bucket-mb: an anytime step's gradient is final only after its last "
        "micro-batch, so it cannot be summed in buckets");
  }
  if (o.async_min_grads < 1) usage_error("--async-min-grads must be at least 1");
  if (!(o.comm_timeout > 0) || !std::isfinite(o.comm_timeout)) {
    usage_error("--comm-timeout must be a positive number of seconds");
  }
  prefetch_depth(o.prefetch);  // checks the value
  if (o.comm_wait != "yield" && o.comm_wait != "spin") {
    usage_error(cat("--comm-wait: '", o.comm_wait, "' is not yield or spin"));
  }
  mbkit::train::parse_straggler_profile(o.induce);
  mbkit::train::parse_slowdown(o.slowdown);
  if (o.clock != "wall" && o.clock != "virtual") {
    usage_error(cat("--clock: '", o.clock, "' is not wall or virtual"));
  }
  if (o.clock != "virtual" && (!o.comm_model.empty() || !o.compute_model.empty())) {
    usage_error(
        cat(o.comm_model.empty() ? "--compute-model" : "--comm-model", " needs --clock virtual"));
  }
  mbkit::train::parse_comm_model(o.comm_model);
  mbkit::train::parse_compute_models(o.compute_model);
  if (o.amb.enabled) {
    if (o.amb.time_limit.empty()) usage_error("--time-limit is required (seconds, or auto)");
    if (o.amb.time_limit != "auto") {
      const double limit = parse_double(o.amb.time_limit, "--time-limit");
      if (!(limit > 0)) {
        usage_error(cat("--time-limit ", o.amb.time_limit, " must be positive (or auto)"));
      }
    }
    if (o.amb.partitions < 1) {
      usage_error(cat("--partitions ", o.amb.partitions, " must be at least 1"));
    }
    if (o.amb.partitions > o.batch_size) {
      usage_error(cat("--partitions ", o.amb.partitions, " is larger than --batch-size ",
                      o.batch_size, ": a micro-batch needs at least one sample"));
    }
  }
}

const char* tool_name(const TrainOptions& o) {
  return o.amb.enabled ? "mb-train-amb" : "mb-train-fmb";
}

std::map<std::string, std::string> optimizer_map(const optim::OptimizerConfig& c) {
  return {{"name", c.name},
          {"weight_decay", cat(c.weight_decay)},
          {"momentum", cat(c.momentum)},
          {"nesterov", c.nesterov ? "true" : "false"},
          {"rmsprop_decay", cat(c.rmsprop_decay)},
          {"rmsprop_momentum", cat(c.rmsprop_momentum)},
          {"rmsprop_epsilon", cat(c.rmsprop_epsilon)},
          {"adam_beta1", cat(c.adam_beta1)},
          {"adam_beta2", cat(c.adam_beta2)},
          {"adam_epsilon", cat(c.adam_epsilon)}};
}

// `allreduce`: the sum a distributed allreduce run uses (shm or mpi: what auto chose).
std::string config_json(const TrainOptions& o, const nn::Graph& graph, std::int64_t planned_steps,
                        int world_size, int workers, double time_limit,
                        const std::string& allreduce,
                        const std::optional<comm::AllreduceTrial>& trial) {
  std::ostringstream out;
  {
    JsonWriter json(out, false);
    json.begin_object();
    json.key("data").value(o.data);
    json.key("test_data").value(o.test_data.empty() ? o.data : o.test_data);
    json.key("batch_size").value(o.batch_size);
    json.key("augment").value(o.augment);
    json.key("drop_last").value(o.drop_last);
    json.key("model").value(o.model.name);
    json.key("model_config").begin_object();
    for (const auto& [key, value] : o.model.to_map()) json.key(key).value(value);
    json.end_object();
    json.key("parameters").value(static_cast<std::uint64_t>(graph.parameter_count()));
    json.key("optimizer").begin_object();
    for (const auto& [key, value] : optimizer_map(o.optimizer)) json.key(key).value(value);
    json.end_object();
    json.key("lr").value(o.schedule.lr);
    json.key("lr_schedule").value(o.schedule.kind);
    json.key("decay_steps").value(o.schedule.decay_steps);
    json.key("decay_rate").value(o.schedule.decay_rate);
    json.key("staircase").value(o.schedule.staircase);
    json.key("milestones").array(o.schedule.milestones);
    json.key("gamma").value(o.schedule.gamma);
    json.key("end_lr").value(o.schedule.end_lr);
    json.key("warmup_epochs").value(o.warmup_epochs);
    json.key("epochs").value(o.epochs);
    json.key("steps").value(o.steps);
    json.key("planned_steps").value(planned_steps == kUnlimited ? std::int64_t{-1} : planned_steps);
    json.key("time_budget").value(o.time_budget);
    json.key("eval_every").value(o.eval_every);
    json.key("test_size").value(o.test_size);
    json.key("seed").value(o.seed);
    json.key("device").value(o.device);
    json.key("nan_policy").value(o.nan_policy);
    json.key("comm").value(o.comm);
    json.key("async").value(o.async);
    json.key("async_min_grads").value(o.async_min_grads);
    json.key("allreduce").value(allreduce);
    if (trial) {  // what --allreduce auto measured (seconds per sum) to choose `allreduce`
      json.key("allreduce_trial").begin_object();
      json.key("shm_seconds").value(trial->shared_memory_seconds);
      json.key("mpi_seconds").value(trial->mpi_seconds);
      json.end_object();
    }
    json.key("bucket_mb").value(o.bucket_mb);
    json.key("induce").value(o.induce);
    const auto profile = mbkit::train::parse_straggler_profile(o.induce);
    json.key("induce_spec").value(profile ? profile->spec() : std::string());
    json.key("slowdown").value(o.slowdown);
    json.key("comm_timeout").value(o.comm_timeout);
    json.key("clock").value(o.clock);
    json.key("comm_model").value(o.comm_model);
    json.key("compute_model").value(mbkit::train::parse_compute_models(o.compute_model).spec());
    json.key("world_size").value(world_size);
    json.key("workers").value(workers);
    json.key("global_batch_size").value(static_cast<std::int64_t>(workers) * o.batch_size);
    if (o.amb.enabled) {
      json.key("time_limit").value(time_limit);
      json.key("time_limit_option").value(o.amb.time_limit);
      json.key("partitions").value(o.amb.partitions);
      json.key("micro_batch_size").value(o.batch_size / o.amb.partitions);
      json.key("decay_per_micro_batch").value(o.amb.decay_per_micro_batch);
    }
    json.end_object();
  }
  return out.str();
}

std::vector<NamedArray> to_arrays(const std::vector<const nn::ParamSpec*>& specs,
                                  std::span<const float> buffer) {
  std::vector<NamedArray> arrays;
  for (const auto* spec : specs) {
    const auto begin = buffer.begin() + static_cast<std::ptrdiff_t>(spec->offset);
    arrays.push_back({spec->name, spec->shape, std::vector<float>(begin, begin + spec->size())});
  }
  return arrays;
}

void from_arrays(const std::vector<NamedArray>& arrays,
                 const std::vector<const nn::ParamSpec*>& specs, std::span<float> buffer,
                 const std::string& path) {
  if (arrays.size() != specs.size()) {
    data_error(cat(path, ": holds ", arrays.size(), " arrays where the model has ", specs.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (arrays[i].name != specs[i]->name || arrays[i].shape != specs[i]->shape) {
      data_error(cat(path, ": array ", i, " is ", arrays[i].name, " where the model has ",
                     specs[i]->name));
    }
    std::copy(arrays[i].values.begin(), arrays[i].values.end(),
              buffer.begin() + static_cast<std::ptrdiff_t>(specs[i]->offset));
  }
}

std::string describe_model(const models::ModelConfig& model) {
  if (model.name != "mlp") return model.name;
  std::vector<std::string> sizes;
  for (int size : model.hidden) sizes.push_back(cat(size));
  return cat("mlp (hidden ", sizes.empty() ? "none" : join(sizes, ","), ", ", model.activation,
             ")");
}

std::string describe_optimizer(const optim::OptimizerConfig& c) {
  std::string text = c.name;
  if (c.name == "momentum") text += cat(" ", c.momentum, c.nesterov ? " (nesterov)" : "");
  if (c.name == "rmsprop")
    text += cat(" (decay ", c.rmsprop_decay, ", momentum ", c.rmsprop_momentum, ")");
  if (c.name == "adam") text += cat(" (beta1 ", c.adam_beta1, ", beta2 ", c.adam_beta2, ")");
  return text + cat(", weight decay ", c.weight_decay);
}

std::string describe_schedule(const optim::ScheduleConfig& s) {
  std::string text = cat("lr ", s.lr, " ", s.kind);
  if (s.kind == "exponential") {
    text += cat(" (x", s.decay_rate, " every ", s.decay_steps, " steps",
                s.staircase ? ", staircase" : "", ")");
  } else if (s.kind == "multistep") {
    std::vector<std::string> epochs;
    for (double m : s.milestones) epochs.push_back(cat(m));
    text += cat(" (x", s.gamma, " at epochs ", join(epochs, ","), ")");
  } else if (s.kind == "linear") {
    text += cat(" (to ", s.end_lr, " at step ", s.total_steps, ")");
  }
  if (s.warmup_steps > 0) text += cat(", warm-up ", s.warmup_steps, " steps");
  return text;
}

/// Progress on stderr: a live line on a terminal, otherwise a line every `every` steps or 10 s.
class Progress {
 public:
  Progress(std::int64_t planned, std::int64_t steps_per_epoch, std::int64_t every)
      : planned_(planned),
        steps_per_epoch_(steps_per_epoch),
        every_(every),
        live_(stderr_is_terminal() && log::level() >= log::Level::kNormal) {}
  ~Progress() { clear(); }

  void step(std::int64_t step, double loss, std::int64_t correct, int samples, double step_time,
            double remaining_budget) {
    loss_ += loss * samples;
    correct_ += correct;
    samples_ += samples;
    time_ += step_time;
    ++steps_;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const bool due = live_ ? since >= 0.1
                           : (every_ > 0 ? step % every_ == 0 : since >= 10.0) || step == planned_;
    if (!due || log::level() < log::Level::kNormal) return;
    const double rate = time_ > 0 ? samples_ / time_ : 0;
    std::string line =
        strprintf("epoch %.2f  step %lld", static_cast<double>(step) / steps_per_epoch_,
                  static_cast<long long>(step));
    if (planned_ != kUnlimited) line += cat("/", planned_);
    line += strprintf("  loss %.4f  accuracy %.1f%%  %s samples/s", loss_ / samples_,
                      100.0 * static_cast<double>(correct_) / samples_, human_rate(rate).c_str());
    double eta = planned_ != kUnlimited && steps_ > 0
                     ? static_cast<double>(planned_ - step) * (time_ / steps_)
                     : std::numeric_limits<double>::infinity();
    eta = std::min(eta, remaining_budget);
    if (std::isfinite(eta)) line += "  ETA " + human_duration(eta);
    emit(line);
    last_ = now;
    loss_ = 0;
    correct_ = 0;
    samples_ = 0;
    time_ = 0;
    steps_ = 0;
  }

  /// A line that stays (evaluations, the end of the run).
  void note(const std::string& line) {
    clear();
    log::info(line);
  }

 private:
  static std::string human_rate(double rate) {
    return rate >= 1e4 ? strprintf("%.1fk", rate / 1e3) : strprintf("%.0f", rate);
  }
  void emit(const std::string& line) {
    if (live_) {
      std::fprintf(stderr, "\r%s: %s\033[K", log::program().c_str(), line.c_str());
      std::fflush(stderr);
      drawn_ = true;
    } else {
      log::info(line);
    }
  }
  void clear() {
    if (drawn_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
      drawn_ = false;
    }
  }
  std::int64_t planned_, steps_per_epoch_, every_;
  bool live_;
  bool drawn_ = false;
  Clock::time_point last_ = Clock::now();
  double loss_ = 0, time_ = 0;
  std::int64_t correct_ = 0, samples_ = 0, steps_ = 0;
};

}  // namespace

namespace {

/// Who does what in this run.
struct Role {
  bool distributed = false;
  bool parameter_server = false;  ///< ps with at least 2 ranks
  bool async = false;
  bool master = false;   ///< rank 0 of ps: computes no gradients
  bool computes = true;  ///< a worker
  int worker = 0;        ///< worker index of this rank
  int workers = 1;
  std::string comm = "local";  ///< local, ps, ps-async or allreduce (logs and checkpoints)
  bool shared_memory = false;  ///< allreduce sums through shared memory (--allreduce)
  /// --allreduce auto on one host: shared_memory is decided by timing both sums at start.
  bool time_allreduce = false;
};

Role decide_role(const TrainOptions& o, const comm::World& world) {
  Role role;
  role.distributed = world.distributed();
  if (!role.distributed) {
    if (o.async) usage_error("--async needs a master and workers: run under mpirun -n 2 or more");
    return role;
  }
  role.parameter_server = o.comm == "ps";
  role.async = o.async;
  role.master = role.parameter_server && world.rank() == 0;
  role.computes = !role.master;
  role.workers = role.parameter_server ? world.size() - 1 : world.size();
  role.worker = role.parameter_server ? world.rank() - 1 : world.rank();
  role.comm = role.parameter_server ? (o.async ? "ps-async" : "ps") : "allreduce";
  const auto via = allreduce_via(o);
  role.shared_memory =
      mbkit::train::SyncExchange::uses_shared_memory(world, role.parameter_server, via);
  if (via == mbkit::train::AllreduceVia::kAuto && role.shared_memory) {
    // The faster sum, timed at start, where both give the same bits: with two ranks each sum
    // is one addition, a + b. With more, their orders of addition differ, and a run must not
    // depend on a timing: MPI_Allreduce (--allreduce shm asks for the other). Buckets exist
    // only in the MPI sum.
    role.shared_memory = world.size() == 2 && o.bucket_mb <= 0;
    role.time_allreduce = role.shared_memory;
  } else if (o.bucket_mb > 0 && role.shared_memory) {
    usage_error(
        "--bucket-mb: the shared-memory sum has no buckets (it needs every gradient at once); "
        "use --allreduce mpi or auto");
  }
  if (role.async && o.async_min_grads > role.workers) {
    usage_error(cat("--async-min-grads ", o.async_min_grads, " is more than the ", role.workers,
                    " workers"));
  }
  return role;
}

/// The file worker `worker` of `workers` trains on, and whether it takes a slice of it.
struct WorkerData {
  std::string path;
  int slice_index = 0;
  int slice_count = 1;
};

// Expands the %d conversions (flags and width allowed) of a shard pattern: the first takes the
// worker index, the second the number of workers; %% is a percent sign.
std::string expand_pattern(const std::string& pattern, int worker, int workers) {
  std::string out;
  int conversions = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    bool zeros = false;
    for (; j < pattern.size() && pattern[j] == '0'; ++j) zeros = true;
    std::size_t width = 0;
    for (; j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width < 100; ++j)
      width = width * 10 + static_cast<std::size_t>(pattern[j] - '0');
    if (j >= pattern.size() || pattern[j] != 'd' || conversions == 2) {
      usage_error(cat("--data: '", pattern,
                      "' is not a shard pattern: it takes %d (or %05d) for the worker index and "
                      "optionally a second %d for the number of workers"));
    }
    const std::string digits = std::to_string(conversions == 0 ? worker : workers);
    if (digits.size() < width) out.append(width - digits.size(), zeros ? '0' : ' ');
    out += digits;
    ++conversions;
    i = j;
  }
  return out;
}

WorkerData worker_data(const std::string& data, int worker, int workers) {
  if (data.find('%') != std::string::npos) return {expand_pattern(data, worker, workers), 0, 1};
  if (data.find(',') != std::string::npos) {
    const auto files = split(data, ',');
    if (static_cast<int>(files.size()) != workers) {
      usage_error(cat("--data lists ", files.size(), " files for ", workers, " workers"));
    }
    return {files[static_cast<std::size_t>(worker)], 0, 1};
  }
  return {data, worker, workers};
}

// "0 on a; 1-3 on b": ranks grouped by host.
std::string describe_hosts(const std::vector<std::string>& hosts, const Role& role) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= hosts.size(); ++i) {
    if (i < hosts.size() && hosts[i] == hosts[begin]) continue;
    const std::string ranks = i - begin == 1 ? cat(begin) : cat(begin, "-", i - 1);
    parts.push_back(cat(ranks, " on ", hosts[begin]));
    begin = i;
  }
  std::string text = join(parts, "; ");
  if (role.parameter_server) text += " (rank 0 is the master)";
  return text;
}

// Every rank must run the same training: the ranks' descriptions are compared key by key and
// the first difference is reported with the ranks on each side.
void check_agreement(const comm::World& world, const std::vector<std::string>& lines) {
  std::string mine;
  for (const auto& line : lines) mine += line + "\n";
  const auto all = world.all_gather(mine);
  for (int rank = 1; rank < world.size(); ++rank) {
    if (all[static_cast<std::size_t>(rank)] == all[0]) continue;
    const auto theirs = split(all[static_cast<std::size_t>(rank)], '\n');
    std::string difference = "their settings";
    for (std::size_t i = 0; i < std::max(lines.size(), theirs.size()); ++i) {
      const std::string a = i < lines.size() ? lines[i] : "";
      const std::string b = i < theirs.size() ? theirs[i] : "";
      if (a != b) {
        difference =
            cat(a.empty() ? "(nothing)" : a, " on rank 0 but ", b.empty() ? "(nothing)" : b);
        break;
      }
    }
    std::vector<int> differing;
    for (int r = 1; r < world.size(); ++r) {
      if (all[static_cast<std::size_t>(r)] != all[0]) differing.push_back(r);
    }
    usage_error(cat("the ranks do not run the same training: ", difference, " on rank",
                    differing.size() > 1 ? "s " : " ", comm::rank_list(differing),
                    "; every rank must get the same options and data of the same shape"));
  }
}

struct ResumeHeader {
  double resumed = 0;
  double step = 0;
  double elapsed = 0;
  double epoch_progress = 0;
  double workers = 1;
  double same_comm = 0;
  double optimizer_steps = 0;
  double samples_seen = 0;
  double wall_elapsed = 0;
};

}  // namespace

namespace {

int train(const TrainOptions& options, comm::World& world) {
  const auto started = Clock::now();
  world.set_timeout(options.comm_timeout);
  world.set_wait_mode(options.comm_wait == "spin" ? comm::WaitMode::kSpin : comm::WaitMode::kYield);
  Role role = decide_role(options, world);
  const bool logs = world.rank() == 0;  // rank 0 prints, logs and checkpoints
  if (role.distributed && world.rank() != 0) {
    log::set_program(cat(log::program(), ": rank ", world.rank()));
  }
  const auto straggler_profile = mbkit::train::parse_straggler_profile(options.induce);
  const auto slowdown = mbkit::train::parse_slowdown(options.slowdown);
  slowdown.check_ranks(world.size());
  if (role.master && slowdown.factors.count(0) > 0) {
    usage_error("--slowdown: rank 0 is the master, which computes no gradients");
  }

  StopRequest stop_request;
  // An emulated worker has a core of its own: one thread unless told otherwise.
  const bool virtual_clock = options.clock == "virtual";
  auto backend =
      nn::make_backend(options.device, virtual_clock && options.threads == 0 ? 1 : options.threads);

  // Training data: workers load their part; the master only reads what the data is.
  const WorkerData my_data =
      worker_data(options.data, role.computes ? role.worker : 0, role.workers);
  std::optional<data::DataLoader> train_loader;
  data::DatasetInfo info;
  data::ImageShape shape;
  std::uint64_t my_rows = 0;
  std::int64_t my_batches = 0;
  if (role.computes) {
    data::LoaderOptions train_options;
    train_options.path = my_data.path;
    train_options.split = "train";
    train_options.batch_size = options.batch_size;
    train_options.seed = options.seed;
    train_options.drop_last = options.drop_last;
    train_options.augment = options.augment;
    train_options.slice_index = my_data.slice_index;
    train_options.slice_count = my_data.slice_count;
    train_options.prefetch = prefetch_depth(options.prefetch);
    train_loader.emplace(train_options);
    info = train_loader->info();
    shape = train_loader->shape();
    my_rows = train_loader->rows();
    my_batches = train_loader->batches_per_epoch();
  } else {
    info = data::DatasetFile::open(my_data.path).info();
    shape = info.shape();
  }

  // Evaluations: synchronous runs share the test split out over all ranks (every rank holds
  // the same model); the asynchronous master evaluates alone.
  const bool evaluates = !role.async || role.master;
  std::optional<data::DataLoader> test_loader;
  const std::string test_path = options.test_data.empty() ? my_data.path : options.test_data;
  if (evaluates) {
    data::LoaderOptions test_options;
    test_options.path = test_path;
    test_options.split = "test";
    test_options.batch_size = options.eval_batch_size;
    test_options.shuffle = false;
    test_options.prefetch = 1;
    if (!role.async) {
      test_options.slice_index = world.rank();
      test_options.slice_count = world.size();
    }
    const data::DatasetInfo test_info = data::DatasetFile::open(test_path).info();
    std::uint64_t test_rows = test_info.split(data::kTest).count;
    if (options.test_size > 0) {
      test_rows = std::min(test_rows, static_cast<std::uint64_t>(options.test_size));
      test_options.split_limit = test_rows;  // the same first rows whatever the ranks
    }
    if (test_rows >= static_cast<std::uint64_t>(test_options.slice_count)) {
      test_loader.emplace(test_options);
      if (test_loader->shape() != shape || test_loader->info().num_classes != info.num_classes) {
        data_error(cat(test_path, ": test images are ", test_loader->shape().text(), " in ",
                       test_loader->info().num_classes, " classes, the training data's ",
                       shape.text(), " in ", info.num_classes));
      }
    }
  }
  // Whether there is an evaluation is the same everywhere (the split exists or not).
  const bool has_test =
      role.async ? test_loader.has_value()
                 : world.all_gather(test_loader ? 1u : 0u) ==
                       std::vector<std::uint64_t>(static_cast<std::size_t>(world.size()), 1u);

  nn::Graph graph = models::build_model(options.model, {shape.channels, shape.height, shape.width},
                                        info.num_classes);
  nn::Network net(std::move(graph), *backend);
  net.initialize(options.seed);
  const nn::Graph& model = net.graph();
  // --allreduce auto on one host: the faster sum on this machine, for this buffer (the
  // gradients and the per-step tail of state and reports).
  std::optional<comm::AllreduceTrial> allreduce_trial;
  if (role.time_allreduce) {
    allreduce_trial = comm::time_allreduce_sums(
        world, net.parameters().size() + net.state().size() + 8 * role.workers + 8);
    role.shared_memory = allreduce_trial->shared_memory();
  }
  // What --allreduce auto chose, for the log and checkpoints.
  const std::string allreduce_used = role.comm != "allreduce" ? options.allreduce
                                     : role.shared_memory     ? "shm"
                                                              : "mpi";
  // The optimizer runs where updates are made: the master, or every rank of allreduce.
  // AMB: micro-batches of floor(batch / partitions) samples; a batch's leftover is not used.
  const bool amb = options.amb.enabled;
  const int micro_size = amb ? options.batch_size / options.amb.partitions : options.batch_size;
  // The AMB original adds weight decay per micro-batch: batch / micro-batch size times FMB's.
  optim::OptimizerConfig optimizer_config = options.optimizer;
  if (amb && options.amb.decay_per_micro_batch) {
    optimizer_config.weight_decay *= static_cast<double>(options.batch_size) / micro_size;
  }
  std::unique_ptr<optim::Optimizer> optimizer;
  if (!role.parameter_server || role.master) {
    optimizer = optim::make_optimizer(optimizer_config, net.parameters().size());
  } else {
    optim::make_optimizer(optimizer_config, 1);  // same validation everywhere
  }

  // The epoch: all workers' rows; a step of the synchronous modes takes a batch from each.
  const auto rows_of = world.all_gather(my_rows);
  const auto batches_of = world.all_gather(static_cast<std::uint64_t>(my_batches));
  std::uint64_t total_rows = 0;
  std::int64_t steps_per_epoch = 1;
  for (std::size_t r = 0; r < rows_of.size(); ++r) {
    total_rows += rows_of[r];
    steps_per_epoch = std::max(steps_per_epoch, static_cast<std::int64_t>(batches_of[r]));
  }
  const std::int64_t global_batch = static_cast<std::int64_t>(role.workers) * options.batch_size;
  if (role.async) {
    // An asynchronous step is one update of about async_min_grads batches.
    const auto per_step = static_cast<std::uint64_t>(options.async_min_grads) *
                          static_cast<std::uint64_t>(options.batch_size);
    steps_per_epoch = static_cast<std::int64_t>((total_rows + per_step - 1) / per_step);
  }

  if (role.distributed) {
    std::vector<std::string> lines = {
        cat("version=", MBKIT_VERSION, " ", MBKIT_GIT_COMMIT),
        cat("input=", shape.text(), " classes=", info.num_classes),
        cat("parameters=", model.parameter_count(), " state=", net.state().size()),
        cat("model=", describe_model(options.model)),
        cat("optimizer=", describe_optimizer(options.optimizer)),
        cat("batch_size=", options.batch_size),
        cat("comm=", options.comm, options.async ? " async" : "",
            " min_grads=", options.async_min_grads, " allreduce=", options.allreduce,
            " bucket_mb=", options.bucket_mb),
        cat("seed=", options.seed),
        cat("length=", options.epochs, " epochs, ", options.steps, " steps, ", options.time_budget,
            " s"),
        cat("eval_every=", options.eval_every, " test_size=", options.test_size),
        cat("induce=", options.induce, " slowdown=", options.slowdown),
        cat("checkpoint=", options.checkpoint, " every ", options.checkpoint_every),
        cat("nan_policy=", options.nan_policy),
        cat("amb=", options.amb.enabled, " time_limit=", options.amb.time_limit,
            " partitions=", options.amb.partitions, " decay=", options.amb.decay_per_micro_batch),
        cat("clock=", options.clock, " comm_model=", options.comm_model,
            " compute_model=", join(options.compute_model, " "))};
    check_agreement(world, lines);
  }

  // Cluster emulation: this rank's compute cost and the cost of a message.
  const auto compute_models = mbkit::train::parse_compute_models(options.compute_model);
  compute_models.check_ranks(world.size(), role.parameter_server ? 1 : 0);
  const auto compute_model = role.computes ? compute_models.for_rank(world.rank()) : std::nullopt;
  const std::uint64_t gradient_bytes = net.parameters().size() * sizeof(float);
  mbkit::train::CommModel comm_model;
  if (virtual_clock && role.distributed) {
    const auto given = mbkit::train::parse_comm_model(options.comm_model);
    comm_model = given ? *given : mbkit::train::measure_comm_model(world, gradient_bytes);
  }
  // CPU seconds of this worker's computing: its thread's, or its threads' share.
  const int threads = backend->threads();
  auto cpu_now = [threads] {
    return threads == 1 ? mbkit::train::thread_cpu_seconds()
                        : mbkit::train::process_cpu_seconds() / threads;
  };

  // AMB's time limit; "auto": the median over the workers of the time of a full batch (its
  // micro-batches, no delays), on the run's clock, measured on random inputs of the data's
  // shape so that the data stream is untouched; the model's state is put back afterwards.
  double time_limit = 0;
  if (amb && options.amb.time_limit != "auto") {
    time_limit = parse_double(options.amb.time_limit, "--time-limit");
  } else if (amb) {
    double mine = std::numeric_limits<double>::quiet_NaN();
    if (role.computes) {
      const int micro_batches = options.batch_size / micro_size;
      if (compute_model) {
        mine = micro_batches * compute_model->cost(micro_size);
      } else {
        const std::size_t image = static_cast<std::size_t>(shape.channels) *
                                  static_cast<std::size_t>(shape.height) *
                                  static_cast<std::size_t>(shape.width);
        std::vector<float> images(image * static_cast<std::size_t>(micro_size));
        std::vector<std::int32_t> labels(static_cast<std::size_t>(micro_size));
        Rng rng(options.seed, 0xa3b + static_cast<std::uint64_t>(world.rank()));
        for (float& x : images) x = static_cast<float>(rng.normal());
        for (std::size_t i = 0; i < labels.size(); ++i)
          labels[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(info.num_classes));
        const std::vector<float> saved_state(net.state().begin(), net.state().end());
        std::vector<double> times;
        for (int round = 0; round < 4; ++round) {  // one to warm up, the median of three
          const auto start = Clock::now();
          const double cpu_start = cpu_now();
          for (int k = 0; k < micro_batches; ++k) {
            net.forward(images.data(), labels.data(), micro_size, true, 1);
            net.backward(1.0, k > 0);
          }
          if (round > 0)
            times.push_back(virtual_clock ? cpu_now() - cpu_start : seconds_since(start));
        }
        std::sort(times.begin(), times.end());
        mine = times[1];
        std::copy(saved_state.begin(), saved_state.end(), net.state().begin());
      }
    }
    std::vector<double> measured;
    for (const std::uint64_t bits : world.all_gather(std::bit_cast<std::uint64_t>(mine))) {
      const double value = std::bit_cast<double>(bits);
      if (!std::isnan(value)) measured.push_back(value);
    }
    std::sort(measured.begin(), measured.end());
    time_limit = measured[measured.size() / 2];
    if (logs) {
      log::verbose(cat("--time-limit auto: a full batch takes ", short_duration(measured.front()),
                       " to ", short_duration(measured.back()), " on the workers; the limit is ",
                       short_duration(time_limit)));
    }
  }

  // Resume: rank 0 reads the checkpoint and hands the state to every rank.
  ResumeHeader resume;
  std::string resume_path = options.resume == "auto"
                                ? (fs::exists(options.checkpoint) ? options.checkpoint : "")
                                : options.resume;
  if (logs) {
    // A finished run's checkpoint is its result: replacing it takes a decision.
    if (!options.checkpoint.empty() && fs::exists(options.checkpoint) && !options.force &&
        resume_path != options.checkpoint) {
      fail(cat(options.checkpoint,
               " exists; use --resume auto to continue from it or --force to replace it"));
    }
  }
  if (logs && !resume_path.empty()) {
    const Checkpoint checkpoint = mbkit::train::read_checkpoint(resume_path);
    const std::vector<std::int64_t> input = {shape.channels, shape.height, shape.width};
    if (checkpoint.model != options.model.name ||
        checkpoint.model_config != options.model.to_map() || checkpoint.input_shape != input ||
        checkpoint.num_classes != info.num_classes) {
      const auto saved = models::ModelConfig::from_map(checkpoint.model, checkpoint.model_config);
      usage_error(cat(resume_path, " holds ", describe_model(saved), " for ",
                      checkpoint.input_shape.size() == 3
                          ? cat(checkpoint.input_shape[0], "x", checkpoint.input_shape[1], "x",
                                checkpoint.input_shape[2])
                          : "?",
                      " inputs and ", checkpoint.num_classes, " classes; this run is ",
                      describe_model(options.model), " for ", shape.text(), " and ",
                      info.num_classes));
    }
    if (checkpoint.optimizer != options.optimizer.name) {
      usage_error(cat(resume_path, " was trained with --optimizer ", checkpoint.optimizer,
                      "; this run asks for ", options.optimizer.name));
    }
    from_arrays(checkpoint.params, model.parameters(), net.parameters(), resume_path);
    from_arrays(checkpoint.state, model.state_arrays(), net.state(), resume_path);
    auto slots = optimizer->state();
    if (checkpoint.optimizer_state.size() != slots.size()) {
      data_error(cat(resume_path, ": optimizer state has ", checkpoint.optimizer_state.size(),
                     " arrays, ", options.optimizer.name, " needs ", slots.size()));
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto& saved = checkpoint.optimizer_state[i];
      if (saved.name != slots[i].first || saved.values.size() != slots[i].second->size()) {
        data_error(cat(resume_path, ": optimizer state ", saved.name, " does not fit this model"));
      }
      *slots[i].second = saved.values;
    }
    optimizer->set_steps(checkpoint.optimizer_steps);
    resume.resumed = 1;
    resume.step = static_cast<double>(checkpoint.step);
    resume.elapsed = checkpoint.elapsed;
    resume.wall_elapsed = checkpoint.wall_elapsed;
    resume.epoch_progress = checkpoint.epoch_progress;
    resume.workers = static_cast<double>(checkpoint.workers);
    resume.same_comm = checkpoint.comm == role.comm ? 1 : 0;
    resume.optimizer_steps = static_cast<double>(checkpoint.optimizer_steps);
    resume.samples_seen = checkpoint.epoch_progress * static_cast<double>(total_rows);
    log::info(cat("resuming from ", resume_path, " at step ", checkpoint.step,
                  checkpoint.workers != role.workers
                      ? cat(" (saved by ", checkpoint.workers, " workers, now ", role.workers,
                            ": the data order differs from an uninterrupted run)")
                      : ""));
  }
  // Every rank starts from rank 0's model (and, when all of them update, its optimizer).
  if (role.distributed) {
    world.rendezvous("start-up");
    world.broadcast(
        std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&resume), sizeof resume), 0);
    world.broadcast(net.parameters(), 0);
    world.broadcast(net.state(), 0);
    if (!role.parameter_server) {
      for (auto& [name, values] : optimizer->state()) world.broadcast(*values, 0);
      optimizer->set_steps(static_cast<std::int64_t>(resume.optimizer_steps));
    }
  }
  std::int64_t step = static_cast<std::int64_t>(resume.step);
  const std::int64_t step_base = step;
  const double epoch_base = resume.epoch_progress;
  const double elapsed_before = resume.elapsed;
  const double wall_before = resume.wall_elapsed;
  // The run's clock: real seconds, or the emulated cluster's (kept by rank 0).
  double virtual_now = elapsed_before;
  auto clock_now = [&] {
    return virtual_clock ? virtual_now : elapsed_before + seconds_since(started);
  };
  auto wall_now = [&] { return wall_before + seconds_since(started); };
  double samples_seen = resume.samples_seen;
  auto epoch_at = [&](std::int64_t s) {
    if (role.async) return samples_seen / static_cast<double>(total_rows);
    return epoch_base + static_cast<double>(s - step_base) / static_cast<double>(steps_per_epoch);
  };

  std::int64_t planned = kUnlimited;
  if (options.steps > 0) planned = options.steps;
  if (options.epochs > 0 && !role.async) {
    planned = std::min(planned, step_base + static_cast<std::int64_t>(
                                                std::ceil((options.epochs - epoch_base) *
                                                          static_cast<double>(steps_per_epoch))));
  }
  optim::ScheduleConfig schedule_config = options.schedule;
  schedule_config.warmup_steps = static_cast<std::int64_t>(
      std::llround(options.warmup_epochs * static_cast<double>(steps_per_epoch)));
  if (schedule_config.kind == "linear" && schedule_config.total_steps == 0) {
    if (planned != kUnlimited) {
      schedule_config.total_steps = planned;
    } else if (options.epochs > 0) {
      schedule_config.total_steps = static_cast<std::int64_t>(
          std::ceil(options.epochs * static_cast<double>(steps_per_epoch)));
    }
  }
  const optim::LearningRateSchedule schedule(schedule_config);

  // Workers continue their data stream where the checkpoint left it: exactly when the same
  // workers resume a synchronous run, else from the same point of the epoch.
  if (train_loader && resume.resumed != 0) {
    const std::int64_t batches = train_loader->batches_per_epoch();
    if (static_cast<int>(resume.workers) == role.workers && resume.same_comm != 0 && !role.async) {
      train_loader->seek(step / batches, step % batches);
    } else {
      const double epoch = std::floor(epoch_base);
      const auto index =
          static_cast<std::int64_t>((epoch_base - epoch) * static_cast<double>(batches));
      train_loader->seek(static_cast<std::int64_t>(epoch), std::min(index, batches - 1));
    }
  }

  const std::vector<std::string> hosts = world.all_gather(world.host());
  std::optional<mbkit::train::MetricLog> metric_log;
  if (logs && !options.log.empty()) {
    if (resume.resumed != 0 && fs::exists(options.log)) {
      metric_log.emplace(
          mbkit::train::MetricLog::append(options.log, step, options.flush_interval));
    } else {
      mbkit::train::RunInfo run;
      run.tool = tool_name(options);
      run.version = cat(MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, ")");
      run.command_line = cli::recorded_command_line();
      run.config_json = config_json(options, model, planned, world.size(), role.workers, time_limit,
                                    allreduce_used, allreduce_trial);
      run.seed = options.seed;
      run.host = world.host();
      run.start_time = utc_now();
      run.world_size = world.size();
      run.model = options.model.name;
      run.dataset = info.name;
      run.clock = options.clock;
      run.comm_model = virtual_clock && role.distributed ? comm_model.spec() : "";
      run.compute_model = compute_models.spec();
      metric_log.emplace(
          mbkit::train::MetricLog::create(options.log, run, options.force, options.flush_interval));
    }
  }

  // The parameter table.
  if (logs) {
    log::info(cat("mbkit ", MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, "), ", backend->description()));
    auto row = [](const char* key, const std::string& value) {
      log::info(strprintf("  %-10s %s", key, value.c_str()));
    };
    const std::string data_text =
        role.distributed && my_data.slice_count == 1 && options.data.find('%') != std::string::npos
            ? cat(options.data, " (a shard per worker)")
            : (options.data.find(',') != std::string::npos ? "a file per worker" : options.data);
    row("data",
        cat(data_text, ": ", info.name, ", ", total_rows, " training images of ", shape.text(),
            ", ", info.num_classes, " classes", options.augment ? ", augmented (crop, flip)" : ""));
    row("test",
        has_test ? cat(test_path,
                       options.test_size > 0 ? cat(": first ", options.test_size, " images") : "",
                       options.eval_every > 0 ? cat(", every ", options.eval_every, " steps")
                                              : ", at the end",
                       role.distributed && !role.async
                           ? cat(", shared out over ", world.size(), " ranks")
                           : "")
                 : "none (no test split)");
    row("model",
        cat(describe_model(options.model), ": ",
            with_commas(static_cast<std::int64_t>(model.parameter_count())), " parameters"));
    row("optimizer",
        describe_optimizer(optimizer_config) + (amb && options.amb.decay_per_micro_batch
                                                    ? cat(" (", options.optimizer.weight_decay,
                                                          " per micro-batch, as the AMB original)")
                                                    : ""));
    if (amb) {
      const std::int64_t micro_batches = options.batch_size / micro_size;
      row("anytime", cat("time limit ", short_duration(time_limit),
                         options.amb.time_limit == "auto" ? " (auto: a full batch, measured)" : "",
                         ", ", micro_batches, " micro-batches of ", micro_size, " samples",
                         micro_batches * micro_size < options.batch_size
                             ? cat(" (", options.batch_size - micro_batches * micro_size,
                                   " samples of each batch unused)")
                             : ""));
    }
    row("schedule", describe_schedule(schedule_config));
    if (role.distributed) {
      row("workers",
          cat(role.workers, " (", role.comm,
              role.parameter_server   ? ""
              : role.shared_memory    ? " through shared memory"
              : options.bucket_mb > 0 ? cat(" with MPI_Iallreduce in buckets of ",
                                            options.bucket_mb, " MiB during the backward pass")
                                      : " with MPI_Allreduce",
              allreduce_trial ? cat(": ", short_duration(allreduce_trial->shared_memory_seconds),
                                    " per sum against MPI_Allreduce's ",
                                    short_duration(allreduce_trial->mpi_seconds), " at start")
                              : "",
              role.async ? cat(", an update per ", options.async_min_grads, " gradient",
                               options.async_min_grads > 1 ? "s" : "")
                         : "",
              "), ranks ", describe_hosts(hosts, role)));
      row("batch", cat(options.batch_size, " per worker, ", global_batch,
                       role.async ? " per round of all workers" : " per step", ", ",
                       steps_per_epoch, " steps per epoch"));
    } else {
      row("batch", cat(options.batch_size, " per step, ", steps_per_epoch, " steps per epoch"));
    }
    if (straggler_profile) row("stragglers", straggler_profile->describe());
    if (!slowdown.empty()) row("slowdown", slowdown.describe());
    if (virtual_clock) {
      row("clock", cat("virtual: a core per worker, compute ", compute_models.describe(),
                       role.distributed ? cat(", messages ", comm_model.describe()) : "",
                       "; induced delays are not slept"));
    }
    std::string length =
        planned == kUnlimited ? "until the time budget" : cat(with_commas(planned), " steps");
    if (options.epochs > 0) length += cat(" (", options.epochs, " epochs)");
    if (options.time_budget > 0) length += cat(", at most ", human_duration(options.time_budget));
    row("length", length);
    row("seed", cat(options.seed));
    if (metric_log) row("log", options.log);
    if (!options.checkpoint.empty()) {
      row("checkpoint",
          cat(options.checkpoint,
              options.checkpoint_every > 0 ? cat(" every ", options.checkpoint_every, " steps")
                                           : "",
              " and at the end"));
    }
    log::verbose("layers:\n" + model.summary());
  }

  auto save_checkpoint = [&](double elapsed) {
    Checkpoint checkpoint;
    checkpoint.model = options.model.name;
    checkpoint.model_config = options.model.to_map();
    checkpoint.input_shape = {shape.channels, shape.height, shape.width};
    checkpoint.num_classes = info.num_classes;
    checkpoint.params = to_arrays(model.parameters(), net.parameters());
    checkpoint.state = to_arrays(model.state_arrays(), net.state());
    checkpoint.optimizer = options.optimizer.name;
    checkpoint.optimizer_config = optimizer_map(options.optimizer);
    checkpoint.optimizer_steps = optimizer->steps();
    for (const auto& [name, values] : optimizer->state()) {
      checkpoint.optimizer_state.push_back(
          {name, {static_cast<std::int64_t>(values->size())}, *values});
    }
    checkpoint.step = step;
    checkpoint.epoch = step / steps_per_epoch;
    checkpoint.batch_in_epoch = step % steps_per_epoch;
    checkpoint.epoch_progress = epoch_at(step);
    checkpoint.workers = role.workers;
    checkpoint.comm = role.comm;
    checkpoint.seed = options.seed;
    checkpoint.elapsed = elapsed;
    checkpoint.wall_elapsed = wall_now();
    checkpoint.dataset = info.name;
    checkpoint.mean = info.mean;
    checkpoint.std = info.std;
    checkpoint.config_json = config_json(options, model, planned, world.size(), role.workers,
                                         time_limit, allreduce_used, allreduce_trial);
    checkpoint.created_by = cat(tool_name(options), " ", MBKIT_VERSION);
    mbkit::train::write_checkpoint(options.checkpoint, checkpoint);
  };

  Progress progress(planned, steps_per_epoch, options.print_every);
  if (!logs) log::set_level(std::min(log::level(), log::Level::kNormal));
  auto run_evaluation = [&](double elapsed) {
    if (!has_test) return;
    mbkit::train::EvalResult result;
    if (test_loader) result = mbkit::train::evaluate(net, *test_loader);
    if (!role.async && role.distributed) {
      world.rendezvous(cat("evaluation at step ", step));
      result.reduce(world);
    }
    if (!logs) return;
    progress.note(
        strprintf("eval at step %lld (epoch %.2f): loss %.4f, accuracy %.2f%% on %lld images",
                  static_cast<long long>(step), epoch_at(step), result.loss(),
                  100.0 * result.accuracy(), static_cast<long long>(result.samples)));
    if (metric_log) {
      metric_log->add(mbkit::train::EvalRecord{step, elapsed, epoch_at(step), result.loss(),
                                               result.accuracy(), result.samples, wall_now()});
    }
  };

  // One worker's step: the induced delay, then the gradient of its batch's summed loss,
  // scaled by 1 / nominal (see mbkit/train/exchange.hpp).
  std::optional<mbkit::train::StragglerSampler> sampler;
  if (straggler_profile && role.computes) {
    sampler.emplace(*straggler_profile, options.seed, world.rank());
  }
  auto sleep_for = [](double seconds) {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  };
  double previous_send = 0, previous_wait = 0;
  int last_drawn = 0;  // samples of the last batch drawn (the nominal of a single process)
  std::function<void()> between_micro_batches;  // async AMB: take newer parameters
  // Sync allreduce with --bucket-mb: the backward pass hands finished gradients to the exchange.
  std::function<void(std::size_t)> gradients_ready;
  double backward_exchange_time = 0;  // seconds of it inside the pass (sending, not computing)
  // One worker's round. FMB: the whole batch. AMB: micro-batches until the time limit, which
  // counts from the start of the round (induced delays included): one is always done, a
  // started one is finished, and the batch's leftover (batch mod micro size) is never used.
  auto compute = [&](std::int64_t at_step, double loss_scale) {
    mbkit::train::WorkerReport report;
    report.rank = world.rank();
    const auto round_start = Clock::now();
    double emulated = 0;  // virtual clock: seconds since the round started
    // Under the virtual clock delays are counted, not slept, and compute is CPU time or the
    // compute model's cost.
    if (sampler) {
      report.sleep_time = sampler->next();
      if (!virtual_clock) sleep_for(report.sleep_time);
      emulated += report.sleep_time;
    }
    auto elapsed = [&] { return virtual_clock ? emulated : seconds_since(round_start); };
    const data::Batch& batch = train_loader->next();
    last_drawn = batch.size;
    // FMB: one micro-batch, the whole batch, with no time limit.
    const auto plan = mbkit::train::split_batch(batch.size, amb ? micro_size : batch.size);
    const double scale = loss_scale > 0 ? loss_scale : 1.0 / batch.size;
    const std::size_t image = batch.images.size() / static_cast<std::size_t>(batch.size);
    // Dropout masks differ between workers; worker 0 draws those of a single-process run.
    const std::uint64_t step_seed =
        Rng(options.seed, 0x57e9 + static_cast<std::uint64_t>(at_step) +
                              (static_cast<std::uint64_t>(role.worker) << 40))
            .next_u64();
    auto run_micro_batch = [&](int k) {
      const auto compute_start = Clock::now();
      const double cpu_start = virtual_clock ? cpu_now() : 0;
      const std::size_t offset = static_cast<std::size_t>(k) * static_cast<std::size_t>(plan.size);
      const auto outcome =
          net.forward(batch.images.data() + offset * image, batch.labels.data() + offset, plan.size,
                      true, step_seed + static_cast<std::uint64_t>(k) * 0x9e3779b97f4a7c15ULL);
      backward_exchange_time = 0;
      net.backward(scale, k > 0, gradients_ready);
      const double cost = !virtual_clock  ? seconds_since(compute_start) - backward_exchange_time
                          : compute_model ? compute_model->cost(plan.size)
                                          : cpu_now() - cpu_start - backward_exchange_time;
      const double extra = slowdown.extra_delay(world.rank(), cost);
      if (!virtual_clock) sleep_for(extra);
      emulated += cost + extra;
      report.compute_time += cost;
      report.sleep_time += extra;
      report.samples += plan.size;
      report.loss_sum += outcome.loss_sum;
      report.correct += outcome.correct;
    };
    const auto round = mbkit::train::run_anytime_round(
        plan, amb ? time_limit : std::numeric_limits<double>::infinity(), elapsed, run_micro_batch,
        between_micro_batches);
    report.micro_batches = round.done;
    report.finished_early = amb && round.finished_early;
    report.send_time = previous_send;
    report.wait_time = previous_wait;
    report.stop = stop_request.requested() ? mbkit::train::kSignalled : mbkit::train::kContinue;
    return report;
  };
  auto worker_line = [&](std::int64_t at_step, const mbkit::train::WorkerReport& r) {
    if (!options.worker_log) return;
    log::info(cat(
        world.rank() == 0 ? "rank 0: " : "",
        strprintf("%s %lld: %lld samples, loss %.4f, compute %.1f ms, sleep %.1f ms, "
                  "previous send %.1f ms, wait %.1f ms",
                  role.async ? "round" : "step", static_cast<long long>(at_step),
                  static_cast<long long>(r.samples),
                  r.samples > 0 ? r.loss_sum / static_cast<double>(r.samples) : 0.0,
                  1e3 * r.compute_time, 1e3 * r.sleep_time, 1e3 * r.send_time, 1e3 * r.wait_time),
        role.async ? cat(", on parameters of step ", r.based_on) : ""));
  };

  const auto budget =
      options.time_budget > 0 ? options.time_budget : std::numeric_limits<double>::infinity();
  int consecutive_skips = 0;
  std::int64_t skipped = 0;
  std::int64_t finished_early = 0;  // AMB: worker rounds that did their whole batch in time
  bool evaluated_now = false;
  // Rank 0's bookkeeping of a combined step: update decision, logs, progress.
  // Returns kDiverged when the nan policy ends the run.
  auto finish_step = [&](const mbkit::train::CombinedStep& combined, double step_time, double lr) {
    const double samples = static_cast<double>(std::max<std::int64_t>(combined.samples, 1));
    const double loss = combined.mean_loss();
    const double elapsed = clock_now();
    if (metric_log) {
      metric_log->add(mbkit::train::StepRecord{
          step, elapsed, epoch_at(step), loss, static_cast<double>(combined.correct) / samples, lr,
          combined.samples, step_time,
          // An emulated step can take no time (gradients arriving together at a master whose
          // update is free under a compute model): its rate is undefined.
          step_time > 0 ? static_cast<double>(combined.samples) / step_time
                        : std::numeric_limits<double>::quiet_NaN(),
          wall_now()});
      if (role.distributed || amb) {
        for (const auto& r : combined.workers) {
          metric_log->add(mbkit::train::WorkerRecord{
              step, r.rank, r.samples, r.compute_time, r.sleep_time, r.send_time, r.wait_time,
              r.staleness, r.micro_batches, r.finished_early ? 1 : 0});
        }
      }
      if (role.distributed) {
        metric_log->add(
            mbkit::train::CollectRecord{step, static_cast<std::int64_t>(combined.workers.size()),
                                        combined.samples, combined.wait_time});
      }
      metric_log->flush_if_due();
    }
    for (const auto& r : combined.workers) {
      if (!r.finished_early) continue;
      if (finished_early++ == 0) {
        log::warn(cat("step ", step, ": ",
                      role.distributed ? cat("rank ", r.rank, " did its") : "the",
                      " whole batch of ", r.samples,
                      " samples before the time limit: grow "
                      "--batch-size or shrink --time-limit (counted in the log's "
                      "/workers/finished_early)"));
      }
    }
    progress.step(step, loss, combined.correct, static_cast<int>(combined.samples), step_time,
                  budget - (clock_now() - elapsed_before));
  };
  // The nan policy, decided where the update is made (identically on every rank of allreduce).
  auto accept_update = [&](double loss) -> int {
    if (std::isfinite(loss)) {
      consecutive_skips = 0;
      return mbkit::train::kContinue;
    }
    if (options.nan_policy == "skip") {
      ++skipped;
      if (++consecutive_skips > kMaxConsecutiveSkips) return mbkit::train::kDiverged;
      if (logs) {
        log::warn(cat("non-finite loss at step ", step, "; update skipped (--nan-policy skip)"));
      }
      return -1;  // skip this update
    }
    return mbkit::train::kDiverged;
  };
  auto after_step = [&](double elapsed) {
    evaluated_now = false;
    if (options.eval_every > 0 && step % options.eval_every == 0) {
      run_evaluation(elapsed);
      evaluated_now = true;
    }
    if (logs && options.checkpoint_every > 0 && step % options.checkpoint_every == 0)
      save_checkpoint(elapsed);
  };
  auto rank0_stop = [&]() {
    if (stop_request.requested()) return static_cast<int>(mbkit::train::kSignalled);
    if (clock_now() - elapsed_before >= budget) return static_cast<int>(mbkit::train::kFinished);
    return static_cast<int>(mbkit::train::kContinue);
  };

  int stop = step >= planned ? mbkit::train::kFinished : mbkit::train::kContinue;
  const std::int64_t nominal = role.distributed ? global_batch : 0;  // 0: the batch's size
  if (!role.async) {
    mbkit::train::SyncExchange exchange(world, role.parameter_server,
                                        role.shared_memory
                                            ? mbkit::train::AllreduceVia::kSharedMemory
                                            : mbkit::train::AllreduceVia::kMpi);
    if (options.bucket_mb > 0) {
      exchange.set_bucket_floats(std::max<std::size_t>(
          1, static_cast<std::size_t>(options.bucket_mb * 1024.0 * 1024.0 / sizeof(float))));
    }
    if (exchange.buckets()) {
      gradients_ready = [&](std::size_t from) {
        exchange.gradients_ready(net.gradients(), from);
        backward_exchange_time = exchange.progress_time();
      };
    }
    // The small per-step values ride in the gradients' message (one collective per step);
    // with shared memory, the backward pass writes the gradients into the shared window.
    std::span<float> exchange_tail;
    if (role.distributed) {
      const std::size_t tail_floats = exchange.tail_floats(net.state().size());
      exchange_tail = net.gradient_tail(tail_floats);
      if (exchange.shared_memory()) {
        net.move_gradients_to(exchange.shared_buffer(net.gradient_buffer().size()));
        exchange_tail = net.gradient_tail(tail_floats);
      }
    }
    if (role.parameter_server) {
      // The master's verdict before the first step (the run may be complete already).
      stop = exchange.distribute(net.parameters(), net.state(),
                                 logs ? std::max(stop, rank0_stop()) : 0, step);
    } else if (logs) {
      stop = std::max(stop, rank0_stop());
    }
    if (!role.parameter_server && role.distributed) {
      std::int64_t verdict = stop;
      world.broadcast(
          std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&verdict), sizeof verdict), 0);
      stop = static_cast<int>(verdict);
    }
    while (stop == mbkit::train::kContinue) {
      const auto step_start = Clock::now();
      const double lr = schedule.at(step, epoch_at(step));
      mbkit::train::WorkerReport report;
      if (role.computes) {
        report = compute(step, nominal > 0 ? 1.0 / static_cast<double>(nominal) : 0.0);
        if (!role.parameter_server && logs && step + 1 < planned) {
          report.stop = std::max(report.stop, rank0_stop());
        }
        if (!role.parameter_server && step + 1 >= planned) {
          report.stop = std::max(report.stop, static_cast<int>(mbkit::train::kFinished));
        }
      }
      const std::int64_t step_nominal = nominal > 0 ? nominal : last_drawn;
      auto combined =
          exchange.combine(net.gradients(), net.state(), report, step, step_nominal, exchange_tail);
      if (role.computes) worker_line(step + 1, report);
      int verdict = combined.stop;
      double update_time = 0;  // virtual clock: CPU seconds of the update (free with a model)
      if (!role.parameter_server || role.master) {
        const double loss = combined.mean_loss();
        const int decision = accept_update(loss);
        if (decision == mbkit::train::kContinue) {
          const double cpu_start = virtual_clock && compute_models.empty() ? cpu_now() : 0;
          optimizer->step(net.parameters(), net.gradients(), lr);
          if (virtual_clock && compute_models.empty()) update_time = cpu_now() - cpu_start;
        } else if (decision == mbkit::train::kDiverged) {
          verdict = mbkit::train::kDiverged;
        }
      }
      ++step;
      samples_seen += static_cast<double>(combined.samples);
      if (role.master) {
        verdict = std::max(verdict, rank0_stop());
        if (step >= planned) verdict = std::max(verdict, static_cast<int>(mbkit::train::kFinished));
      }
      if (role.parameter_server) {
        verdict = exchange.distribute(net.parameters(), net.state(), verdict, step);
      }
      previous_send = exchange.last_send_time();
      previous_wait = exchange.last_wait_time();
      double step_time = seconds_since(step_start);
      if (virtual_clock && logs) {
        // The emulated step: the slowest worker, the exchange, the update (virtual_clock.hpp).
        std::vector<mbkit::train::SyncWorkerTime> times;
        for (const auto& r : combined.workers) times.push_back({r.sleep_time, r.compute_time});
        const auto timing = mbkit::train::sync_step_time(times, role.parameter_server, comm_model,
                                                         gradient_bytes, update_time);
        for (std::size_t i = 0; i < combined.workers.size(); ++i) {
          combined.workers[i].send_time = timing.send;
          combined.workers[i].wait_time = timing.wait[i];
        }
        combined.wait_time = timing.gather;
        step_time = timing.end;
        virtual_now += timing.end;
      }
      if (logs) finish_step(combined, step_time, lr);
      stop = verdict;
      if (stop == mbkit::train::kDiverged) break;
      after_step(clock_now());
    }
  } else if (role.master) {
    mbkit::train::AsyncMaster master(world, net.parameters().size(), net.state().size());
    if (virtual_clock) {
      master.use_virtual_clock(
          comm_model.message(gradient_bytes + net.state().size() * sizeof(float)), virtual_now);
    }
    master.start(net.parameters(), net.state(), step);
    std::vector<float> state(net.state().size());
    const double planned_samples = options.epochs > 0
                                       ? options.epochs * static_cast<double>(total_rows)
                                       : std::numeric_limits<double>::infinity();
    if (samples_seen >= planned_samples) stop = mbkit::train::kFinished;
    stop = std::max(stop, rank0_stop());
    while (stop == mbkit::train::kContinue) {
      const auto step_start = Clock::now();
      const double virtual_start = virtual_now;
      const double lr = schedule.at(step, epoch_at(step));
      const auto combined = master.collect(net.gradients(), state, options.async_min_grads, step);
      std::copy(state.begin(), state.end(), net.state().begin());
      const double loss = combined.mean_loss();
      const int decision = accept_update(loss);
      if (decision == mbkit::train::kContinue) {
        const double cpu_start = virtual_clock && compute_models.empty() ? cpu_now() : 0;
        optimizer->step(net.parameters(), net.gradients(), lr);
        if (virtual_clock && compute_models.empty()) master.advance(cpu_now() - cpu_start);
      }
      ++step;
      samples_seen += static_cast<double>(combined.samples);
      if (virtual_clock) virtual_now = master.virtual_now();
      finish_step(combined, virtual_clock ? virtual_now - virtual_start : seconds_since(step_start),
                  lr);
      stop = std::max(combined.stop, rank0_stop());
      if (decision == mbkit::train::kDiverged) stop = mbkit::train::kDiverged;
      if (step >= planned || samples_seen >= planned_samples)
        stop = std::max(stop, static_cast<int>(mbkit::train::kFinished));
      if (stop == mbkit::train::kContinue) master.publish(net.parameters(), net.state(), step);
      if (stop != mbkit::train::kDiverged) after_step(clock_now());
    }
    master.finish(step, stop);
    if (master.discarded() > 0) {
      log::verbose(cat(master.discarded(), " gradients arrived after the end and were not used"));
    }
  } else {
    mbkit::train::AsyncWorker worker(world, net.parameters().size(), net.state().size());
    std::int64_t based_on = 0;
    std::int64_t rounds = 0;
    // AMB, as the original's async strategy: newer parameters are taken between micro-batches
    // (the virtual clock's master decides at round starts, so not there).
    bool master_stopped = false;
    if (amb && !virtual_clock) {
      between_micro_batches = [&] {
        if (!master_stopped && !worker.refresh(net.parameters(), net.state(), false, based_on)) {
          master_stopped = true;
        }
      };
    }
    // Under the virtual clock the master decides which parameters each round starts from.
    while (!master_stopped &&
           worker.refresh(net.parameters(), net.state(), rounds == 0 || virtual_clock, based_on)) {
      auto report = compute(based_on + rounds, 1.0);
      report.based_on = based_on;
      const auto send_start = Clock::now();
      worker.send(net.gradients(), net.state(), report);
      previous_wait = seconds_since(send_start);  // waiting for the previous send to finish
      previous_send = 0;
      ++rounds;
      worker_line(rounds, report);
    }
    worker.finish();
    stop = worker.stop_code();
    if (worker.skipped() > 0) {
      log::verbose(cat(worker.skipped(), " parameter sets were overtaken before being used"));
    }
  }

  const double elapsed = clock_now();
  if (stop == mbkit::train::kDiverged) {
    if (metric_log) metric_log->close();
    const std::string where = cat("non-finite loss at step ", step - 1, " (epoch ",
                                  strprintf("%.2f", epoch_at(step - 1)), ")");
    const std::string message =
        options.nan_policy == "skip"
            ? cat(where, ", ", consecutive_skips, " steps in a row: --nan-policy skip ",
                  "gives up after ", kMaxConsecutiveSkips, "; lower --lr")
            : cat(where, "; lower --lr, or --nan-policy skip to skip such steps");
    if (logs) throw Error(message, ExitCode::kDiverged);
    return static_cast<int>(ExitCode::kDiverged);
  }
  if (stop == mbkit::train::kSignalled) {
    const int signal_number = stop_request.signal() != 0 ? stop_request.signal() : SIGTERM;
    const char* name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";
    if (metric_log) metric_log->close();
    if (!options.checkpoint.empty()) {
      if (logs) {
        save_checkpoint(elapsed);
        progress.note(cat("stopped by ", name, " at step ", step, "; state saved in ",
                          options.checkpoint, " (--resume ", options.checkpoint, " continues)"));
      }
      return static_cast<int>(ExitCode::kInterrupted);
    }
    if (logs) {
      progress.note(
          cat("stopped by ", name, " at step ", step, "; no --checkpoint, state not saved"));
    }
    return 128 + signal_number;
  }
  if (!evaluated_now) run_evaluation(elapsed);
  if (logs && !options.checkpoint.empty()) save_checkpoint(elapsed);
  if (metric_log) metric_log->close();
  if (logs) {
    progress.note(cat(
        "done: ", step, " steps (", strprintf("%.2f", epoch_at(step)), " epochs) in ",
        human_duration(seconds_since(started)),
        virtual_clock ? cat(" (", human_duration(virtual_now - elapsed_before), " emulated)") : "",
        skipped > 0 ? cat(", ", skipped, " steps skipped for non-finite loss") : "",
        finished_early > 0 ? cat("; ", finished_early,
                                 " worker rounds did their whole batch before the time limit")
                           : ""));
  }
  return 0;
}

}  // namespace

int run_train_fmb(const TrainOptions& options) {
  validate(options);
  comm::World world;
  try {
    const int status = train(options, world);
    // Nobody leaves before everyone is done (a rank's MPI_Finalize must not race the others).
    world.rendezvous("the end of the run");
    return status;
  } catch (const std::exception& error) {
    if (!world.distributed()) throw;
    const auto* mbkit_error = dynamic_cast<const Error*>(&error);
    const ExitCode code = mbkit_error != nullptr ? mbkit_error->code() : ExitCode::kFailure;
    // Every rank reaches the same usage errors: rank 0 reports them, the others end quietly a
    // moment later so that the message is out before mpirun ends the job.
    if (code == ExitCode::kUsage && world.rank() != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
    } else {
      // Usage errors are everyone's; others name the rank (ranks > 0 have it in the prefix).
      const std::string where = code != ExitCode::kUsage && world.rank() == 0
                                    ? cat("rank 0 (", world.host(), "): ")
                                    : (world.rank() != 0 ? cat("(", world.host(), ") ") : "");
      std::fprintf(stderr, "%s: error: %s%s\n", log::program().c_str(), where.c_str(),
                   error.what());
    }
    world.abort(static_cast<int>(code));
  }
}

int run_train_amb(TrainOptions options) {
  options.amb.enabled = true;
  return run_train_fmb(options);
}

}  // namespace mbkit::tools::train
