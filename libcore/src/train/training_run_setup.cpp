// The set-up of a training run: everything before its first step (training_run.hpp).
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>

#include "mbkit/backend/factory.hpp"
#include "mbkit/config.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/plot/config.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/describe.hpp"
#include "mbkit/train/drop_compute.hpp"
#include "mbkit/train/resume_check.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

namespace {

// --cpu-quota's periods are those of the emulated cluster's clock, so a round under a quota
// must know its start on that clock: in the process that keeps it (--emulate, one process).
void check_cpu_quota(const TrainOptions& o, const Role& role, const comm::World& world) {
  const emulation::CpuQuota& quota = o.cpu_quota;
  if (quota.empty()) return;
  quota.check_ranks(role.ranks(world));
  for (const auto& [rank, window] : quota.windows) {
    if (role.master && rank == 0) {
      usage_error("--cpu-quota: rank 0 is the master, which computes no gradients");
    }
    if (rank > 0 && rank < role.servers) {
      usage_error(cat("--cpu-quota: rank ", rank, " is a server (--servers ", role.servers,
                      "), which computes no gradients"));
    }
  }
  if (world.distributed() && role.emulated == 0) {
    usage_error(cat("--cpu-quota under mpirun -n ", world.size(),
                    ": a worker rank does not keep the emulated cluster's clock that the quota's "
                    "periods follow; emulate the workers (--emulate N)"));
  }
  const char* unmodelled = o.k_batch_sync > 0               ? "--k-batch-sync"
                           : o.dbsl.enabled                 ? "mb-train-dbsl"
                           : o.local_steps > 1 || o.adacomm ? "--local-steps"
                           : o.delayed_gradients.enabled    ? "--delayed-gradients"
                                                            : nullptr;
  if (unmodelled) usage_error(cat("--cpu-quota is not modelled with ", unmodelled, " yet"));
}

}  // namespace

