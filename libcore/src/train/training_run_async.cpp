// The asynchronous master's and workers' policies of the engine's loops (loop_policies.hpp):
// the server takes gradients as they come through an AsyncCombiner (AsyncMaster over MPI, or
// EmulatedAsyncMaster under --emulate), optimizer steps over its shard and publishes; the
// worker refreshes its parameters, runs its round and sends its gradient (AsyncWorker).
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <thread>
#include <utility>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/train/emulated_async.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

// Each server of --servers S is an asynchronous master for its shard (the whole buffer with
// one server), on its own: it stops by the run's rules applied to its own updates, or when
// every worker is done because another server stopped the run. Server 0 keeps the state, logs
// the steps and, with several servers, gets the others' shards and /servers rows at the end.
// Under --emulate this process plays every server: server 0 on this thread, its policy making
// the others (EmulatedAsyncServer below, each on a thread of its own), over the workers' rounds
// they share (EmulatedAsyncRounds).
class TrainingRun::AsyncServerPolicy final : public ServerPolicy {
 public:
  /// The server `server` of this run, with its shard's optimizer; under --emulate with
  /// several servers, over `rounds` (null: this process's server, which makes them).
  AsyncServerPolicy(TrainingRun& run, int server, optim::Optimizer& optimizer,
                    EmulatedAsyncRounds* rounds)
      : run_(run),
        server_(server),
        servers_(std::max(1, run.role_.servers)),
        optimizer_(optimizer),
        first_(server_shard(run.net_->parameter_count(), server, servers_).first),
        length_(server_shard(run.net_->parameter_count(), server, servers_).second - first_),
        // Server 0's: the state (every rank hosting a share of the emulated workers keeps it).
        state_floats_(server == 0 ? run.net_->state_count() : 0),
        // Host memory for the messages: views on a host-accessible backend, counted copies on
        // a device (and where emulated workers compute their rounds on the network: the sum is
        // kept apart).
        in_place_(run.net_->backend().host_accessible() && !run.emulated_),
        state_(state_floats_),
        planned_samples_(run.options_.epochs > 0
                             ? run.options_.epochs * static_cast<double>(run.total_rows_)
                             : std::numeric_limits<double>::infinity()) {
    const TrainOptions& options = run.options_;
    // The gradients come from a rank per worker, or from the workers emulated in this process.
    if (run.emulated_) {
      if (rounds == nullptr) {
        rounds_ = std::make_unique<EmulatedAsyncRounds>(EmulatedAsyncRounds::Parts{
            *run.emulated_, *run.net_, options, servers_, run.async_parameters_receive(),
            [&run] { return run.stop_request_.requested() ? kSignalled : kContinue; },
            [&run](std::int64_t round, const WorkerReport& report) {
              run.worker_line(round, report);
            },
            run.role_.shares ? &run.world_ : nullptr, rounds_ahead_bound()});
        rounds = rounds_.get();
      }
      auto master = std::make_unique<EmulatedAsyncMaster>(
          EmulatedAsyncMaster::Parts{*rounds, server, options});
      emulated_master_ = master.get();
      master_ = std::move(master);
    } else {
      master_ = std::make_unique<AsyncMaster>(run.world_, length_, state_floats_, servers_);
    }
    master_->use_rule({options.k_async > 0, options.staleness_bound});
    if (run.clock_.is_virtual()) {
      // The gradients and the parameters stream: a worker sends its next gradient, the master
      // its next parameters, without waiting for a reply. The measured async cycle prices the
      // pair (the link's period, the send's CPU on the worker), else the stream's message
      // (CommModel::async_cycle, async_sender).
      const std::uint64_t bytes = (length_ + state_floats_) * sizeof(float);
      master_->use_virtual_clock(run.comm_model_.async_cycle(bytes),
                                 run.comm_model_.async_sender(bytes), run.clock_.virtual_now());
    }
    master_->use_time_window(options.async_master_time_limit);
    if (!in_place_) staging_.assign(length_, 0.0f);
    if (rounds_) {
      for (int other = 1; other < servers_; ++other) {
        others_.push_back(run.make_emulated_async_server(other, *rounds_));
      }
    }
  }
  ~AsyncServerPolicy() override;

  double planned_samples() const override { return planned_samples_; }

