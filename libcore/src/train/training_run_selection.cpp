// The straggler methods' selection of gradients (--backup-workers, --k-sync, --gradient-coding)
// and K-batch-sync (--k-batch-sync: the first K batches from any workers) on the wall clock, a
// rank per worker (mbkit/train/selecting_exchange.hpp), as policies of the engine's loops
// (loop_policies.hpp): the master takes the gradients as they really arrive; the workers are
// not in step with each other. The start (the parameters and the first verdict) is the
// synchronous exchange's broadcast (run_sync).
#include <algorithm>
#include <optional>
#include <vector>

#include "mbkit/train/selecting_exchange.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

// Rounds of micro-batches (AMB, DropCompute) have a seam to stop at; K-batch-sync's worker polls
// for parameters between its batches instead.
bool TrainingRun::abandons_late_rounds() const {
  return amb_ && options_.k_batch_sync == 0;
}

bool TrainingRun::selects_on_wall_clock() const {
  return (selection_.drops() || options_.k_batch_sync > 0) &&
         options_.clock != ClockMode::kVirtual && role_.parameter_server && role_.emulated == 0;
}

// The master: a step is the rule's choice of gradients (or K-batch-sync's first K batches),
// summed, an optimizer step, and the new parameters to the workers whose gradients came (every
// worker: K-batch-sync); the stop goes with the last parameters.
class TrainingRun::SelectingServerPolicy final : public ServerPolicy {
 public:
  explicit SelectingServerPolicy(TrainingRun& run)
      : run_(run),
        exchange_(run.world_, run.selection_, run.net_->parameter_count(), run.net_->state_count()),
        k_batches_(run.options_.k_batch_sync > 0),
        // The gradients are scaled for the samples of the used ones (as on the virtual
        // clock): K-batch-sync's for K batches.
        nominal_(k_batches_ ? run.k_batch_samples()
                            : run.global_batch_ * run.selection_.used_per_step() /
                                  run.selection_.workers()) {
    if (k_batches_) exchange_.take_batches(run.options_.k_batch_sync);
    if (run.abandons_late_rounds()) exchange_.notify_late();
  }

  // The workers have the starting parameters and the verdict from run_sync's broadcast.
  int start(std::int64_t /*step*/, int /*stop*/) override { return run_.stop_; }

  ServerUpdate collect(std::int64_t step) override {
    nn::Network& net = *run_.net_;
    ServerUpdate update;
    update.lr = run_.schedule_->at(step, run_.epoch_at(step));
    std::vector<bool> used;
    {
      const nn::HostView parameters = net.host_parameters();
      nn::HostView state = net.host_state();
      if (k_batches_) {
        std::vector<int> batches;
        update.combined = exchange_.collect_batches(net.gradients(), state.values(),
                                                    parameters.values(), step, nominal_, batches);
        for (const int b : batches) used.push_back(b > 0);
      } else {
        update.combined = exchange_.collect(net.gradients(), state.values(), parameters.values(),
                                            step, nominal_, used);
      }
      state.write_back();
    }
    auto& workers = update.combined.workers;
    for (std::size_t w = 0; w < used.size() && w < workers.size(); ++w) {
      workers[w].dropped = !used[w];
    }
    collected_ = true;
    return update;
  }

  void update(ServerUpdate& update) override {
    update.combined.servers.front().update_time = run_.timed_optimizer_step(update.lr);
  }

  double virtual_now() const override { return run_.clock_.virtual_now(); }  // the wall clock's

  void publish(std::int64_t step) override { send(step, kContinue); }

  int finish(std::int64_t step, int stop) override {
    // The last step's workers get its parameters with the stop; finish answers the others.
    if (collected_) send(step, stop);
    exchange_.finish(step, stop);
    if (exchange_.discarded() > 0) {
      log::verbose(cat(exchange_.discarded(), k_batches_ ? " late batches" : " late gradients",
                       " received and discarded"));
    }
    if (exchange_.abandoned() > 0) {
      log::verbose(cat(exchange_.abandoned(), " late rounds abandoned by their workers (",
                       exchange_.abandoned_micro_batches(),
                       " micro-batches computed and dropped)"));
    }
    return stop;
  }

 private:
  void send(std::int64_t step, int stop) {
    const nn::HostView parameters = run_.net_->host_parameters();
    const nn::HostView state = run_.net_->host_state();
    exchange_.publish(parameters.values(), state.values(), step, stop);
  }

  TrainingRun& run_;
  SelectingExchange exchange_;
  const bool k_batches_;
  const std::int64_t nominal_;
  bool collected_ = false;  ///< a step began: the exchange is started
};