TrainingRun::TrainingRun(const TrainOptions& options, comm::World& world, std::string command_line)
    : options_(options),
      world_(world),
      command_line_(std::move(command_line)),
      started_(SteadyClock::now()),
      clock_(options.clock == ClockMode::kVirtual, started_) {
  world_.set_timeout(options_.comm_timeout);
  world_.set_wait_mode(options_.comm_wait == "spin" ? comm::WaitMode::kSpin
                                                    : comm::WaitMode::kYield);
  role_ = decide_role(options_, world_);
  validate_batches(options_, role_.workers);
  batch_ = worker_batch_size(options_, role_.workers, role_.computes ? role_.worker : 0);
  dbsl_ = options_.dbsl.enabled;
  logs_ = world_.rank() == 0;
  if (role_.distributed && world_.rank() != 0) {
    log::set_program(cat(log::program(), ": rank ", world_.rank()));
  }
  stragglers_ = options_.induce;
  slowdown_ = options_.slowdown;
  slowdown_.check_ranks(role_.ranks(world_));
  if (role_.master && slowdown_.factors.count(0) > 0) {
    usage_error("--slowdown: rank 0 is the master, which computes no gradients");
  }
  for (int server = 1; server < role_.servers; ++server) {
    if (slowdown_.factors.count(server) > 0) {
      usage_error(cat("--slowdown: rank ", server, " is a server (--servers ", role_.servers,
                      "), which computes no gradients"));
    }
  }
  check_cpu_quota(options_, role_, world_);
  // An emulated worker has a core of its own: one thread unless told otherwise. Under
  // --emulate every worker's network has one thread: --threads spreads the workers over
  // threads instead (emulated_workers.hpp), and the bits are the same for every --threads.
  const bool one_thread = role_.emulated > 0 || (clock_.is_virtual() && options_.threads == 0);
  backend_ = backend::make_backend(options_.device, one_thread ? 1 : options_.threads,
                                   nn::parse_precision(options_.precision));
  clock_.set_threads(backend_->threads());
  selection_ = StepSelection::from_options(options_, role_.workers);
  open_data();
  open_test_data();
  build_model();
  size_epoch();
  if (world_.distributed()) check_ranks_agree();
  // NCCL joins every rank's GPU once, once the ranks are known to run the same training (a rank
  // that would not join is refused above, not waited for).
  if (role_.nccl) nccl_ = comm::make_nccl_allreduce(world_, *backend_);
  set_up_emulation();
  if (dbsl_) plan_dbsl();
  decide_time_limit();
  if (role_.shares) {
    // Rank 0's, where a rank's own measurement decided it (no compute model).
    world_.broadcast(
        std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&time_limit_), sizeof time_limit_),
        0);
  }
  set_up_delayed_gradients();
  resume();
  plan_length();
  hosts_ = world_.all_gather(world_.host());
  open_log();
  if (logs_) print_start_table();
  progress_ = std::make_unique<Progress>(planned_, steps_per_epoch_, options_.print_every);
  if (!logs_) log::set_level(std::min(log::level(), log::Level::kNormal));
  if (role_.computes) {
    round_ = std::make_unique<WorkerRound>(WorkerRound::Parts{
        *net_, *train_loader_, clock_, slowdown_, compute_model_, stragglers_, world_.rank(),
        role_.worker, options_.seed,
        RoundRule{amb_, micro_size_, time_limit_, options_.k_batch_sync > 0}, options_.induce_trace,
        selection_.data_slice(role_.worker),
        cpu_quota_.budget_for(world_.rank(), quota_busy_wait(options_.comm_wait))});
  }
  if (emulated_) {
    emulated_->make_rounds({*net_, clock_, slowdown_, compute_models_, stragglers_, options_.seed,
                            RoundRule{amb_, micro_size_, time_limit_, options_.k_batch_sync > 0},
                            [this](nn::Backend& backend) { return make_network(backend); },
                            &cpu_quota_});
  }
  restore_quota_budgets();
  // The compute model's warm-up belongs to a worker's first round of the run: a resumed run's
  // workers are past it (its rounds stay the uninterrupted run's).
  if (step_ > 0) {
    if (round_) round_->skip_warmup();
    if (emulated_) emulated_->skip_warmup();
  }
  // A resumed synchronous run's workers have done a round a step: their induced delays go on
  // where an uninterrupted run's would be.
  if (resume_.resumed != 0 && options_.k_batch_sync > 0 && !selects_on_wall_clock()) {
    replay_k_batch_steps(step_);  // a step's rounds read several batches, or none
  } else if (resume_.resumed != 0 && !role_.async && !dbsl_) {
    if (round_) round_->skip_rounds(step_);
    if (emulated_) emulated_->skip_rounds(step_);
  }
  budget_ =
      options_.time_budget > 0 ? options_.time_budget : std::numeric_limits<double>::infinity();
  whole_epochs_ = std::floor(epoch_at(step_));
  epoch_started_ = clock_.now();
}

// Training data: workers load their part; the master only reads what the data is (and with
// --train-loss master loads the whole file, for a batch of its own each step).
void TrainingRun::open_data() {
  // Under gradient coding a group's workers read their group's slice.
  my_data_ = worker_data(options_.data, role_.computes ? selection_.data_slice(role_.worker) : 0,
                         selection_.data_slices());
  if (options_.train_loss == "master" && world_.rank() == 0) {
    data::LoaderOptions master_options;
    master_options.path = my_data_.path;
    master_options.split = "train";
    master_options.batch_size = options_.batch_size;
    // Another stream than any worker's: the original's master shuffles the set on its own.
    master_options.seed = options_.seed ^ 0x6d61737465726c6fULL;
    master_options.prefetch = 0;
    master_loader_.emplace(master_options);
  }
  if (role_.emulated > 0) {
    emulated_ = std::make_unique<EmulatedWorkers>(options_, role_.workers, role_.servers,
                                                  role_.emulated_first, role_.emulated_hosted);
    info_ = emulated_->info();
    shape_ = emulated_->shape();
    return;
  }
  // DBSL workers read the whole split, at the batch their plan gives them (plan_dbsl).
  if (!role_.computes || dbsl_) {
    info_ = data::DatasetFile::open(my_data_.path).info();
    shape_ = info_.shape();
    return;
  }
  data::LoaderOptions train_options;
  train_options.path = my_data_.path;
  train_options.split = "train";
  train_options.batch_size = batch_;
  train_options.seed = options_.seed;
  train_options.drop_last = options_.drop_last;
  train_options.augment = options_.augment;
  train_options.slice_index = my_data_.slice_index;
  train_options.slice_count = my_data_.slice_count;
  train_options.prefetch = options_.prefetch;
  train_loader_.emplace(train_options);
  info_ = train_loader_->info();
  shape_ = train_loader_->shape();
  my_rows_ = train_loader_->rows();
  my_batches_ = train_loader_->batches_per_epoch();
}