  int start(std::int64_t step, int stop) override {
    // Always: the workers wait for the starting parameters before they learn of a stop.
    const auto start = SteadyClock::now();
    master_->start(run_.net_->host_parameters().values().subspan(first_, length_),
                   run_.net_->host_state().values().first(state_floats_), step);
    send_seconds_ = seconds_since(start);
    start_others();
    return stop;
  }

  ServerUpdate collect(std::int64_t step) override {
    const auto collect_start = SteadyClock::now();
    nn::Network& net = *run_.net_;
    ServerUpdate update;
    update.lr = run_.schedule_->at(step, epoch_at(step));
    update.combined = master_->collect(
        in_place_ ? net.gradients().subspan(first_, length_) : std::span<float>(staging_), state_,
        async_gradients_per_update(run_.options_), step);
    if (master_->workers_done()) {  // another server stopped the run: no update to make
      update.workers_done = true;
      update.combined.stop = master_->workers_stop();
      return update;
    }
    const double receive_seconds = seconds_since(collect_start);
    if (in_place_) {
      std::copy(state_.begin(), state_.end(), net.state().begin());
    } else {
      net.backend().copy_from_host(staging_, net.gradient_buffer(), first_);
      if (!state_.empty()) net.backend().copy_from_host(state_, net.state_buffer(), 0);
    }
    // Several servers: this server's /servers rows (server 0 writes everyone's at the end),
    // with its update and send times of the previous step, as the synchronous servers report
    // them (the first row: no update, and the start's sends).
    if (servers_ > 1) {
      server_rows_.push_back(
          {step + 1, server_, static_cast<std::int64_t>(length_),
           static_cast<std::int64_t>(update.combined.workers.size() * length_ * sizeof(float)),
           receive_seconds, update_seconds_, send_seconds_});
    }
    return update;
  }

  void update(ServerUpdate& update) override {
    nn::Network& net = *run_.net_;
    const bool timed = run_.clock_.is_virtual() && run_.compute_models_.empty();
    WorkTimer update_timer(run_.clock_, net.backend());
    const auto update_start = SteadyClock::now();
    optimizer_.step(net.parameter_buffer(), net.gradient_buffer(), update.lr, first_);
    if (timed || servers_ > 1) {
      const double measured = update_timer.seconds();  // a GPU's update ends with its kernel
      if (timed) master_->advance(measured);
      if (servers_ > 1) update_seconds_ = seconds_since(update_start);
    }
  }

  double virtual_now() const override { return master_->virtual_now(); }

  void publish(std::int64_t step) override {
    const auto send_start = SteadyClock::now();
    master_->publish(run_.net_->host_parameters().values().subspan(first_, length_),
                     run_.net_->host_state().values().first(state_floats_), step);
    send_seconds_ = seconds_since(send_start);
  }

  int finish(std::int64_t step, int stop) override {
    master_->finish(step, stop);
    const int ended = std::max(stop, master_->workers_stop());  // a worker's from another server
    if (master_->discarded() > 0) {
      log::verbose(cat(master_->discarded(), " gradients arrived after the end and were not used"));
    }
    if (run_.emulated_ && server_ > 0) return ended;  // this process's server gathers its rows
    run_.stop_ = ended;
    if (servers_ > 1) {
      if (run_.emulated_) {
        gather_others();
      } else {
        run_.gather_async_servers(std::move(server_rows_));
      }
    }
    return run_.stop_;
  }

  /// An emulated server whose loop failed: the others stop waiting for it.
  void abandon() {
    if (emulated_master_ != nullptr) emulated_master_->abandon();
  }
  /// The epoch at this server's step `step` (the schedule's): its own samples under --emulate.
  std::function<double(std::int64_t)> epoch_at = [this](std::int64_t step) {
    return run_.epoch_at(step);
  };
  std::vector<metrics::ServerRecord>& server_rows() { return server_rows_; }

 private:
  void start_others();
  void gather_others();

