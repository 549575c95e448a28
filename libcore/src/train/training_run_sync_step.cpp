// The synchronous step (training_run.hpp) as policies of the engine's loops (loop_policies.hpp):
// every rank that updates (the ps master and servers, every allreduce rank, the one process
// without mpirun, the process emulating the workers and the ranks hosting shares of them) runs
// the server loop over a SyncServerPolicy, each ps worker the worker loop over a
// SyncWorkerPolicy. What every rank of a step runs alike (its round, the step's selection, the
// staging, the combine) is SyncStep's. run_sync (training_run_sync.cpp) sets the exchange up,
// gives the first verdict and chooses the policies.
#include <algorithm>
#include <optional>
#include <vector>

#include "mbkit/train/training_run.hpp"

namespace mbkit::train {

class TrainingRun::SyncStep {
 public:
  // `gradients`: the host memory the exchange sums (the gradient buffer itself on a
  // host-accessible backend, else a staged copy), `tail` right after it.
  SyncStep(TrainingRun& run, SyncExchange& exchange, std::span<float> gradients,
           std::span<float> tail)
      : run_(run),
        exchange_(exchange),
        gradients_(gradients),
        tail_(tail),
        staged_(!run.net_->backend().host_accessible()),
        // A device backend's gradients go to the host only to be exchanged through MPI: alone,
        // or summed by NCCL, a rank copies them only when finish_gradient rescales them.
        exchanged_(staged_ && run.role_.distributed && !exchange.device_allreduce()) {}

  // The step's round where this rank computes (its own, or the hosted workers' under
  // --emulate) at the step's version (AMB-DG), and the step's selection: whose gradients count
  // (a dropped worker's sent as zeros) and K-batch-sync's plan. The gradients are then where
  // the exchange sums them.
  void compute() {
    TrainingRun& run = run_;
    const Role& role = run.role_;
    const std::int64_t step = run.step_;
    // 0: the batch's size. A step that drops gradients averages the used ones' samples.
    // K-batch-sync: K batches.
    const std::int64_t nominal =
        run.options_.k_batch_sync > 0 ? run.k_batch_samples()
        : !role.distributed           ? 0
        : run.selection_.drops()
            ? run.global_batch_ * run.selection_.used_per_step() / run.selection_.workers()
            : run.global_batch_;
    run.begin_delayed_round();  // AMB-DG: the round computes at its delayed version
    report_ = WorkerReport();
    hosted_.clear();
    used_.clear();  // by worker: whose gradient the step takes (all: empty)
    if (run.options_.k_batch_sync > 0) {
      // The workers with no batch by the step's end send zeros; the state is the others' mean.
      const KBatchStep plan = run.plan_k_batches();
      int computing = 0;
      for (const int batches : plan.batches) {
        used_.push_back(batches > 0);
        computing += batches > 0 ? 1 : 0;
      }
      exchange_.set_state_contributors(computing);
    }
    if (run.emulated_ && run.selection_.drops()) {
      used_ = run.selection_.select(run.emulated_arrivals());
    }
    if (run.emulated_) {
      // The stop codes a rank per worker would send: a signal on every one, rank 0's verdict
      // on worker 0 of allreduce, and the planned end.
      const int signalled = run.stop_request_.requested() ? kSignalled : kContinue;
      const int rank0 =
          !role.parameter_server && step + 1 < run.planned_ ? run.rank0_stop() : kContinue;
      const int end = !role.parameter_server && step + 1 >= run.planned_ ? kFinished : kContinue;
      hosted_ = run.emulated_->run_step(
          step, 1.0 / static_cast<double>(nominal), run.emulated_sum_,
          [&](int w) {
            return std::max({signalled, end, w == 0 ? rank0 : 0});
          },
          used_);
      if (role.shares) run.combine_shares(run.emulated_sum_);
    } else if (role.computes) {
      report_ = run.round_->run(step, nominal > 0 ? 1.0 / static_cast<double>(nominal) : 0.0);
      // allreduce's ranks stop together: rank 0's verdict and the planned end ride in the
      // reports (ps's master decides after the step).
      report_.stop = run.stop_request_.requested() ? kSignalled : kContinue;
      if (!role.parameter_server && run.logs_ && step + 1 < run.planned_) {
        report_.stop = std::max(report_.stop, run.rank0_stop());
      }
      if (!role.parameter_server && step + 1 >= run.planned_) {
        report_.stop = std::max(report_.stop, static_cast<int>(kFinished));
      }
    }
    run.end_delayed_round();
    if (!run.emulated_ && run.selection_.drops()) {
      used_ = run.selection_.select(run.gather_arrivals(report_));
    }
    step_nominal_ = nominal > 0 ? nominal : (run.round_ ? run.round_->last_drawn() : 0);
    if (exchanged_ && role.computes) {
      run.net_->backend().copy_to_host(run.net_->gradient_buffer(), 0, gradients_);
    }
    state_.emplace(run.net_->host_state());
    // A dropped worker sends zeros (a CPU run: `gradients` are the network's).
    if (!run.emulated_ && role.computes && !used_.empty() &&
        !used_[static_cast<std::size_t>(role.worker)]) {
      drop_contribution(report_, gradients_, state_->values());
    }
  }

