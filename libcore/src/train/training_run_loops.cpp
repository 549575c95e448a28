// A training run's loops (training_run.hpp): the choice of the loop and of its policies, the
// one server loop and the one worker loop over them (loop_policies.hpp), and the end of the run.
// Every method runs on them (the synchronous step's policies are chosen in run_sync,
// training_run_sync.cpp, local SGD's in run_local_sgd, training_run_local_sgd.cpp).
#include <algorithm>
#include <csignal>

#include "mbkit/train/loop_policies.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

constexpr int kMaxConsecutiveSkips = 20;  // as training_run_records.cpp's nan policy

}  // namespace

int TrainingRun::train() {
  stop_ = step_ >= planned_ ? kFinished : kContinue;
  if (!role_.async) {  // DBSL is asynchronous too (roles.cpp)
    if (local_sgd(options_)) {
      run_local_sgd();
    } else {
      run_sync();
    }
  } else if (dbsl_ ? role_.master : role_.server) {  // a master, or one of several servers
    // The method's policies, chosen once: a new method that takes updates as they come adds its
    // own (loop_policies.hpp).
    const std::unique_ptr<ServerPolicy> server = dbsl_ ? make_dbsl_server() : make_async_server();
    run_server(*server);
  } else {
    const std::unique_ptr<WorkerPolicy> worker = dbsl_ ? make_dbsl_worker() : make_async_worker();
    run_worker(*worker);
  }
  return finish();
}

double TrainingRun::timed_optimizer_step(double lr) {
  const auto start = SteadyClock::now();
  optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), lr, shard_.first);
  return seconds_since(start);
}

// Collect, accept (the nan policy), update, count, clock, decide (and agree), publish, record:
// every server's step, whatever the method.
void TrainingRun::run_server(ServerPolicy& policy) {
  // Ranks hosting shares of the emulated workers (the synchronous steps, DBSL's --sync server)
  // each run this loop: rank 0's stop, which a signal may reach first, and its update's time
  // on the virtual clock (the step is priced from it).
  const auto agreed = [this](int stop, double& update_time) {
    return role_.shares ? share_verdict(stop, update_time) : stop;
  };
  const double planned_samples = policy.planned_samples();
  if (samples_seen_ >= planned_samples) stop_ = kFinished;
  double no_update_time = 0;
  stop_ = policy.start(step_, agreed(std::max(stop_, rank0_stop()), no_update_time));
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double virtual_start = clock_.virtual_now();
    ServerUpdate update = policy.collect(step_);
    if (update.workers_done) {  // another server stopped the run: no update to make
      stop_ = std::max({stop_, update.combined.stop, static_cast<int>(kFinished)});
      break;
    }
    const int decision = accept_update(update.combined.mean_loss());
    if (decision == kContinue) policy.update(update);
    step_ += update.steps;
    samples_seen_ += static_cast<double>(update.combined.samples);
    if (clock_.is_virtual()) clock_.set_virtual_now(policy.virtual_now());
    stop_ = update.combined.stop;
    if (policy.stops_alone()) {
      stop_ = std::max(stop_, rank0_stop());
      if (step_ >= planned_ || samples_seen_ >= planned_samples) {
        stop_ = std::max(stop_, static_cast<int>(kFinished));
      }
    }
    if (decision == kDiverged) stop_ = kDiverged;
    stop_ = agreed(stop_, update.virtual_update_time);
    stop_ = policy.agree(step_, stop_, update);
    // The workers go on from the update while rank 0 records it.
    if (stop_ == kContinue) policy.publish(step_);
    if (logs_) {
      const double step_time = update.step_time      ? *update.step_time
                               : clock_.is_virtual() ? clock_.virtual_now() - virtual_start
                                                     : seconds_since(step_start);
      record_step(update.combined, step_time, update.lr);
    }
    if (stop_ != kDiverged) after_step(clock_.now());
  }
  stop_ = policy.finish(step_, stop_);
}

// Receive, round, send: every worker's round, whatever the method.
void TrainingRun::run_worker(WorkerPolicy& policy) {
  std::int64_t rounds = 0;
  while (policy.receive(rounds)) {
    WorkerReport report = policy.round(rounds);
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    policy.send(report);
    worker_line(policy.numbered(rounds++), report);
  }
  stop_ = policy.finish();
}

int TrainingRun::finish() {
  const double elapsed = clock_.now();
  if (stop_ == kDiverged) {
    if (metric_log_) metric_log_->close();
    const std::string where = cat("non-finite loss at step ", step_ - 1, " (epoch ",
                                  strprintf("%.2f", epoch_at(step_ - 1)), ")");
    const std::string message =
        options_.nan_policy == "skip"
            ? cat(where, ", ", consecutive_skips_, " steps in a row: --nan-policy skip ",
                  "gives up after ", kMaxConsecutiveSkips, "; lower --lr")
            : cat(where, "; lower --lr, or --nan-policy skip to skip such steps");
    if (logs_) throw Error(message, ExitCode::kDiverged);
    return static_cast<int>(ExitCode::kDiverged);
  }
  if (stop_ == kSignalled) {
    const int signal_number = stop_request_.signal() != 0 ? stop_request_.signal() : SIGTERM;
    const char* name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";
    if (metric_log_) metric_log_->close();
    if (!options_.checkpoint.empty()) {
      checkpoint_now(elapsed);
      if (logs_) {
        progress_->note(cat("stopped by ", name, " at step ", step_, "; state saved in ",
                            options_.checkpoint, " (--resume ", options_.checkpoint,
                            " continues)"));
      }
      return static_cast<int>(ExitCode::kInterrupted);
    }
    if (logs_) {
      progress_->note(
          cat("stopped by ", name, " at step ", step_, "; no --checkpoint, state not saved"));
    }
    return 128 + signal_number;
  }
  if (!evaluated_now_) run_evaluation(elapsed);
  if (!options_.checkpoint.empty()) checkpoint_now(elapsed);
  if (metric_log_) metric_log_->close();
  if (!options_.cpu_quota.empty()) {
    const std::string totals = quota_totals();
    if (!totals.empty()) {
      log::info(
          cat("cpu quota since the ", resume_.resumed > 0 ? "resume" : "start", ": ", totals));
    }
  }
  if (logs_) {
    progress_->note(
        cat("done: ", step_, " steps (", strprintf("%.2f", epoch_at(step_)), " epochs) in ",
            human_duration(clock_.since_start()),
            clock_.is_virtual()
                ? cat(" (", human_duration(clock_.virtual_now() - clock_.elapsed_before()),
                      " emulated)")
                : "",
            skipped_ > 0 ? cat(", ", skipped_, " steps skipped for non-finite loss") : "",
            finished_early_ > 0 ? cat("; ", finished_early_,
                                      " worker rounds did their whole batch before the time limit")
                                : ""));
  }
  return 0;
}

}  // namespace mbkit::train