  TrainingRun& run_;
  const int server_, servers_;
  optim::Optimizer& optimizer_;
  const std::size_t first_, length_, state_floats_;
  const bool in_place_;
  std::vector<float> state_;
  std::vector<float> staging_;  ///< the gradient sum of the shard, when not in place
  const double planned_samples_;
  std::unique_ptr<EmulatedAsyncRounds> rounds_;  ///< under --emulate: this process's server's
  std::unique_ptr<AsyncCombiner> master_;
  EmulatedAsyncMaster* emulated_master_ = nullptr;            ///< master_, under --emulate
  std::vector<std::unique_ptr<EmulatedAsyncServer>> others_;  ///< the other servers' loops
  std::vector<metrics::ServerRecord> server_rows_;
  double update_seconds_ = 0, send_seconds_ = 0;
};

// Server `server` of --servers S under --emulate: the server loop's steps (run_server's) for
// a server that does not log, as a server rank's under mpirun, on a thread of its own; with its
// own step, samples, clock and stop, over the rounds the servers share.
class TrainingRun::EmulatedAsyncServer {
 public:
  EmulatedAsyncServer(TrainingRun& run, int server, EmulatedAsyncRounds& rounds)
      : run_(run),
        policy_(run, server, *run.server_optimizers_.at(static_cast<std::size_t>(server - 1)),
                &rounds),
        step_(run.step_),
        samples_seen_(run.samples_seen_) {
    policy_.epoch_at = [this](std::int64_t) {
      return samples_seen_ / static_cast<double>(run_.total_rows_);
    };
  }
  ~EmulatedAsyncServer() {
    if (thread_.joinable()) thread_.join();
  }

  void start() {
    thread_ = std::thread([this] {
      try {
        stop_ = loop();
      } catch (...) {
        failure_ = std::current_exception();
        policy_.abandon();  // the others stop waiting for this server
      }
    });
  }
  /// Waits for the loop's end: its StopCode (its failure, rethrown).
  int join() {
    if (thread_.joinable()) thread_.join();
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    return stop_;
  }
  std::vector<metrics::ServerRecord>& rows() { return policy_.server_rows(); }

 private:
  // run_server's checks of a rank's own stop: a signal, the time budget on its clock. Under
  // shares a signal reaches the ranks at different steps: server 0's agreed stop ends the run.
  int stop_now() const {
    if (!run_.role_.shares && run_.stop_request_.requested()) return kSignalled;
    if (policy_.virtual_now() - run_.clock_.elapsed_before() >= run_.budget_) return kFinished;
    return kContinue;
  }
  // accept_update's nan policy, on this server's updates.
  int accept(double loss) {
    if (std::isfinite(loss)) {
      consecutive_skips_ = 0;
      return kContinue;
    }
    if (run_.options_.nan_policy != "skip") return kDiverged;
    return ++consecutive_skips_ > kMaxConsecutiveSkips ? static_cast<int>(kDiverged) : -1;
  }
  int loop() {
    const double planned_samples = policy_.planned_samples();
    int stop = step_ >= run_.planned_ || samples_seen_ >= planned_samples ? kFinished : kContinue;
    stop = policy_.start(step_, std::max(stop, stop_now()));
    while (stop == kContinue) {
      ServerUpdate update = policy_.collect(step_);
      if (update.workers_done) {  // another server stopped the run
        stop = std::max({stop, update.combined.stop, static_cast<int>(kFinished)});
        break;
      }
      const int decision = accept(update.combined.mean_loss());
      if (decision == kContinue) policy_.update(update);
      step_ += update.steps;
      samples_seen_ += static_cast<double>(update.combined.samples);
      stop = std::max(update.combined.stop, stop_now());
      if (step_ >= run_.planned_ || samples_seen_ >= planned_samples) {
        stop = std::max(stop, static_cast<int>(kFinished));
      }
      if (decision == kDiverged) stop = kDiverged;
      if (stop == kContinue) policy_.publish(step_);
    }
    return policy_.finish(step_, stop);
  }

  static constexpr int kMaxConsecutiveSkips = 20;  // as accept_update's
  TrainingRun& run_;
  AsyncServerPolicy policy_;
  std::int64_t step_;
  double samples_seen_;
  int consecutive_skips_ = 0;
  int stop_ = kContinue;
  std::exception_ptr failure_;
  std::thread thread_;
};

std::unique_ptr<TrainingRun::EmulatedAsyncServer> TrainingRun::make_emulated_async_server(
    int server, EmulatedAsyncRounds& rounds) {
  return std::make_unique<EmulatedAsyncServer>(*this, server, rounds);
}