  // What this rank's round reports (a dropped worker's without its samples).
  const WorkerReport& report() const { return report_; }
  // The hosted workers' reports (--emulate), in worker order.
  const std::vector<WorkerReport>& hosted() const { return hosted_; }

  // The step's gradients, state and reports combined (`report`: this rank's).
  CombinedStep combine(const WorkerReport& report) {
    TrainingRun& run = run_;
    const std::int64_t step = run.step_;
    auto combined = exchange_.combine(staged_ && !exchanged_ ? std::span<float>() : gradients_,
                                      state_->values(), report, step, step_nominal_, tail_);
    state_->write_back();
    state_.reset();
    if (staged_ && !exchanged_ && gradient_rescaled(step_nominal_, combined.samples)) {
      nn::HostView rescaled = run.net_->host_gradients();
      finish_gradient(rescaled.values(), step_nominal_, combined.samples);
      rescaled.write_back();
    }
    for (std::size_t w = 0; w < used_.size() && w < combined.workers.size(); ++w) {
      combined.workers[w].dropped = !used_[w];
    }
    version_ = run.versions_ ? run.versions_->version_for(step) : step;
    for (WorkerReport& r : combined.workers) r.staleness = step - version_;
    return combined;
  }

  std::span<float> gradients() const { return gradients_; }
  // The combined gradients went through the host and go back to the device for the update.
  bool exchanged() const { return exchanged_; }
  // The parameters' version the step's rounds computed at (AMB-DG; else the step).
  std::int64_t version() const { return version_; }

 private:
  TrainingRun& run_;
  SyncExchange& exchange_;
  const std::span<float> gradients_;
  const std::span<float> tail_;
  const bool staged_;
  const bool exchanged_;
  WorkerReport report_;
  std::vector<WorkerReport> hosted_;
  std::vector<bool> used_;
  std::int64_t step_nominal_ = 0;
  std::int64_t version_ = 0;
  std::optional<nn::HostView> state_;  ///< from compute() to combine()
};

// A rank that updates: the step's round (where it computes) and combine, the nan policy, the
// optimizer step over its shard; the verdict is agreed on (ps: the master's, sent with the
// parameters; allreduce: rank 0's, in the reports; shares: rank 0's, with its update's time,
// which the loop shares) and then the step priced on the virtual clock (the slowest worker,
// the exchange, the update: virtual_clock.hpp).
class TrainingRun::SyncServerPolicy final : public ServerPolicy {
 public:
  SyncServerPolicy(TrainingRun& run, SyncExchange& exchange, SyncStep& step)
      : run_(run), exchange_(exchange), step_(step) {}

  // run_sync gave the first verdict (first_verdict).
  int start(std::int64_t /*step*/, int /*stop*/) override { return run_.stop_; }

  bool stops_alone() const override { return run_.role_.master; }

  ServerUpdate collect(std::int64_t step) override {
    ServerUpdate update;
    update.lr = run_.schedule_->at(step, run_.epoch_at(step));
    step_.compute();
    update.combined = step_.combine(step_.report());
    if (run_.role_.computes) run_.worker_line(step + 1, step_.report());
    for (const WorkerReport& r : step_.hosted()) run_.worker_line(step + 1, r);
    // The hosted workers' summed gradients are what the optimizer steps with.
    if (run_.emulated_) {
      const std::span<float> sum = step_.gradients();
      std::copy(sum.begin(), sum.end(), run_.net_->gradients().begin());
    }
    return update;
  }

