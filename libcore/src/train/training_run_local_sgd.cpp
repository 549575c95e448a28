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
  std::optional<LocalModels> hosted;  ///< --emulate: each hosted worker's model between averagings
  /// --emulate --threads: the optimizer of each lane but lane 0's (the run's), on its network
  std::vector<std::unique_ptr<optim::Optimizer>> lane_optimizers;
  LocalSgdClock clock;
  std::vector<WorkerReport> step_reports;  ///< --emulate: this step's, by worker
  int tau = 1;                             ///< the period: --local-steps, or AdaComm's choice
  std::int64_t since = 0;                  ///< adacomm: local steps since the last averaging
  double first_loss = -1;                  ///< adacomm: F(w_0), the first step's mean loss (rank 0)
  double period_loss_sum = 0;              ///< adacomm: the period's losses and samples (rank 0)
  double period_samples = 0;
  double next_choice = 0;  ///< adacomm: the run's time of the next choice of tau (rank 0)
};

void TrainingRun::run_local_sgd() {
  MBKIT_CHECK(net_->backend().host_accessible() && optimizer_, "local SGD on the CPU");
  // --emulate sums in process (under mpirun too: combine_shares adds the ranks' sums).
  LocalSgdLoop loop(
      world_, role_.parameter_server,
      role_.shared_memory && !emulated_ ? AllreduceVia::kSharedMemory : AllreduceVia::kMpi);
  if (emulated_) {
    loop.reports.set_in_process(role_.workers, role_.parameter_server);
    loop.models.set_in_process(role_.workers, role_.parameter_server);
    loop.report_sum.assign(loop.reports.tail_floats(0), 0.0f);
  }
  loop.model_size = model_floats(*net_, *optimizer_);
  loop.model_sum.assign(loop.model_size + loop.models.tail_floats(net_->state_count()), 0.0f);
  loop.tau = options_.adacomm ? options_.adacomm_tau0 : options_.local_steps;
  loop.next_choice = clock_.now() + options_.adacomm_interval;
  stop_ = first_verdict(loop.reports);
  if (emulated_) {
    // Every worker starts from the run's model (after a resume: the checkpoint's average).
    loop.hosted.emplace(emulated_->hosted(), loop.model_size, net_->state_count());
    for (int t = 1; t < emulated_->lanes(); ++t) {
      loop.lane_optimizers.push_back(optim::make_optimizer(optimizer_config_, optimizer_->size(),
                                                           emulated_->lane_network(t).backend()));
    }
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

bool TrainingRun::averages_after(const LocalSgdLoop& loop, int verdict) const {
  const std::int64_t done = step_ + 1;
  // A fixed period counts the run's steps (a resume averages where the straight run does);
  // AdaComm's the steps since the last average.
  const bool period_end =
      options_.adacomm ? loop.since + 1 >= loop.tau : ends_period(done, loop.tau);
  if (period_end || verdict != kContinue || done >= planned_) return true;
  const bool eval = options_.eval_every > 0 && done % options_.eval_every == 0;
  const bool save = options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0;
  const bool epoch_end = (options_.eval_every_epoch || options_.checkpoint_every_epoch) &&
                         std::floor(epoch_at(done)) > whole_epochs_;
  return eval || save || epoch_end;
}

void TrainingRun::local_update(nn::Network& net, optim::Optimizer& optimizer, double lr,
                               WorkerReport& report, std::int64_t batch) const {
  if (gradient_rescaled(batch, report.samples)) {
    finish_gradient(net.gradients(), batch, report.samples);
  }
  WorkTimer timer(clock_, net.backend());
  optimizer.step(net.parameter_buffer(), net.gradient_buffer(), lr, 0);
  // On the virtual clock the update is the worker's own work (free under a compute model).
  const double seconds = timer.seconds();
  if (clock_.is_virtual() && compute_models_.empty()) report.compute_time += seconds;
}

int TrainingRun::local_sgd_step(LocalSgdLoop& loop) {
  const auto step_start = SteadyClock::now();
  const double lr = schedule_->at(step_, epoch_at(step_));
  // The stop codes a worker sends, as the synchronous step's: a signal, rank 0's verdict on worker
  // 0 of allreduce, the planned end.
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
    // Each hosted worker's round and update on its lane, from its own model (the lanes'
    // rounds and updates in parallel, the reports added in worker order: the same bits for
    // every --threads).
    const std::int64_t optimizer_steps = optimizer_->steps();
    const int first = emulated_->first();
    const auto optimizer_of = [&](int lane) -> optim::Optimizer& {
      return lane == 0 ? *optimizer_ : *loop.lane_optimizers[static_cast<std::size_t>(lane - 1)];
    };
    const auto batch_of = [&](int w) { return worker_batch_size(options_, role_.workers, w); };
    const EmulatedWorkers::OwnModels own{
        [&](int w) { return 1.0 / static_cast<double>(batch_of(w)); },
        [&](int w, int lane, nn::Network& net) {
          loop.hosted->load(w - first, net, optimizer_of(lane));
          optimizer_of(lane).set_steps(optimizer_steps);  // each worker's own count
        },
        [&](int w, int lane, nn::Network& net, WorkerReport& r) {
          local_update(net, optimizer_of(lane), lr, r, batch_of(w));
          loop.hosted->store(w - first, net, optimizer_of(lane));
        }};
    loop.step_reports = emulated_->run_local_step(step_, loop.report_sum, stop_of, own);
    optimizer_->set_steps(optimizer_steps + 1);
    if (role_.shares) combine_shares(loop.report_sum);
  } else if (role_.computes) {
    report = round_->run(step_, 1.0 / static_cast<double>(batch_));
    local_update(*net_, *optimizer_, lr, report, batch_);
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
  if (role_.shares) {
    double no_update_time = 0;  // the workers' updates are in their rounds' compute
    verdict = share_verdict(verdict, no_update_time);
  }
  const bool average = averages_after(loop, verdict);
  if (average) average_models(loop);
  ++step_;
  samples_seen_ += static_cast<double>(combined.samples);
  double step_time = seconds_since(step_start);
  // Under mpirun every rank hosting a share keeps the clock (the combined reports are all).
  if (clock_.is_virtual() && (logs_ || role_.shares)) {
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
  if (options_.adacomm) adapt_period(loop, combined, average);
  return verdict;
}

// AdaComm (Wang & Joshi 2018, its rule for a fixed learning rate): at the first averaging
// after each interval of T0 seconds, tau_l = ceil(sqrt(F(w_l) / F(w_0)) tau_0), F the training
// loss: F(w_0) is the first step's mean loss (every worker's batch at the initial model),
// F(w_l) the mean loss over the period just ended (the workers' own models at their batches).
void TrainingRun::adapt_period(LocalSgdLoop& loop, const CombinedStep& combined, bool averaged) {
  loop.since = averaged ? 0 : loop.since + 1;
  if (world_.rank() == 0) {
    if (loop.first_loss < 0) loop.first_loss = combined.mean_loss();
    loop.period_loss_sum += combined.loss_sum;
    loop.period_samples += static_cast<double>(combined.samples);
  }
  if (!averaged) return;
  std::int64_t tau = loop.tau;
  if (world_.rank() == 0) {
    const double now = clock_.now();
    if (now >= loop.next_choice && loop.period_samples > 0 && loop.first_loss > 0) {
      const double loss = loop.period_loss_sum / loop.period_samples;
      const double scaled = std::ceil(std::sqrt(loss / loop.first_loss) * options_.adacomm_tau0);
      if (std::isfinite(scaled)) tau = static_cast<std::int64_t>(std::clamp(scaled, 1.0, 1e9));
      const double interval = options_.adacomm_interval;
      loop.next_choice = (std::floor(now / interval) + 1) * interval;
      if (tau != loop.tau) {
        log::info(cat("step ", step_, ": AdaComm: tau ", loop.tau, " -> ", tau, " (loss ",
                      strprintf("%.4f", loss), " against ", strprintf("%.4f", loop.first_loss),
                      " at the start)"));
      }
    }
    loop.period_loss_sum = loop.period_samples = 0;
  }
  if (role_.distributed) {
    world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&tau), sizeof tau), 0);
  }
  loop.tau = static_cast<int>(tau);
}

void TrainingRun::average_models(LocalSgdLoop& loop) {
  const std::span<float> model = std::span(loop.model_sum).first(loop.model_size);
  const std::span<float> tail = std::span(loop.model_sum).subspan(loop.model_size);
  const WorkerReport none;  // the reports went with the step's first exchange
  const std::span<float> state = net_->state();
  if (emulated_) {
    // A share's sum starts from zeros, the other workers' report slots included (run_step's).
    if (role_.parameter_server || role_.shares) {
      std::fill(loop.model_sum.begin(), loop.model_sum.end(), 0.0f);
    }
    const int first = emulated_->first();
    for (int w = first; w < first + emulated_->hosted(); ++w) {
      add_worker_to_sum(loop.model_sum, loop.hosted->model(w - first),
                        loop.hosted->state(w - first), none, w, role_.parameter_server);
    }
    if (role_.shares) combine_shares(loop.model_sum);
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
