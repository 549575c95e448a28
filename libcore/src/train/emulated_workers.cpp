#include "mbkit/train/emulated_workers.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "mbkit/train/exchange.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

// Prepares one loader's next batch on a thread of its own while the computing thread runs
// another worker's round: the emulated workers' counterpart of a loader's prefetch thread.
class BatchAhead {
 public:
  BatchAhead() : thread_([this] { serve(); }) {}
  BatchAhead(const BatchAhead&) = delete;
  BatchAhead& operator=(const BatchAhead&) = delete;
  ~BatchAhead() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// Starts preparing `loader`'s next batch (after the previous one is done).
  void start(data::DataLoader& loader) {
    wait();
    {
      const std::lock_guard lock(mutex_);
      job_ = &loader;
    }
    wake_.notify_all();
  }
  /// Waits for the batch under way, if any; its preparation's error is rethrown here.
  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return job_ == nullptr; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void serve() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || job_ != nullptr; });
      if (job_ == nullptr) return;  // stopping, nothing under way
      data::DataLoader* loader = job_;
      lock.unlock();
      std::exception_ptr error;
      try {
        loader->prepare_next();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      job_ = nullptr;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  data::DataLoader* job_ = nullptr;  ///< the loader being prepared
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  ///< last: started once the rest is there
};

EmulatedWorkers::EmulatedWorkers(const TrainOptions& options, int workers, int servers)
    : options_(options),
      servers_(servers),
      batches_{std::make_shared<data::Batch>(), std::make_shared<data::Batch>()} {
  MBKIT_CHECK(workers > 0, "emulating ", workers, " workers");
  rows_ = data::load_split_rows(options.data, std::string(data::kTrain));
  loaders_.reserve(static_cast<std::size_t>(workers));
  // Gradient coding: a group's workers read their group's slice.
  const auto selection = StepSelection::from_options(options, workers);
  for (int w = 0; w < workers; ++w) {
    data::LoaderOptions loader;
    loader.path = options.data;
    loader.split = std::string(data::kTrain);
    loader.batch_size = worker_batch_size(options, workers, w);
    loader.seed = options.seed;
    loader.drop_last = options.drop_last;
    loader.augment = options.augment;
    loader.slice_index = selection.data_slice(w);
    loader.slice_count = selection.data_slices();
    loader.prefetch = 0;  // one thread computes every worker: nothing to overlap
    loader.rows = rows_;
    // K-batch-sync: a worker may leave the batch prepared for it unread for steps (it computed
    // none), so it keeps a buffer of its own.
    loader.batch_buffer =
        options.k_batch_sync > 0 ? std::make_shared<data::Batch>() : batches_[w % 2];
    loaders_.push_back(std::make_unique<data::DataLoader>(std::move(loader)));
  }
}

EmulatedWorkers::~EmulatedWorkers() = default;

std::uint64_t EmulatedWorkers::total_rows() const {
  std::uint64_t rows = 0;
  for (const auto& loader : loaders_) rows += loader->rows();
  return rows;
}

std::int64_t EmulatedWorkers::most_batches() const {
  std::int64_t most = 1;
  for (const auto& loader : loaders_) most = std::max(most, loader->batches_per_epoch());
  return most;
}

std::optional<ComputeModel> EmulatedWorkers::compute_model(const ComputeModels& models,
                                                           int w) const {
  return models.for_rank(rank_of(w));
}

void EmulatedWorkers::make_rounds(const RoundParts& parts) {
  net_ = &parts.net;
  rounds_.clear();
  rounds_.reserve(loaders_.size());
  for (int w = 0; w < workers(); ++w) {
    data::DataLoader& loader = *loaders_[static_cast<std::size_t>(w)];
    // AMB's micro-batch is the worker's own batch / partitions (batches differ by one sample
    // under --global-batch-size), as its own process would set it.
    RoundRule rule = parts.rule;
    if (rule.anytime) rule.micro_size = loader.options().batch_size / anytime_partitions(options_);
    rounds_.push_back(std::make_unique<WorkerRound>(
        WorkerRound::Parts{parts.net, loader, parts.clock, parts.slowdown,
                           compute_model(parts.compute_models, w), parts.stragglers, rank_of(w), w,
                           parts.seed, rule, options_.induce_trace, loader.options().slice_index}));
  }
}

void EmulatedWorkers::skip_rounds(std::int64_t rounds) {
  for (auto& round : rounds_) round->skip_rounds(rounds);
}