// Evaluations: synchronous runs share the test split out over all ranks (every rank holds the
// same model); the asynchronous master evaluates alone.
//
// --test-sample random: rank 0 alone draws a batch of --test-size images per evaluation, as the
// AMB original's master (a shuffled pass over the whole split, one batch per evaluation).
void TrainingRun::open_test_data() {
  random_test_ = options_.test_sample == "random";
  const bool evaluates =
      random_test_ ? world_.rank() == 0 : !master_evaluates_alone() || role_.master;
  test_path_ = options_.test_data.empty() ? my_data_.path : options_.test_data;
  if (evaluates) {
    data::LoaderOptions test_options;
    test_options.path = test_path_;
    test_options.split = "test";
    test_options.batch_size = options_.eval_batch_size;
    test_options.shuffle = false;
    test_options.prefetch = 1;
    if (!master_evaluates_alone() && !random_test_) {
      // --emulate: the emulated ranks' slices, all evaluated by rank 0 (run_evaluation).
      test_options.slice_index = role_.emulated > 0 ? 0 : world_.rank();
      test_options.slice_count = role_.ranks(world_);
    }
    const data::DatasetInfo test_info = data::DatasetFile::open(test_path_).info();
    std::uint64_t test_rows = test_info.split(data::kTest).count;
    if (random_test_) {
      test_options.shuffle = true;
      test_options.seed = options_.seed;
      test_options.drop_last = true;  // every draw holds --test-size images
      test_options.batch_size = static_cast<int>(
          std::min<std::uint64_t>(test_rows, static_cast<std::uint64_t>(options_.test_size)));
    } else if (options_.test_size > 0) {
      test_rows = std::min(test_rows, static_cast<std::uint64_t>(options_.test_size));
      test_options.split_limit = test_rows;  // the same first rows whatever the ranks
    }
    if (role_.emulated > 0 && !random_test_ && test_rows > 0) {
      // Each emulated rank's slice, as a run with a process per rank shares the split out;
      // with fewer test rows than ranks (where such a run evaluates nothing) one slice.
      if (test_rows < static_cast<std::uint64_t>(test_options.slice_count)) {
        test_options.slice_count = 1;
      }
      emulated_eval_slices_ = test_options.slice_count;
      emulated_test_rows_ =
          data::load_split_rows(test_path_, std::string(data::kTest), test_options.split_limit);
      test_options.rows = emulated_test_rows_;
      test_options.prefetch = 0;
    }
    if (test_rows >= static_cast<std::uint64_t>(test_options.slice_count)) {
      test_loader_.emplace(test_options);
      if (test_loader_->shape() != shape_ ||
          test_loader_->info().num_classes != info_.num_classes) {
        data_error(cat(test_path_, ": test images are ", test_loader_->shape().text(), " in ",
                       test_loader_->info().num_classes, " classes, the training data's ",
                       shape_.text(), " in ", info_.num_classes));
      }
    }
  }
  // Whether there is an evaluation is the same everywhere (the split exists or not).
  if (random_test_) {
    std::uint8_t found = test_loader_.has_value() ? 1 : 0;
    world_.broadcast(std::span<std::uint8_t>(&found, 1), 0);
    has_test_ = found != 0;
    return;
  }
  has_test_ = master_evaluates_alone()
                  ? test_loader_.has_value()
                  : world_.all_gather(test_loader_ ? 1u : 0u) ==
                        std::vector<std::uint64_t>(static_cast<std::size_t>(world_.size()), 1u);
}