// A worker of the selection: a round at the parameters of its step, its gradient sent, the
// master's answer awaited (a late worker's answer is the newest parameters: it skips the steps
// it missed). The run's first round starts from run_sync's broadcast. A round of micro-batches
// (AMB, DropCompute) whose step the master made meanwhile is abandoned between micro-batches:
// its report goes instead of its gradient, and the newest parameters come back at once.
class TrainingRun::SelectingWorkerPolicy : public WorkerPolicy {
 public:
  explicit SelectingWorkerPolicy(TrainingRun& run)
      : run_(run),
        exchange_(run.world_, run.selection_, run.net_->parameter_count(), run.net_->state_count()),
        // FMB reads a batch per round: a late worker that skips steps skips their batches
        // too, so a step's batch stays the step's (a gradient-coding group's workers compute
        // the same one).
        batch_per_step_(!run.options_.amb.enabled && run.train_loader_.has_value()),
        nominal_(run.global_batch_ * run.selection_.used_per_step() / run.selection_.workers()) {
    if (run.abandons_late_rounds()) {
      exchange_.notify_late();
      run.round_->abandon_round = [this] { return exchange_.overtaken(run_.step_); };
    }
  }

  bool receive(std::int64_t rounds) override {
    if (rounds == 0) return run_.stop_ == kContinue;
    nn::HostView parameters = run_.net_->host_parameters();
    const SelectingExchange::Parameters got = exchange_.receive(parameters.values(), sent_state());
    return went_on(got, parameters, batch_per_step_);
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    return run_.round_->run(run_.step_, 1.0 / static_cast<double>(nominal_));
  }

  void send(const WorkerReport& report) override {
    // The state's view stays for the answer (one copy each way on a device).
    state_.emplace(run_.net_->host_state());
    if (run_.round_->last_round_abandoned()) {
      exchange_.abandon(report, run_.step_);
      if (run_.options_.worker_log) {  // a worker's console is at most normal (-v is rank 0's)
        log::info(cat("step ", run_.step_ + 1, ": abandoned after ", report.micro_batches,
                      " micro-batches (the master made the step without it)"));
      }
      return;
    }
    exchange_.send(run_.net_->gradients(), state_->values(), report, run_.step_);
  }

  std::int64_t numbered(std::int64_t /*rounds*/) const override { return run_.step_ + 1; }

  int finish() override {
    if (run_.round_->abandon_round) {
      run_.round_->abandon_round = nullptr;
      exchange_.stop_listening();
    }
    return run_.stop_;
  }

 protected:
  std::span<float> sent_state() { return state_->values(); }

  // Parameters came: written into the network; false at the master's stop, else the step they
  // start (the induced delays, and the batches where `skip_batches`, of the steps missed).
  bool went_on(const SelectingExchange::Parameters& got, nn::HostView& parameters,
               bool skip_batches) {
    parameters.write_back();
    state_->write_back();
    run_.stop_ = got.stop;
    if (run_.stop_ != kContinue) return false;
    const std::int64_t skipped = got.step - (run_.step_ + 1);
    if (skipped > 0) {
      run_.round_->skip_rounds(skipped);
      for (std::int64_t k = 0; skip_batches && k < skipped; ++k) run_.train_loader_->next();
    }
    run_.step_ = got.step;
    run_.round_->set_previous_exchange(exchange_.last_send_time(), exchange_.last_wait_time());
    run_.after_step(run_.clock_.now());
    return true;
  }

  TrainingRun& run_;
  SelectingExchange exchange_;
  const bool batch_per_step_;
  const std::int64_t nominal_;
  std::optional<nn::HostView> state_;
};

// --k-batch-sync on the wall clock: batches back to back, each sent as it ends, tagged with its
// step; between batches (never inside one) the newest parameters that came, if any.
class TrainingRun::KBatchWorkerPolicy final : public SelectingWorkerPolicy {
 public:
  explicit KBatchWorkerPolicy(TrainingRun& run)
      : SelectingWorkerPolicy(run), loss_scale_(1.0 / static_cast<double>(run.k_batch_samples())) {
    exchange_.take_batches(run.options_.k_batch_sync);
  }

  bool receive(std::int64_t rounds) override {
    if (rounds == 0) return run_.stop_ == kContinue;
    nn::HostView parameters = run_.net_->host_parameters();
    const auto got = exchange_.poll(parameters.values(), sent_state());
    continues_ = !got.has_value();
    if (continues_) return true;  // the step's round goes on at the parameters it has
    // A round's induced delay per step, as the other methods' workers draw it.
    return went_on(*got, parameters, false);
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    if (continues_) run_.round_->continue_round();  // no induced delay again
    run_.round_->set_batches(1);
    return run_.round_->run(run_.step_, loss_scale_);
  }

  int finish() override {
    exchange_.leave();
    return run_.stop_;
  }

 private:
  const double loss_scale_;
  bool continues_ = false;  ///< the next batch goes on with the step's round
};

std::unique_ptr<ServerPolicy> TrainingRun::make_selecting_server() {
  return std::make_unique<SelectingServerPolicy>(*this);
}

std::unique_ptr<WorkerPolicy> TrainingRun::make_selecting_worker() {
  if (options_.k_batch_sync > 0) return std::make_unique<KBatchWorkerPolicy>(*this);
  return std::make_unique<SelectingWorkerPolicy>(*this);
}

}  // namespace mbkit::train
