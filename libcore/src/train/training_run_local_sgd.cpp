// Local SGD's loop (--local-steps tau, mbkit/train/local_sgd.hpp): the synchronous loop with
// each worker's own update at every step and the models averaged at the end of a period.
#include <algorithm>
#include <cmath>

#include "mbkit/train/local_sgd.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

struct LocalSgdLoop {
  LocalSgdLoop(const comm::World& world, bool parameter_server, AllreduceVia via)
      : reports(world, parameter_server, via), models(world, parameter_server, via) {}
  SyncExchange reports;  ///< every step: the workers' reports (and the stop codes)
  SyncExchange models;   ///< at averagings: the models and the state
  std::size_t model_size = 0;
  std::vector<float> report_sum;      ///< --emulate: the workers' report slots
  std::vector<float> model_sum;       ///< the model, then the exchange's tail (state, reports)
  std::optional<LocalModels> hosted;  ///< --emulate: each worker's model between averagings
  LocalSgdClock clock;
  std::vector<WorkerReport> step_reports;  ///< --emulate: this step's, by worker
};

void TrainingRun::run_local_sgd() {
  MBKIT_CHECK(net_->backend().host_accessible() && optimizer_, "local SGD on the CPU");
  LocalSgdLoop loop(world_, role_.parameter_server,
                    role_.shared_memory ? AllreduceVia::kSharedMemory : AllreduceVia::kMpi);
  if (emulated_) {
    loop.reports.set_in_process(role_.workers, role_.parameter_server);
    loop.models.set_in_process(role_.workers, role_.parameter_server);
    loop.report_sum.assign(loop.reports.tail_floats(0), 0.0f);
  }
  loop.model_size = model_floats(*net_, *optimizer_);
  loop.model_sum.assign(loop.model_size + loop.models.tail_floats(net_->state_count()), 0.0f);
  stop_ = first_verdict(loop.reports);
  if (emulated_) {
    // Every worker starts from the run's model (after a resume: the checkpoint's average).
    loop.hosted.emplace(role_.workers, loop.model_size, net_->state_count());
    loop.hosted->set_all(*net_, *optimizer_);
    log::info(cat("--local-steps: the emulated workers' models take ",
                  with_commas(static_cast<std::int64_t>(loop.hosted->bytes())), " bytes"));
  }
  while (stop_ == kContinue) {
    stop_ = local_sgd_step(loop);
    if (stop_ == kDiverged) break;
    after_step(clock_.now());
  }
}

bool TrainingRun::averages_after(int verdict) const {
  const std::int64_t done = step_ + 1;
  if (ends_period(done, options_.local_steps) || verdict != kContinue || done >= planned_) {
    return true;
  }
  const bool eval = options_.eval_every > 0 && done % options_.eval_every == 0;
  const bool save = options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0;
  const bool epoch_end = std::floor(epoch_at(done)) > whole_epochs_;
  return eval || save || epoch_end;
}

void TrainingRun::local_update(double lr, WorkerReport& report, std::int64_t batch) {
  if (gradient_rescaled(batch, report.samples)) {
    finish_gradient(net_->gradients(), batch, report.samples);
  }
  WorkTimer timer(clock_, net_->backend());
  optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), lr, 0);
  // On the virtual clock the update is the worker's own work (free under a compute model).
  const double seconds = timer.seconds();
  if (clock_.is_virtual() && compute_models_.empty()) report.compute_time += seconds;
}