namespace {

// A model whose parameters, gradients and optimizer state (16 bytes a parameter with adam's two
// slots) cannot fit in this machine's memory is a bad option, not an "out of memory" later.
void check_model_fits(const nn::Graph& graph, const models::ModelConfig& model) {
  const double needed = 16.0 * static_cast<double>(graph.parameter_count());
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return;  // unknown: let the allocation decide
  const double memory = static_cast<double>(pages) * static_cast<double>(page_size);
  if (needed > memory) {
    usage_error(cat(model.name == "mlp" ? "--hidden" : "--model", ": ", describe_model(model),
                    " has ", with_commas(static_cast<std::int64_t>(graph.parameter_count())),
                    " parameters, which with their ", "gradients and optimizer state need ",
                    human_bytes(needed), ", more than this machine's ", human_bytes(memory),
                    " of memory"));
  }
}

}  // namespace

std::unique_ptr<nn::Network> TrainingRun::make_network(nn::Backend& backend) const {
  nn::Graph graph = models::build_model(
      options_.model, {shape_.channels, shape_.height, shape_.width}, info_.num_classes);
  check_model_fits(graph, options_.model);
  auto net = std::make_unique<nn::Network>(std::move(graph), backend);
  net->initialize(options_.seed);
  return net;
}

void TrainingRun::build_model() {
  net_ = make_network(*backend_);
  // --cuda-graphs: on by default where the backend records graphs.
  if (options_.cuda_graphs == "on" && !backend_->can_capture()) {
    usage_error(
        cat("--cuda-graphs on: the backend (", backend_->description(), ") runs no CUDA graphs"));
  }
  if (backend_->can_capture() && options_.cuda_graphs != "off") {
    const std::string why_not = net_->step_graphs_unavailable();
    if (why_not.empty()) {
      net_->set_step_graphs(true);
    } else if (options_.cuda_graphs == "on") {
      log::warn(cat("--cuda-graphs on: ", why_not, "; the training step runs without a graph"));
    }
  }
  // --allreduce auto on one host: the faster sum on this machine, for this buffer (the
  // gradients and the per-step tail of state and reports).
  if (role_.time_allreduce) {
    allreduce_trial_ = comm::time_allreduce_sums(
        world_, net_->parameter_count() + net_->state_count() + 8 * role_.workers + 8);
    role_.shared_memory = allreduce_trial_->shared_memory();
  }
  allreduce_used_ = role_.emulated > 0          ? "in-process"
                    : role_.nccl                ? "nccl"
                    : role_.comm != "allreduce" ? to_string(options_.allreduce)
                    : role_.shared_memory       ? "shm"
                                                : "mpi";
  // The optimizer runs where updates are made: the master, or every rank of allreduce.
  // AMB: micro-batches of floor(batch / partitions) samples; a batch's leftover is not used.
  // DropCompute's round is AMB's: micro-batches under a threshold, at most the batch.
  amb_ = options_.amb.enabled || options_.drop_compute.enabled;
  micro_size_ = amb_ ? batch_ / anytime_partitions(options_) : batch_;
  // The AMB original adds weight decay per micro-batch: batch / micro-batch size times FMB's.
  optimizer_config_ = options_.optimizer;
  if (amb_ && options_.amb.decay_per_micro_batch) {
    optimizer_config_.weight_decay *= static_cast<double>(batch_) / micro_size_;
  }
  // --weight-decay-on sum: the original adds wd p to each summed-loss gradient (a batch, or
  // AMB's micro-batch) and the master divides by the samples: wd / samples per evaluation.
  if (options_.weight_decay_on == "sum") {
    optimizer_config_.weight_decay /= static_cast<double>(micro_size_);
  }
  // A server keeps the optimizer of its shard (one server: the whole buffer).
  shard_ = {0, net_->parameter_count()};
  // Under --emulate every rank updates the whole buffer (elementwise, so every shard's values),
  // but for several asynchronous servers, each on its own clock: this process plays each with
  // its shard's optimizer (server 0's is optimizer_).
  if (role_.server && (role_.emulated == 0 || emulated_async_servers())) {
    shard_ = server_shard(shard_.second, role_.emulated > 0 ? 0 : world_.rank(), role_.servers);
  }
  // Local SGD: every worker updates its own model too.
  if (!role_.parameter_server || role_.server || local_sgd(options_)) {
    optimizer_ =
        optim::make_optimizer(optimizer_config_, shard_.second - shard_.first, net_->backend());
  } else {
    optim::make_optimizer(optimizer_config_, 1, net_->backend());  // same validation everywhere
  }
  if (emulated_async_servers()) {
    for (int server = 1; server < role_.servers; ++server) {
      const auto [first, last] = server_shard(net_->parameter_count(), server, role_.servers);
      server_optimizers_.push_back(
          optim::make_optimizer(optimizer_config_, last - first, net_->backend()));
    }
  }
}