void EmulatedWorkers::for_each_loader(const std::function<void(data::DataLoader&)>& f) {
  if (ahead_) ahead_->wait();  // no batch under way while the loaders are repositioned
  for (auto& loader : loaders_) f(*loader);
}

std::size_t EmulatedWorkers::sum_floats(std::size_t gradient_floats,
                                        std::size_t state_floats) const {
  return gradient_floats + state_floats +
         static_cast<std::size_t>(workers()) * report_slot_floats(servers_ > 0);
}

std::vector<WorkerReport> EmulatedWorkers::run_step(
    std::int64_t step, double loss_scale, std::span<float> sum,
    const std::function<int(int)>& stop_of, const StepSelection& selection,
    const std::function<double(int, double)>& arrival_of, std::vector<bool>& used) {
  MBKIT_CHECK(net_ != nullptr && rounds_.size() == loaders_.size(),
              "emulated workers stepped before make_rounds()");
  nn::Network& net = *net_;
  const std::size_t gradient_floats = net.parameter_count();
  const std::size_t state_floats = net.state_count();
  MBKIT_CHECK(sum.size() == sum_floats(gradient_floats, state_floats), "a sum of ", sum.size(),
              " floats for ", workers(), " workers");
  const bool parameter_server = servers_ > 0;
  // The ps master's buffer starts the sum with zeros; allreduce's starts with worker 0's.
  if (parameter_server) std::fill_n(sum.begin(), gradient_floats + state_floats, 0.0f);
  const std::span<float> state = net.state();
  step_state_.assign(state.begin(), state.end());
  // K-batch-sync's plan comes in `used` (its workers with no batch); else all, unless dropped.
  if (used.size() != rounds_.size()) used.assign(rounds_.size(), true);
  if (selection.drops()) {
    std::vector<double> ready(rounds_.size());
    for (int w = 0; w < workers(); ++w) {
      const auto predicted = rounds_[static_cast<std::size_t>(w)]->predict_ready();
      if (!predicted) {
        usage_error(cat("--emulate: worker ", w, " (rank ", rank_of(w),
                        ") has no --compute-model: its ready time must be known before "
                        "its gradient is added (",
                        selection.describe(), ")"));
      }
      ready[static_cast<std::size_t>(w)] = arrival_of(w, *predicted);
    }
    used = selection.select(ready);
  }
  std::vector<WorkerReport> reports;
  reports.reserve(rounds_.size());
  // As a one-process run's --prefetch: a helper thread where the process has cores for it.
  if (options_.prefetch > 0 && !ahead_) ahead_ = std::make_unique<BatchAhead>();
  for (int w = 0; w < workers(); ++w) {
    // Each worker starts from the step's state, as a rank holds it after the last exchange.
    if (w > 0) std::copy(step_state_.begin(), step_state_.end(), state.begin());
    if (ahead_) {
      ahead_->wait();  // this worker's batch, if it was started
      if (w + 1 < workers()) ahead_->start(*loaders_[static_cast<std::size_t>(w + 1)]);
    }
    WorkerReport report = rounds_[static_cast<std::size_t>(w)]->run(step, loss_scale);
    report.stop = stop_of(w);
    if (!used[static_cast<std::size_t>(w)]) drop_contribution(report, net.gradients(), state);
    add_worker_to_sum(sum, net.gradients(), state, report, w, parameter_server);
    reports.push_back(report);
  }
  // Worker 0's next batch while the step is combined (its buffer is free: the rounds are done).
  if (ahead_) ahead_->start(*loaders_.front());
  return reports;
}

WorkerReport EmulatedWorkers::run_worker(int w, std::int64_t step, double loss_scale) {
  MBKIT_CHECK(net_ != nullptr && rounds_.size() == loaders_.size() && w >= 0 && w < workers(),
              "emulated worker ", w, " stepped before make_rounds()");
  // The next worker's batch is prepared meanwhile, as in run_step (worker 0's after the last).
  if (options_.prefetch > 0 && !ahead_) ahead_ = std::make_unique<BatchAhead>();
  if (ahead_) {
    ahead_->wait();
    if (w + 1 < workers()) ahead_->start(*loaders_[static_cast<std::size_t>(w + 1)]);
  }
  WorkerReport report = rounds_[static_cast<std::size_t>(w)]->run(step, loss_scale);
  if (ahead_ && w + 1 == workers()) ahead_->start(*loaders_.front());
  return report;
}

}  // namespace mbkit::train
