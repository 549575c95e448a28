#include "mbkit/train/emulated_workers.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "mbkit/backend/factory.hpp"
#include "mbkit/nn/precision.hpp"
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

// Runs a job on every lane at once, lanes 1.. on threads of their own (kept for the run, so
// that oneDNN's per-thread scratch is made once), lane 0 on the calling thread; returns once
// every lane is done, rethrowing the first error.
class LaneThreads {
 public:
  explicit LaneThreads(int lanes) {
    for (int lane = 1; lane < lanes; ++lane) threads_.emplace_back([this, lane] { serve(lane); });
  }
  LaneThreads(const LaneThreads&) = delete;
  LaneThreads& operator=(const LaneThreads&) = delete;
  ~LaneThreads() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void run(const std::function<void(int lane)>& job) {
    {
      const std::lock_guard lock(mutex_);
      job_ = &job;
      ++generation_;
      busy_ = threads_.size();
    }
    wake_.notify_all();
    std::exception_ptr mine;
    try {
      job(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
    std::exception_ptr theirs = std::exchange(error_, nullptr);
    if (mine) std::rethrow_exception(mine);
    if (theirs) std::rethrow_exception(theirs);
  }

 private:
  void serve(int lane) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*job)(lane);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !error_) error_ = error;
      if (--busy_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;  ///< jobs started: a lane runs each once
  std::size_t busy_ = 0;          ///< lanes 1.. still running the job
  std::exception_ptr error_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;  ///< last: started once the rest is there
};

EmulatedWorkers::EmulatedWorkers(const TrainOptions& options, int workers, int servers, int first,
                                 int hosted)
    : options_(options),
      servers_(servers),
      workers_(workers),
      first_(first),
      // validate() refuses --async with --threads: its master runs rounds on its own network.
      lanes_count_(options.threads > 1 && !options.async
                       ? std::min(options.threads, hosted < 0 ? workers : hosted)
                       : 1) {
  if (hosted < 0) hosted = workers;
  MBKIT_CHECK(workers > 0 && first >= 0 && hosted > 0 && first + hosted <= workers, "hosting ",
              hosted, " from worker ", first, " of ", workers, " emulated workers");
  for (int b = 0; b < 2 * lanes_count_; ++b) batches_.push_back(std::make_shared<data::Batch>());
  rows_ = data::load_split_rows(options.data, std::string(data::kTrain));
  loaders_.reserve(static_cast<std::size_t>(hosted));
  // Gradient coding: a group's workers read their group's slice.
  const auto selection = StepSelection::from_options(options, workers);
  for (int i = 0; i < hosted; ++i) {
    const int w = first + i;
    data::LoaderOptions loader;
    loader.path = options.data;
    loader.split = std::string(data::kTrain);
    loader.batch_size = worker_batch_size(options, workers, w);
    loader.seed = options.seed;
    loader.drop_last = options.drop_last;
    loader.augment = options.augment;
    loader.slice_index = selection.data_slice(w);
    loader.slice_count = selection.data_slices();
    loader.prefetch = 0;  // a lane's helper prepares the batches (BatchAhead)
    loader.rows = rows_;
    // K-batch-sync: a worker may leave the batch prepared for it unread for steps (it computed
    // none), so it keeps a buffer of its own.
    loader.batch_buffer =
        options.k_batch_sync > 0
            ? std::make_shared<data::Batch>()
            : batches_[static_cast<std::size_t>(2 * (i % lanes_count_) + (i / lanes_count_) % 2)];
    masks_of_.push_back(loader.slice_index);
    loaders_.push_back(std::make_unique<data::DataLoader>(std::move(loader)));
  }
}

void EmulatedWorkers::read_whole_split(const std::vector<int>& batches) {
  MBKIT_CHECK(batches.size() == static_cast<std::size_t>(workers()) && rounds_.empty(),
              "emulated DBSL workers' loaders set after their rounds");
  // Each worker reads a few batches of an epoch of its own (DbslWorkerPolicy seeks one per
  // round), drawn anew each round: one order of the whole split (8 bytes a row) for all, not N.
  const auto order = std::make_shared<data::EpochOrder>();
  for (int w = first_; w < first_ + hosted(); ++w) {
    // training_run_dbsl.cpp's worker loader: the whole split, no shard of it.
    data::LoaderOptions loader;
    loader.path = options_.data;
    loader.split = std::string(data::kTrain);
    loader.batch_size = batches[static_cast<std::size_t>(w)];
    loader.seed = options_.seed;
    loader.augment = options_.augment;
    loader.prefetch = 0;
    loader.rows = rows_;
    loader.batch_buffer = batches_.front();  // one round at a time reads its batches
    loader.order_buffer = order;
    loaders_[static_cast<std::size_t>(w - first_)] =
        std::make_unique<data::DataLoader>(std::move(loader));
    masks_of_[static_cast<std::size_t>(w - first_)] = w;
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
  if (lanes_.empty()) {
    // --emulate refuses a GPU --device (options.cpp): lanes are the CPU backend's.
    MBKIT_CHECK(lanes_count_ == 1 || parts.net.backend().host_accessible(),
                "emulated workers' lanes on a device backend");
    lanes_.resize(static_cast<std::size_t>(lanes_count_));
    lanes_.front().net = &parts.net;
    for (int t = 1; t < lanes_count_; ++t) {
      Lane& lane = lanes_[static_cast<std::size_t>(t)];
      // One thread per lane: a network's bits never depend on the lanes beside it.
      lane.backend =
          backend::make_backend(options_.device, 1, nn::parse_precision(options_.precision));
      MBKIT_CHECK(parts.make_network != nullptr, "emulated workers' lanes need make_network");
      lane.own = parts.make_network(*lane.backend);
      MBKIT_CHECK(lane.own->parameter_count() == parts.net.parameter_count() &&
                      lane.own->state_count() == parts.net.state_count(),
                  "a lane's network differs from the run's");
      lane.net = lane.own.get();
    }
    if (lanes_count_ > 1) threads_ = std::make_unique<LaneThreads>(lanes_count_);
  }
  rounds_.clear();
  rounds_.reserve(loaders_.size());
  for (int w = first_; w < first_ + hosted(); ++w) {
    data::DataLoader& loader = loader_of(w);
    // AMB's micro-batch is the worker's own batch / partitions (batches differ by one sample
    // under --global-batch-size), as its own process would set it.
    RoundRule rule = parts.rule;
    if (rule.anytime) rule.micro_size = loader.options().batch_size / anytime_partitions(options_);
    rounds_.push_back(std::make_unique<WorkerRound>(WorkerRound::Parts{
        *lane_of(w).net, loader, parts.clock, parts.slowdown,
        compute_model(parts.compute_models, w), parts.stragglers, rank_of(w), w, parts.seed, rule,
        options_.induce_trace, masks_of_[static_cast<std::size_t>(w - first_)],
        parts.cpu_quota
            ? parts.cpu_quota->budget_for(rank_of(w), quota_busy_wait(options_.comm_wait))
            : std::nullopt}));
  }
}

void EmulatedWorkers::skip_warmup() {
  for (auto& round : rounds_) round->skip_warmup();
}

void EmulatedWorkers::skip_rounds(std::int64_t rounds) {
  for (auto& round : rounds_) round->skip_rounds(rounds);
}

void EmulatedWorkers::for_each_loader(const std::function<void(data::DataLoader&)>& f) {
  // No batch under way while the loaders are repositioned.
  for (Lane& lane : lanes_) {
    if (lane.ahead) lane.ahead->wait();
  }
  for (auto& loader : loaders_) f(*loader);
}

std::size_t EmulatedWorkers::sum_floats(std::size_t gradient_floats,
                                        std::size_t state_floats) const {
  return gradient_floats + state_floats +
         static_cast<std::size_t>(workers()) * report_slot_floats(servers_ > 0);
}

WorkerReport EmulatedWorkers::compute_worker(Lane& lane, int w, std::int64_t step,
                                             double loss_scale, const OwnModels* own) {
  // Each worker starts from the step's state, as a rank holds it after the last exchange
  // (local SGD: from its own).
  if (own != nullptr) {
    own->load(w, (w - first_) % lanes_count_, *lane.net);
  } else {
    std::copy(step_state_.begin(), step_state_.end(), lane.net->state().begin());
  }
  if (lane.ahead) {
    lane.ahead->wait();  // this worker's batch, if it was started
    if (w + lanes_count_ < first_ + hosted()) lane.ahead->start(loader_of(w + lanes_count_));
  }
  return round(w).run(step, own != nullptr ? own->loss_scale(w) : loss_scale);
}

std::vector<double> EmulatedWorkers::predict_arrivals(
    const StepSelection& selection, const std::function<double(int, double)>& arrival_of) {
  std::vector<double> arrivals(static_cast<std::size_t>(hosted()));
  for (int w = first_; w < first_ + hosted(); ++w) {
    const auto predicted = round(w).predict_ready();
    if (!predicted) {
      usage_error(cat("--emulate: worker ", w, " (rank ", rank_of(w),
                      ") has no --compute-model: its ready time must be known before "
                      "its gradient is added (",
                      selection.describe(), ")"));
    }
    arrivals[static_cast<std::size_t>(w - first_)] = arrival_of(w, *predicted);
  }
  return arrivals;
}

std::vector<WorkerReport> EmulatedWorkers::run_step(std::int64_t step, double loss_scale,
                                                    std::span<float> sum,
                                                    const std::function<int(int)>& stop_of,
                                                    const std::vector<bool>& used) {
  MBKIT_CHECK(net_ != nullptr && rounds_.size() == loaders_.size(),
              "emulated workers stepped before make_rounds()");
  MBKIT_CHECK(used.empty() || used.size() == static_cast<std::size_t>(workers()), used.size(),
              " used flags for ", workers(), " workers");
  nn::Network& net = *net_;
  const std::size_t gradient_floats = net.parameter_count();
  const std::size_t state_floats = net.state_count();
  MBKIT_CHECK(sum.size() == sum_floats(gradient_floats, state_floats), "a sum of ", sum.size(),
              " floats for ", workers(), " workers");
  const bool parameter_server = servers_ > 0;
  // The ps master's buffer starts the sum with zeros; allreduce's starts with worker 0's. A
  // share's sum starts from zeros, the other workers' report slots included.
  if (hosted() < workers()) {
    std::fill(sum.begin(), sum.end(), 0.0f);
  } else if (parameter_server) {
    std::fill_n(sum.begin(), gradient_floats + state_floats, 0.0f);
  }
  std::vector<WorkerReport> reports =
      run_lanes(step, loss_scale, nullptr, [&](int w, nn::Network& lane_net, WorkerReport& report) {
        report.stop = stop_of(w);
        if (!used.empty() && !used[static_cast<std::size_t>(w)]) {
          drop_contribution(report, lane_net.gradients(), lane_net.state());
        }
        add_worker_to_sum(sum, lane_net.gradients(), lane_net.state(), report, w, parameter_server);
      });
  // The network's state is the last worker's, as the last rank's would be.
  const nn::Network& last = *lane_of(first_ + hosted() - 1).net;
  if (&last != &net) std::copy(last.state().begin(), last.state().end(), net.state().begin());
  return reports;
}

std::vector<WorkerReport> EmulatedWorkers::run_local_step(std::int64_t step,
                                                          std::span<float> report_sum,
                                                          const std::function<int(int)>& stop_of,
                                                          const OwnModels& own) {
  MBKIT_CHECK(net_ != nullptr && rounds_.size() == loaders_.size(),
              "emulated workers stepped before make_rounds()");
  const bool parameter_server = servers_ > 0;
  MBKIT_CHECK(report_sum.size() == sum_floats(0, 0), "report slots of ", report_sum.size(),
              " floats for ", workers(), " workers");
  std::fill(report_sum.begin(), report_sum.end(), 0.0f);
  return run_lanes(step, 0.0, &own, [&](int w, nn::Network&, WorkerReport& report) {
    report.stop = stop_of(w);
    add_worker_to_sum(report_sum, {}, {}, report, w, parameter_server);
  });
}

std::vector<WorkerReport> EmulatedWorkers::run_lanes(
    std::int64_t step, double loss_scale, const OwnModels* own,
    const std::function<void(int w, nn::Network& net, WorkerReport& report)>& add) {
  nn::Network& net = *net_;
  const std::span<const float> state = net.state();
  step_state_.assign(state.begin(), state.end());
  std::vector<WorkerReport> reports(rounds_.size());
  // As a one-process run's --prefetch: a helper thread where the process has cores for it.
  for (Lane& lane : lanes_) {
    if (options_.prefetch > 0 && !lane.ahead) lane.ahead = std::make_unique<BatchAhead>();
  }
  // The ticket: worker w adds once every worker before it has.
  std::mutex turn_mutex;
  std::condition_variable turn;
  int next_to_add = 0;
  bool failed = false;  // a lane's error: the others stop waiting for their turn
  const std::function<void(int)> lane_job = [&](int t) {
    Lane& lane = lanes_[static_cast<std::size_t>(t)];
    nn::Network& lane_net = *lane.net;
    try {
      if (lanes_count_ > 1) lane_net.backend().use_from_this_thread();
      if (&lane_net != &net && own == nullptr) {
        const auto parameters = net.parameters();
        std::copy(parameters.begin(), parameters.end(), lane_net.parameters().begin());
      }
      for (int i = t; i < hosted(); i += lanes_count_) {
        const int w = first_ + i;
        WorkerReport report = compute_worker(lane, w, step, loss_scale, own);
        if (own != nullptr) own->update(w, t, lane_net, report);
        std::unique_lock lock(turn_mutex);
        turn.wait(lock, [&] { return next_to_add == i || failed; });
        if (failed) return;
        add(w, lane_net, report);
        reports[static_cast<std::size_t>(i)] = report;
        ++next_to_add;
        turn.notify_all();
      }
    } catch (...) {
      {
        const std::lock_guard lock(turn_mutex);
        failed = true;
      }
      turn.notify_all();
      throw;
    }
  };
  if (threads_) {
    threads_->run(lane_job);
  } else {
    lane_job(0);
  }
  // Each lane's first worker's next batch while the step is combined (its buffers are free:
  // the rounds are done).
  for (int t = 0; t < lanes_count_; ++t) {
    Lane& lane = lanes_[static_cast<std::size_t>(t)];
    if (lane.ahead) lane.ahead->start(*loaders_[static_cast<std::size_t>(t)]);
  }
  return reports;
}

}  // namespace mbkit::train