// The epoch: all workers' rows; a step of the synchronous modes takes a batch from each.
void TrainingRun::size_epoch() {
  const auto rows_of = world_.all_gather(my_rows_);
  const auto batches_of = world_.all_gather(static_cast<std::uint64_t>(my_batches_));
  for (std::size_t r = 0; r < rows_of.size(); ++r) {
    total_rows_ += rows_of[r];
    steps_per_epoch_ = std::max(steps_per_epoch_, static_cast<std::int64_t>(batches_of[r]));
  }
  if (emulated_) {
    // Under mpirun each rank knows its share's.
    total_rows_ = 0;
    for (const std::uint64_t rows : world_.all_gather(emulated_->total_rows())) total_rows_ += rows;
    for (const std::uint64_t batches :
         world_.all_gather(static_cast<std::uint64_t>(emulated_->most_batches()))) {
      steps_per_epoch_ = std::max(steps_per_epoch_, static_cast<std::int64_t>(batches));
    }
  }
  // Gradient coding: each group's rows are read by its s + 1 workers, counted once.
  total_rows_ /= static_cast<std::uint64_t>(selection_.workers() / selection_.data_slices());
  global_batch_ = global_batch_size(options_, role_.workers);
  if (dbsl_) {
    // A DBSL epoch is a push per worker (the original's global round counter).
    total_rows_ = info_.split(data::kTrain).count;
    steps_per_epoch_ = role_.workers;
    return;
  }
  if (options_.k_batch_sync > 0) steps_per_epoch_ = k_batch_steps_per_epoch();
  if (role_.async) {
    // An asynchronous step is one update of about async_min_grads batches.
    const auto per_step = static_cast<std::uint64_t>(async_gradients_per_update(options_)) *
                          static_cast<std::uint64_t>(global_batch_ / role_.workers);
    steps_per_epoch_ = static_cast<std::int64_t>((total_rows_ + per_step - 1) / per_step);
  }
}

// Every rank must run the same training: the whole recorded configuration is compared (every
// option that changes the training, learning rate and schedule included), with what is measured
// later (planned steps, AMB's automatic time limit, the allreduce trial) left out.
void TrainingRun::check_ranks_agree() const {
  std::vector<std::string> lines = {
      cat("version=", MBKIT_VERSION, " ", MBKIT_GIT_COMMIT),
      cat("input=", shape_.text(), " classes=", info_.num_classes),
      cat("parameters=", net_->graph().parameter_count(), " state=", net_->state_count()),
      cat("checkpoint=", options_.checkpoint, " every ", options_.checkpoint_every)};
  RunFacts facts;  // what every rank knows before the run settles anything
  facts.world_size = world_.size();
  facts.workers = role_.workers;
  facts.allreduce = to_string(options_.allreduce);
  const std::string config = config_json(options_, net_->graph(), facts, /*pretty=*/true);
  for (const std::string& line : split(config, '\n')) {
    std::string_view key_value = trim(line);
    if (key_value.ends_with(',')) key_value.remove_suffix(1);
    if (key_value.size() <= 1) continue;  // a lone bracket
    // "lr": 0.1 -> lr=0.1, as the message quotes it.
    const auto colon = key_value.find("\": ");
    if (key_value.starts_with('"') && colon != std::string_view::npos) {
      // The config has threads only when given: the --threads line below compares it on every
      // rank, given or not, so that the lines of two ranks stay aligned.
      if (key_value.substr(1, colon - 1) == "threads") continue;
      lines.push_back(cat(key_value.substr(1, colon - 1), "=", key_value.substr(colon + 3)));
    } else {
      lines.emplace_back(key_value);
    }
  }
  // Not in the recorded configuration, compared all the same: the thread count changes the
  // order of the sums inside a rank, hence its gradients' bits (a run is reproducible only with
  // the same --threads on every rank), and rank 0 alone writes the log that --log names.
  lines.push_back(cat("--threads ", options_.threads == 0 ? std::string("not given (all cores)")
                                                          : std::to_string(options_.threads)));
  lines.push_back(cat("--log ", options_.log.empty() ? std::string("not given") : options_.log));
  const DbslOptions& d = options_.dbsl;
  lines.push_back(cat("dbsl=", d.enabled, " ", d.time_model, " ", d.time_model_ab,
                      " calibrate=", d.calibrate, " B_L=", d.base_batch, " k=", d.extra_time,
                      " small=", d.small_workers, " f=", d.update_factor, " sync=", d.sync,
                      " keep=", d.keep_optimizer_state));
  check_agreement(world_, lines);
}

