// The straggler methods' selection of gradients (--backup-workers, --k-sync, --gradient-coding)
// and K-batch-sync (--k-batch-sync: the first K batches from any workers) on the wall clock, a
// rank per worker (mbkit/train/selecting_exchange.hpp): the master takes the gradients as they
// really arrive; the workers are not in step with each other.
#include <algorithm>
#include <vector>

#include "mbkit/train/selecting_exchange.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

bool TrainingRun::selects_on_wall_clock() const {
  return (selection_.drops() || options_.k_batch_sync > 0) &&
         options_.clock != ClockMode::kVirtual && role_.parameter_server && role_.emulated == 0;
}

void TrainingRun::run_selecting_master(SelectingExchange& exchange) {
  // The gradients are scaled for the samples of the used ones (as on the virtual clock):
  // K-batch-sync's for K batches.
  const bool k_batches = options_.k_batch_sync > 0;
  if (k_batches) exchange.take_batches(options_.k_batch_sync);
  const std::int64_t nominal =
      k_batches ? k_batch_samples()
                : global_batch_ * selection_.used_per_step() / selection_.workers();
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double lr = schedule_->at(step_, epoch_at(step_));
    std::vector<bool> used;
    CombinedStep combined;
    {
      const nn::HostView parameters = net_->host_parameters();
      nn::HostView state = net_->host_state();
      if (k_batches) {
        std::vector<int> batches;
        combined = exchange.collect_batches(net_->gradients(), state.values(), parameters.values(),
                                            step_, nominal, batches);
        for (const int b : batches) used.push_back(b > 0);
      } else {
        combined = exchange.collect(net_->gradients(), state.values(), parameters.values(), step_,
                                    nominal, used);
      }
      state.write_back();
    }
    for (std::size_t w = 0; w < used.size() && w < combined.workers.size(); ++w) {
      combined.workers[w].dropped = !used[w];
    }
    int verdict = combined.stop;
    const int decision = accept_update(combined.mean_loss());
    if (decision == kContinue) {
      const auto update_start = SteadyClock::now();
      optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), lr, shard_.first);
      combined.servers.front().update_time = seconds_since(update_start);
    } else if (decision == kDiverged) {
      verdict = kDiverged;
    }
    ++step_;
    samples_seen_ += static_cast<double>(combined.samples);
    verdict = std::max(verdict, rank0_stop());
    if (step_ >= planned_) verdict = std::max(verdict, static_cast<int>(kFinished));
    {
      const nn::HostView parameters = net_->host_parameters();
      const nn::HostView state = net_->host_state();
      exchange.publish(parameters.values(), state.values(), step_, verdict);
    }
    if (logs_) record_step(combined, seconds_since(step_start), lr);
    stop_ = verdict;
    if (stop_ == kDiverged) break;
    after_step(clock_.now());
  }
  exchange.finish(step_, stop_);
  if (exchange.discarded() > 0) {
    log::verbose(cat(exchange.discarded(), k_batches ? " late batches" : " late gradients",
                     " received and discarded"));
  }
}

void TrainingRun::run_selecting_worker(SelectingExchange& exchange) {
  if (options_.k_batch_sync > 0) {
    run_k_batch_worker(exchange);
    return;
  }
  const std::int64_t nominal = global_batch_ * selection_.used_per_step() / selection_.workers();
  // FMB reads a batch per round: a late worker that skips steps skips their batches too, so a
  // step's batch stays the step's (a gradient-coding group's workers compute the same one).
  const bool batch_per_step = !options_.amb.enabled && train_loader_.has_value();
  while (stop_ == kContinue) {
    WorkerReport report = round_->run(step_, 1.0 / static_cast<double>(nominal));
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    nn::HostView state = net_->host_state();
    exchange.send(net_->gradients(), state.values(), report, step_);
    worker_line(step_ + 1, report);
    nn::HostView parameters = net_->host_parameters();
    const SelectingExchange::Parameters got = exchange.receive(parameters.values(), state.values());
    parameters.write_back();
    state.write_back();
    stop_ = got.stop;
    if (stop_ != kContinue) break;
    const std::int64_t skipped = got.step - (step_ + 1);
    if (skipped > 0) {
      round_->skip_rounds(skipped);
      for (std::int64_t k = 0; batch_per_step && k < skipped; ++k) train_loader_->next();
    }
    step_ = got.step;
    round_->set_previous_exchange(exchange.last_send_time(), exchange.last_wait_time());
    after_step(clock_.now());
  }
}

void TrainingRun::run_k_batch_worker(SelectingExchange& exchange) {
  exchange.take_batches(options_.k_batch_sync);
  const double loss_scale = 1.0 / static_cast<double>(k_batch_samples());
  bool continues = false;  // the next batch goes on with the step's round: no induced delay
  while (stop_ == kContinue) {
    // A batch is not interrupted: newer parameters are taken after it.
    if (continues) round_->continue_round();
    round_->set_batches(1);
    WorkerReport report = round_->run(step_, loss_scale);
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    nn::HostView state = net_->host_state();
    exchange.send(net_->gradients(), state.values(), report, step_);
    worker_line(step_ + 1, report);
    nn::HostView parameters = net_->host_parameters();
    const auto got = exchange.poll(parameters.values(), state.values());
    continues = !got.has_value();
    if (continues) continue;
    parameters.write_back();
    state.write_back();
    stop_ = got->stop;
    if (stop_ != kContinue) break;
    // A round's induced delay per step, as the other methods' workers draw it.
    if (got->step > step_ + 1) round_->skip_rounds(got->step - (step_ + 1));
    step_ = got->step;
    round_->set_previous_exchange(exchange.last_send_time(), exchange.last_wait_time());
    after_step(clock_.now());
  }
  exchange.leave();
}

}  // namespace mbkit::train