  void update(ServerUpdate& update) override {
    TrainingRun& run = run_;
    nn::Backend& backend = run.net_->backend();
    const bool timed = run.clock_.is_virtual() && run.compute_models_.empty();
    WorkTimer update_timer(run.clock_, backend);
    const auto update_start = SteadyClock::now();
    if (step_.exchanged()) {  // the combined gradients of the part this rank updates
      backend.copy_from_host(step_.gradients().subspan(run.shard_.first, run.optimizer_->size()),
                             run.net_->gradient_buffer(), run.shard_.first);
    }
    run.optimizer_->step(run.net_->parameter_buffer(), run.net_->gradient_buffer(), update.lr,
                         run.shard_.first);
    const double measured = update_timer.seconds();    // a GPU's update ends with its kernel
    if (timed) update.virtual_update_time = measured;  // free with a model
    if (run.role_.parameter_server) exchange_.set_update_time(seconds_since(update_start));
  }

  // The step is priced once the verdict is agreed on (the shares' update time comes with it).
  double virtual_now() const override { return run_.clock_.virtual_now(); }

  int agree(std::int64_t step, int stop, ServerUpdate& update) override {
    TrainingRun& run = run_;
    const Role& role = run.role_;
    if (role.parameter_server) stop = run.distribute(exchange_, stop);
    if (run.round_) {
      run.round_->set_previous_exchange(exchange_.last_send_time(), exchange_.last_wait_time(),
                                        exchange_.last_recv_time());
    }
    if (run.clock_.is_virtual() && (run.logs_ || role.shares)) {
      CombinedStep& combined = update.combined;
      std::vector<SyncWorkerTime> times;
      for (const auto& r : combined.workers) {
        times.push_back({r.sleep_time, r.compute_time, !r.dropped});
      }
      const auto timing =
          run.delayed_timeline_
              ? run.delayed_timeline_->step(step - 1, step_.version(), times,
                                            update.virtual_update_time)
              : sync_step_time(times, role.parameter_server, run.comm_model_, run.gradient_bytes_,
                               update.virtual_update_time, role.servers);
      // The round's receive: ps's broadcast of the parameters (allreduce has none of its own).
      for (std::size_t i = 0; i < combined.workers.size(); ++i) {
        combined.workers[i].send_time = timing.sends[i];
        combined.workers[i].wait_time = timing.wait[i];
        combined.workers[i].recv_time = timing.receives[i];
        combined.workers[i].exit_time = 0;
      }
      combined.wait_time = timing.gather;
      update.step_time = timing.end;
      run.clock_.advance(timing.end);
    }
    return stop;
  }

  // The parameters went with the verdict (agree).
  void publish(std::int64_t /*step*/) override {}

  int finish(std::int64_t /*step*/, int stop) override { return stop; }

 private:
  TrainingRun& run_;
  SyncExchange& exchange_;
  SyncStep& step_;
};

// A ps worker: the step's round, its gradients sent, the master's parameters and verdict
// received; evaluations and checkpoints in step with the master.
class TrainingRun::SyncWorkerPolicy final : public WorkerPolicy {
 public:
  SyncWorkerPolicy(TrainingRun& run, SyncExchange& exchange, SyncStep& step)
      : run_(run), exchange_(exchange), step_(step) {}

  bool receive(std::int64_t rounds) override {
    TrainingRun& run = run_;
    if (rounds == 0) return run.stop_ == kContinue;  // run_sync's first verdict
    ++run.step_;
    run.samples_seen_ += static_cast<double>(combined_.samples);
    run.stop_ = run.distribute(exchange_, combined_.stop);
    if (run.round_) {
      run.round_->set_previous_exchange(exchange_.last_send_time(), exchange_.last_wait_time(),
                                        exchange_.last_recv_time());
    }
    if (run.stop_ == kDiverged) return false;
    run.after_step(run.clock_.now());
    return run.stop_ == kContinue;
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    step_.compute();
    return step_.report();
  }

  void send(const WorkerReport& report) override { combined_ = step_.combine(report); }

  std::int64_t numbered(std::int64_t /*rounds*/) const override { return run_.step_ + 1; }

  int finish() override { return run_.stop_; }

 private:
  TrainingRun& run_;
  SyncExchange& exchange_;
  SyncStep& step_;
  CombinedStep combined_;
};

void TrainingRun::run_sync_steps(SyncExchange& exchange, std::span<float> gradients,
                                 std::span<float> tail) {
  SyncStep step(*this, exchange, gradients, tail);
  if (!role_.parameter_server || role_.server) {
    SyncServerPolicy server(*this, exchange, step);
    run_server(server);
  } else {
    SyncWorkerPolicy worker(*this, exchange, step);
    run_worker(worker);
  }
}

}  // namespace mbkit::train