namespace {

// Epochs as steps, rounded up (or to the nearest for warm-up, as TensorFlow's schedules); a usage
// error naming `flag` past 2^53 steps, a run that could never end and a count a double no longer
// holds exactly.
std::int64_t epochs_to_steps(double epochs, std::int64_t steps_per_epoch, const char* flag,
                             bool nearest = false) {
  const double exact = epochs * static_cast<double>(steps_per_epoch);
  const double steps = nearest ? std::round(exact) : std::ceil(exact);
  constexpr double kMostSteps = 9007199254740992.0;  // 2^53
  if (!(steps <= kMostSteps)) {
    usage_error(cat(flag, " ", epochs, " is ", steps, " steps of ", steps_per_epoch,
                    " per epoch: more than a run can take"));
  }
  return static_cast<std::int64_t>(steps);
}

}  // namespace

void TrainingRun::plan_length() {
  if (options_.steps > 0) planned_ = options_.steps;
  if (options_.epochs > 0 && (!role_.async || dbsl_)) {
    planned_ = std::min(planned_, step_base_ + epochs_to_steps(options_.epochs - epoch_base_,
                                                               steps_per_epoch_, "--epochs"));
  }
  schedule_config_ = options_.schedule;
  if (options_.lr_scaling != "none") {
    // Goyal et al.: k times the rate for k times the batch, reached by a warm-up from the
    // unscaled rate when --warmup-epochs is given.
    lr_factor_ = lr_scale_factor(options_, role_.workers);
    schedule_config_.lr *= lr_factor_;
    schedule_config_.end_lr *= lr_factor_;
    schedule_config_.warmup_from = 1.0 / lr_factor_;
  }
  schedule_config_.warmup_steps =
      epochs_to_steps(options_.warmup_epochs, steps_per_epoch_, "--warmup-epochs", true);
  if (schedule_config_.kind == "linear" && schedule_config_.total_steps == 0) {
    if (planned_ != kUnlimitedSteps) {
      schedule_config_.total_steps = planned_;
    } else if (options_.epochs > 0) {
      schedule_config_.total_steps = epochs_to_steps(options_.epochs, steps_per_epoch_, "--epochs");
    }
  }
  schedule_.emplace(schedule_config_);

  // Workers continue their data stream where the checkpoint left it: exactly when the same
  // workers resume a synchronous run, else from the same point of the epoch.
  if (resume_.resumed != 0) {
    // Wall-clock K-batch-sync's workers read as many batches as they computed, which real
    // arrivals decide: from the same point of the epoch.
    const bool same_workers = static_cast<int>(resume_.workers) == role_.workers &&
                              resume_.same_comm != 0 && !role_.async &&
                              !(options_.k_batch_sync > 0 && selects_on_wall_clock());
    const auto seek = [&](data::DataLoader& loader) {
      const std::int64_t batches = loader.batches_per_epoch();
      if (same_workers) {
        loader.seek(step_ / batches, step_ % batches);
      } else {
        const double epoch = std::floor(epoch_base_);
        const auto index =
            static_cast<std::int64_t>((epoch_base_ - epoch) * static_cast<double>(batches));
        loader.seek(static_cast<std::int64_t>(epoch), std::min(index, batches - 1));
      }
    };
    if (train_loader_) seek(*train_loader_);
    if (emulated_) emulated_->for_each_loader(seek);
  }
}