TrainingRun::AsyncServerPolicy::~AsyncServerPolicy() {
  abandon();  // a loop that failed: the other servers stop waiting for it
  for (auto& other : others_) {
    try {
      other->join();
    } catch (...) {  // this server's own failure is the one that is reported
    }
  }
}

void TrainingRun::AsyncServerPolicy::start_others() {
  for (auto& other : others_) other->start();
}

void TrainingRun::AsyncServerPolicy::gather_others() {
  // As gather_async_servers: the shards are the network's already.
  std::vector<metrics::ServerRecord> rows = std::move(server_rows_);
  for (auto& other : others_) {
    run_.stop_ = std::max(run_.stop_, other->join());
    rows.insert(rows.end(), other->rows().begin(), other->rows().end());
  }
  run_.write_server_rows(std::move(rows));
}

std::unique_ptr<ServerPolicy> TrainingRun::make_async_server() {
  return std::make_unique<AsyncServerPolicy>(*this, role_.emulated > 0 ? 0 : world_.rank(),
                                             *optimizer_, nullptr);
}

void TrainingRun::gather_async_servers(std::vector<metrics::ServerRecord> rows) {
  // Beside the exchanges' tags and checkpoint_now's.
  constexpr int kCountTag = 15, kRowsTag = 16, kShardTag = 17, kStopTag = 18;
  constexpr std::size_t kFields = 7;
  if (world_.rank() != 0) {
    std::vector<double> packed;
    for (const auto& r : rows) {
      packed.insert(
          packed.end(),
          {static_cast<double>(r.step), static_cast<double>(r.rank), static_cast<double>(r.floats),
           static_cast<double>(r.bytes_received), r.recv_time, r.update_time, r.send_time});
    }
    const std::int64_t count[2] = {static_cast<std::int64_t>(rows.size()), stop_};
    nn::HostView parameters = net_->host_parameters();
    const auto shard = parameters.values().subspan(shard_.first, shard_.second - shard_.first);
    comm::Request sent = world_.isend(count, sizeof count, 0, kCountTag);
    world_.wait(sent, "sending the server's step count to rank 0");
    sent = world_.isend(packed.data(), packed.size() * sizeof(double), 0, kRowsTag);
    world_.wait(sent, "sending the server's log rows to rank 0");
    sent = world_.isend(shard.data(), shard.size_bytes(), 0, kShardTag);
    world_.wait(sent, "sending the server's shard of the parameters to rank 0");
    // The servers end the run alike (a checkpoint is their collective), as rank 0 decides.
    comm::Request verdict = world_.irecv(&stop_, sizeof stop_, 0, kStopTag);
    world_.wait(verdict, "the end of the run from rank 0");
    return;
  }
  // Rank 0: the whole model for the evaluation, and every server's rows in step order.
  nn::HostView parameters = net_->host_parameters();
  for (int server = 1; server < role_.servers; ++server) {
    std::int64_t count[2] = {0, 0};  // rows, its StopCode
    comm::Request received = world_.irecv(count, sizeof count, server, kCountTag);
    world_.wait(received, cat("the step count of server ", server));
    stop_ = std::max(stop_, static_cast<int>(count[1]));
    std::vector<double> packed(static_cast<std::size_t>(count[0]) * kFields);
    received = world_.irecv(packed.data(), packed.size() * sizeof(double), server, kRowsTag);
    world_.wait(received, cat("the log rows of server ", server));
    for (std::size_t i = 0; i < packed.size(); i += kFields) {
      rows.push_back(
          {static_cast<std::int64_t>(packed[i]), static_cast<std::int64_t>(packed[i + 1]),
           static_cast<std::int64_t>(packed[i + 2]), static_cast<std::int64_t>(packed[i + 3]),
           packed[i + 4], packed[i + 5], packed[i + 6]});
    }
    const auto [begin, end] = server_shard(parameters.values().size(), server, role_.servers);
    received = world_.irecv(parameters.values().data() + begin, (end - begin) * sizeof(float),
                            server, kShardTag);
    world_.wait(received, cat("the shard of the parameters of server ", server));
  }
  parameters.write_back();
  for (int server = 1; server < role_.servers; ++server) {
    comm::Request sent = world_.isend(&stop_, sizeof stop_, server, kStopTag);
    world_.wait(sent, cat("telling server ", server, " how the run ended"));
  }
  write_server_rows(std::move(rows));
}