int TrainingRun::local_sgd_step(LocalSgdLoop& loop) {
  const auto step_start = SteadyClock::now();
  const double lr = schedule_->at(step_, epoch_at(step_));
  // The stop codes a worker sends, as sync_step's: a signal, rank 0's verdict on worker 0 of
  // allreduce, the planned end.
  const auto stop_of = [&](int w) {
    int stop = stop_request_.requested() ? kSignalled : kContinue;
    if (!role_.parameter_server && w == 0 && logs_ && step_ + 1 < planned_) {
      stop = std::max(stop, rank0_stop());
    }
    if (!role_.parameter_server && step_ + 1 >= planned_) stop = std::max(stop, +kFinished);
    return stop;
  };
  WorkerReport report;
  loop.step_reports.clear();
  if (emulated_) {
    const std::int64_t optimizer_steps = optimizer_->steps();
    if (role_.parameter_server) std::fill(loop.report_sum.begin(), loop.report_sum.end(), 0.0f);
    for (int w = 0; w < role_.workers; ++w) {
      const std::int64_t batch = worker_batch_size(options_, role_.workers, w);
      loop.hosted->load(w, *net_, *optimizer_);
      optimizer_->set_steps(optimizer_steps);  // each worker's own count
      WorkerReport r = emulated_->run_worker(w, step_, 1.0 / static_cast<double>(batch));
      local_update(lr, r, batch);
      loop.hosted->store(w, *net_, *optimizer_);
      r.stop = stop_of(w);
      add_worker_to_sum(loop.report_sum, {}, {}, r, w, role_.parameter_server);
      loop.step_reports.push_back(r);
    }
  } else if (role_.computes) {
    report = round_->run(step_, 1.0 / static_cast<double>(batch_));
    local_update(lr, report, batch_);
    report.stop = stop_of(role_.worker);
  } else {
    // The ps master keeps the workers' count of updates, which a checkpoint records.
    optimizer_->set_steps(optimizer_->steps() + 1);
  }
  const std::span<float> no_gradients =
      emulated_ ? std::span(loop.report_sum).first(0) : std::span<float>();
  auto combined = loop.reports.combine(no_gradients, {}, report, step_, 0,
                                       emulated_ ? std::span(loop.report_sum) : std::span<float>());
  if (role_.computes && !emulated_) worker_line(step_ + 1, report);
  for (const WorkerReport& r : loop.step_reports) worker_line(step_ + 1, r);
  int verdict = combined.stop;
  if ((!role_.parameter_server || role_.master) &&
      accept_update(combined.mean_loss()) == kDiverged) {
    verdict = kDiverged;
  }
  if (role_.master) {
    verdict = std::max(verdict, rank0_stop());
    if (step_ + 1 >= planned_) verdict = std::max(verdict, +kFinished);
  }
  if (role_.parameter_server) verdict = loop.reports.distribute({}, {}, verdict, step_);
  const bool average = averages_after(verdict);
  if (average) average_models(loop);
  ++step_;
  samples_seen_ += static_cast<double>(combined.samples);
  double step_time = seconds_since(step_start);
  if (clock_.is_virtual() && logs_) {
    std::vector<SyncWorkerTime> rounds;
    for (const auto& r : combined.workers) rounds.push_back({r.sleep_time, r.compute_time, true});
    if (average) {
      const std::uint64_t bytes = (loop.model_size + net_->state_count()) * sizeof(float);
      const auto timing =
          loop.clock.averaging_step(rounds, role_.parameter_server, comm_model_, bytes);
      for (std::size_t i = 0; i < combined.workers.size(); ++i) {
        combined.workers[i].send_time = timing.sends[i];
        combined.workers[i].wait_time = timing.wait[i];
        combined.workers[i].recv_time = timing.receives[i];
      }
      combined.wait_time = std::max(0.0, timing.gather);
      step_time = timing.end;
    } else {
      step_time = loop.clock.local_step(rounds);
      for (auto& r : combined.workers) r.send_time = r.wait_time = r.recv_time = 0;
      combined.wait_time = 0;
    }
    for (auto& r : combined.workers) r.exit_time = 0;
    clock_.advance(step_time);
  }
  if (logs_) record_step(combined, step_time, lr);
  return verdict;
}

void TrainingRun::average_models(LocalSgdLoop& loop) {
  const std::span<float> model = std::span(loop.model_sum).first(loop.model_size);
  const std::span<float> tail = std::span(loop.model_sum).subspan(loop.model_size);
  const WorkerReport none;  // the reports went with the step's first exchange
  const std::span<float> state = net_->state();
  if (emulated_) {
    if (role_.parameter_server) std::fill(loop.model_sum.begin(), loop.model_sum.end(), 0.0f);
    for (int w = 0; w < role_.workers; ++w) {
      add_worker_to_sum(loop.model_sum, loop.hosted->model(w), loop.hosted->state(w), none, w,
                        role_.parameter_server);
    }
  } else if (role_.computes) {
    read_model(*net_, *optimizer_, model);
  }
  loop.models.combine(model, state, none, step_, 0, tail);
  // The exchange averaged the state; the model is still the sum where it was combined.
  if (!role_.parameter_server || role_.master) finish_average(model, role_.workers);
  if (role_.parameter_server) loop.models.distribute(model, state, kContinue, step_ + 1);
  write_model(model, *net_, *optimizer_);
  if (emulated_) loop.hosted->set_all(*net_, *optimizer_);
}

}  // namespace mbkit::train