namespace {

// --worker-table: which worker rows the log keeps (the workers sampled are drawn from the seed).
void use_worker_table(metrics::MetricLog& log, const TrainOptions& options, const Role& role) {
  std::vector<std::int64_t> ranks;
  for (int worker = 0; worker < role.workers; ++worker) ranks.push_back(role.rank_of(worker));
  log.use_worker_table(metrics::WorkerTable(
      metrics::resolve_worker_table(options.worker_table, role.workers), ranks, options.seed));
}

// A resumed run appends to its log: the table it keeps must be the one the log holds (logs
// from before --worker-table hold every row).
void refuse_other_worker_table(const metrics::RunInfo& logged, const TrainOptions& options,
                               const Role& role) {
  std::string then = "all";
  if (!logged.config_json.empty()) {
    const plot::FlatConfig config =
        plot::flatten_json_object(logged.config_json, cat(options.log, ": config"));
    if (const auto found = config.find("worker_table"); found != config.end()) {
      then = found->second;
    }
  }
  const std::string now = metrics::resolve_worker_table(options.worker_table, role.workers).text();
  if (now != then) {
    usage_error(cat("--worker-table ", now, ": ", options.log, " holds a worker table of ", then,
                    "; resume with --worker-table ", then, " or write another --log"));
  }
}

}  // namespace

void TrainingRun::open_log() {
  if (!logs_ || options_.log.empty()) return;
  if (resume_.resumed != 0 && fs::exists(options_.log)) {
    // The log records one precision for the whole run: a resumed run must keep it.
    const metrics::RunInfo logged_run =
        metrics::read_run_info(metrics::open_metric_log(options_.log));
    const std::string& logged = logged_run.precision;
    const std::string_view mine = nn::precision_name(backend_->precision());
    if (logged != mine) {
      usage_error(cat("--precision ", mine, ": ", options_.log, " records a run at --precision ",
                      logged, "; resume at ", logged, " or write another --log"));
    }
    // So does its worker table: rows of every worker after a summary's (or the other way
    // round) would be a table no reader can take as one.
    refuse_other_worker_table(logged_run, options_, role_);
    metric_log_.emplace(metrics::MetricLog::append(options_.log, step_, options_.flush_interval));
    use_worker_table(*metric_log_, options_, role_);
    return;
  }
  metrics::RunInfo run;
  run.tool = tool_name(options_);
  run.version = cat(MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, ")");
  run.command_line = command_line_;
  run.config_json = config_json(options_, net_->graph(), run_facts());
  run.seed = options_.seed;
  run.host = world_.host();
  run.start_time = utc_timestamp();
  run.world_size = role_.ranks(world_);
  run.model = options_.model.name;
  run.dataset = info_.name;
  run.clock = to_string(options_.clock);
  run.comm_model = clock_.is_virtual() && role_.distributed ? comm_model_.spec() : "";
  run.compute_model = compute_models_.spec();
  run.precision = std::string(nn::precision_name(backend_->precision()));
  bool replace = options_.force;
  if (!replace && options_.resume == "auto" && fs::exists(options_.log)) {
    // A run killed before its first checkpoint left a log and nothing to resume from: a
    // resubmitted job starts over, as it would have with no log. Only a metric log is replaced
    // that way (anything else named by --log needs --force).
    try {
      metrics::open_metric_log(options_.log);
    } catch (const Error& error) {
      throw Error(cat(error.what(), "; --resume auto replaces only a metric log (--force replaces ",
                      options_.log, " whatever it holds)"),
                  error.code());
    }
    log::warn(cat("--resume auto: no checkpoint ", options_.checkpoint, " to resume from; ",
                  "starting over, replacing the log ", options_.log));
    replace = true;
  }
  metric_log_.emplace(
      metrics::MetricLog::create(options_.log, run, replace, options_.flush_interval));
  use_worker_table(*metric_log_, options_, role_);
}

}  // namespace mbkit::train