void TrainingRun::write_server_rows(std::vector<metrics::ServerRecord> rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  if (metric_log_ && metric_log_->is_open()) {
    for (const auto& row : rows) metric_log_->add(row);
  }
}

class TrainingRun::AsyncWorkerPolicy final : public WorkerPolicy {
 public:
  explicit AsyncWorkerPolicy(TrainingRun& run)
      : run_(run),
        worker_(run.world_, run.net_->parameter_count(), run.net_->state_count(),
                std::max(1, run.role_.servers)),
        modelled_receive_(run.async_parameters_receive()) {
    // AMB, as the original's async strategy: newer parameters are taken between micro-batches
    // (the virtual clock's master decides at round starts, so not there).
    if (run.amb_ && !run.clock_.is_virtual()) {
      run.round_->between_micro_batches = [this] {
        if (!master_stopped_ && !refresh(false)) master_stopped_ = true;
      };
    }
  }

  bool receive(std::int64_t rounds) override {
    if (master_stopped_) return false;
    const auto start = SteadyClock::now();
    // Under the virtual clock the master decides which parameters each round starts from;
    // under --staleness-bound every round starts at the master's go (async_rule.hpp).
    const bool go =
        refresh(rounds == 0 || run_.clock_.is_virtual() || run_.options_.staleness_bound >= 0);
    received_ = seconds_since(start);
    return go;
  }

  WorkerReport round(std::int64_t rounds) override {
    run_.round_->set_previous_exchange(0, send_wait_,
                                       run_.clock_.is_virtual() ? modelled_receive_ : received_);
    WorkerReport report = run_.round_->run(based_on_ + rounds, 1.0);
    report.queued_updates = worker_.skipped() - skipped_before_;
    skipped_before_ = worker_.skipped();
    report.based_on = based_on_;
    const TrainOptions& options = run_.options_;
    if (options.async_delay_std > 0) {
      report.comm_delay = emulation::message_delay(options.async_delay_std, options.seed,
                                                   run_.role_.worker, rounds);
    }
    return report;
  }

  void send(const WorkerReport& report) override {
    const auto send_start = SteadyClock::now();
    worker_.send(run_.net_->host_gradients().values(), run_.net_->host_state().values(), report);
    send_wait_ = seconds_since(send_start);  // waiting for the previous send to finish
  }

  int finish() override {
    run_.round_->between_micro_batches = nullptr;
    worker_.finish();
    if (worker_.skipped() > 0) {
      log::verbose(cat(worker_.skipped(), " parameter sets were overtaken before being used"));
    }
    return worker_.stop_code();
  }

 private:
  // AsyncWorker::refresh into the network, through host views.
  bool refresh(bool wait) {
    nn::HostView parameters = run_.net_->host_parameters();
    nn::HostView state = run_.net_->host_state();
    const bool go = worker_.refresh(parameters.values(), state.values(), wait, based_on_);
    parameters.write_back();
    state.write_back();
    return go;
  }

  TrainingRun& run_;
  AsyncWorker worker_;
  const double modelled_receive_;
  std::int64_t based_on_ = 0;
  std::int64_t skipped_before_ = 0;
  bool master_stopped_ = false;
  double received_ = 0;   // seconds of the refresh the round starts from
  double send_wait_ = 0;  // seconds the last send waited for the one before
};

std::unique_ptr<WorkerPolicy> TrainingRun::make_async_worker() {
  return std::make_unique<AsyncWorkerPolicy>(*this);
}

double TrainingRun::async_parameters_receive() const {
  // On the virtual clock a parameter message costs what the master's model says (streamed).
  // With several servers, the largest of the shards arriving side by side.
  const int servers = std::max(1, role_.servers);
  double modelled = 0;
  for (int server = 0; server < servers; ++server) {
    const auto [first, last] = server_shard(net_->parameter_count(), server, servers);
    const std::size_t floats = last - first + (server == 0 ? net_->state_count() : 0);
    modelled = std::max(modelled, comm_model_.streamed(floats * sizeof(float)));
  }
  return modelled;
}

}  // namespace mbkit::train
