// Local SGD (--local-steps tau, mbkit/train/local_sgd.hpp): the synchronous step with each
// worker's own update at every step and the models averaged at the end of a period, as
// policies of the engine's loops (loop_policies.hpp): every rank that combines the reports (the
// ps master, every allreduce rank, the one process, the emulating process and the ranks hosting
// shares of its workers) runs the server loop over a LocalSgdServerPolicy, each ps worker the
// worker loop over a LocalSgdWorkerPolicy; what both run alike is LocalSgdStep's.
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

// A local step's part every rank runs alike: the rounds and own updates (this rank's, or the
// hosted workers'), their reports combined; after the verdict, the models averaged where the
// step ends a period (or comes before an evaluation, a checkpoint or the end).
class TrainingRun::LocalSgdStep {
 public:
  LocalSgdStep(TrainingRun& run, LocalSgdLoop& loop) : run_(run), loop_(loop) {}

  // The step's rounds and updates at `lr`; this rank's report (none where it computes none).
  WorkerReport compute(double lr) {
    TrainingRun& run = run_;
    LocalSgdLoop& loop = loop_;
    const Role& role = run.role_;
    const std::int64_t step = run.step_;
    // The stop codes a worker sends, as the synchronous step's: a signal, rank 0's verdict on
    // worker 0 of allreduce, the planned end.
    const auto stop_of = [&](int w) {
      int stop = run.stop_request_.requested() ? kSignalled : kContinue;
      if (!role.parameter_server && w == 0 && run.logs_ && step + 1 < run.planned_) {
        stop = std::max(stop, run.rank0_stop());
      }
      if (!role.parameter_server && step + 1 >= run.planned_) stop = std::max(stop, +kFinished);
      return stop;
    };
    WorkerReport report;
    loop.step_reports.clear();
    if (run.emulated_) {
      // Each hosted worker's round and update on its lane, from its own model (the lanes'
      // rounds and updates in parallel, the reports added in worker order: the same bits for
      // every --threads).
      optim::Optimizer& run_optimizer = *run.optimizer_;
      const std::int64_t optimizer_steps = run_optimizer.steps();
      const int first = run.emulated_->first();
      const auto optimizer_of = [&](int lane) -> optim::Optimizer& {
        return lane == 0 ? run_optimizer
                         : *loop.lane_optimizers[static_cast<std::size_t>(lane - 1)];
      };
      const auto batch_of = [&](int w) { return worker_batch_size(run.options_, role.workers, w); };
      const EmulatedWorkers::OwnModels own{
          [&](int w) { return 1.0 / static_cast<double>(batch_of(w)); },
          [&](int w, int lane, nn::Network& net) {
            loop.hosted->load(w - first, net, optimizer_of(lane));
            optimizer_of(lane).set_steps(optimizer_steps);  // each worker's own count
          },
          [&](int w, int lane, nn::Network& net, WorkerReport& r) {
            run.local_update(net, optimizer_of(lane), lr, r, batch_of(w));
            loop.hosted->store(w - first, net, optimizer_of(lane));
          }};
      loop.step_reports = run.emulated_->run_local_step(step, loop.report_sum, stop_of, own);
      run_optimizer.set_steps(optimizer_steps + 1);
      if (role.shares) run.combine_shares(loop.report_sum);
    } else if (role.computes) {
      report = run.round_->run(step, 1.0 / static_cast<double>(run.batch_));
      run.local_update(*run.net_, *run.optimizer_, lr, report, run.batch_);
      report.stop = stop_of(role.worker);
    } else {
      // The ps master keeps the workers' count of updates, which a checkpoint records.
      run.optimizer_->set_steps(run.optimizer_->steps() + 1);
    }
    return report;
  }

  // The step's reports combined (`report`: this rank's).
  CombinedStep combine(const WorkerReport& report) {
    LocalSgdLoop& loop = loop_;
    const bool emulated = run_.emulated_ != nullptr;
    const std::span<float> no_gradients =
        emulated ? std::span(loop.report_sum).first(0) : std::span<float>();
    return loop.reports.combine(no_gradients, {}, report, run_.step_, 0,
                                emulated ? std::span(loop.report_sum) : std::span<float>());
  }

  // After the verdict on the step that makes `done` steps: whether it ends with an averaging,
  // and the averaging.
  bool average(std::int64_t done, int verdict) {
    const bool average = run_.averages_after(loop_, done, verdict);
    if (average) run_.average_models(loop_, done - 1);
    return average;
  }

 private:
  TrainingRun& run_;
  LocalSgdLoop& loop_;
};

// A rank that combines the reports: the step's rounds (where it computes), the nan policy (the
// updates were the workers' own), the verdict agreed on (ps: the master's, with nothing else;
// allreduce: rank 0's, in the reports; shares: rank 0's), the averaging, the step priced on the
// virtual clock, AdaComm's period.
class TrainingRun::LocalSgdServerPolicy final : public ServerPolicy {
 public:
  LocalSgdServerPolicy(TrainingRun& run, LocalSgdLoop& loop, LocalSgdStep& step)
      : run_(run), loop_(loop), step_(step) {}

  // run_local_sgd gave the first verdict (first_verdict).
  int start(std::int64_t /*step*/, int /*stop*/) override { return run_.stop_; }

  bool stops_alone() const override { return run_.role_.master; }

  ServerUpdate collect(std::int64_t step) override {
    ServerUpdate update;
    update.lr = run_.schedule_->at(step, run_.epoch_at(step));
    const WorkerReport report = step_.compute(update.lr);
    update.combined = step_.combine(report);
    if (run_.role_.computes && !run_.emulated_) run_.worker_line(step + 1, report);
    for (const WorkerReport& r : loop_.step_reports) run_.worker_line(step + 1, r);
    return update;
  }

  // The workers stepped their own models in their rounds.
  void update(ServerUpdate& /*update*/) override {}

  // The step is priced once its averaging is known (agree).
  double virtual_now() const override { return run_.clock_.virtual_now(); }

  int agree(std::int64_t step, int stop, ServerUpdate& update) override {
    TrainingRun& run = run_;
    LocalSgdLoop& loop = loop_;
    const Role& role = run.role_;
    if (role.parameter_server) stop = loop.reports.distribute({}, {}, stop, step - 1);
    // Under shares the loop took rank 0's verdict (no update time: the workers' updates are
    // in their rounds' compute).
    const bool average = step_.average(step, stop);
    // Under mpirun every rank hosting a share keeps the clock (the combined reports are all).
    if (run.clock_.is_virtual() && (run.logs_ || role.shares)) {
      CombinedStep& combined = update.combined;
      std::vector<SyncWorkerTime> rounds;
      for (const auto& r : combined.workers) rounds.push_back({r.sleep_time, r.compute_time, true});
      double step_time = 0;
      if (average) {
        const std::uint64_t bytes = (loop.model_size + run.net_->state_count()) * sizeof(float);
        const auto timing =
            loop.clock.averaging_step(rounds, role.parameter_server, run.comm_model_, bytes);
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
      update.step_time = step_time;
      run.clock_.advance(step_time);
    }
    if (run.options_.adacomm) run.adapt_period(loop, update.combined, average);
    return stop;
  }

  // The models went with the averaging (agree); between averagings nothing is sent.
  void publish(std::int64_t /*step*/) override {}

  int finish(std::int64_t /*step*/, int stop) override { return stop; }

 private:
  TrainingRun& run_;
  LocalSgdLoop& loop_;
  LocalSgdStep& step_;
};

// A ps worker: its round and own update, its report sent, the master's verdict received, the
// models averaged with the master where the step ends a period; evaluations and checkpoints in
// step with the master.
class TrainingRun::LocalSgdWorkerPolicy final : public WorkerPolicy {
 public:
  LocalSgdWorkerPolicy(TrainingRun& run, LocalSgdLoop& loop, LocalSgdStep& step)
      : run_(run), loop_(loop), step_(step) {}

  bool receive(std::int64_t rounds) override {
    TrainingRun& run = run_;
    if (rounds == 0) return run.stop_ == kContinue;  // run_local_sgd's first verdict
    run.stop_ = loop_.reports.distribute({}, {}, combined_.stop, run.step_);
    const bool average = step_.average(run.step_ + 1, run.stop_);
    ++run.step_;
    run.samples_seen_ += static_cast<double>(combined_.samples);
    if (run.options_.adacomm) run.adapt_period(loop_, combined_, average);
    if (run.stop_ == kDiverged) return false;
    run.after_step(run.clock_.now());
    return run.stop_ == kContinue;
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    return step_.compute(run_.schedule_->at(run_.step_, run_.epoch_at(run_.step_)));
  }

  void send(const WorkerReport& report) override { combined_ = step_.combine(report); }

  std::int64_t numbered(std::int64_t /*rounds*/) const override { return run_.step_ + 1; }

  int finish() override { return run_.stop_; }

 private:
  TrainingRun& run_;
  LocalSgdLoop& loop_;
  LocalSgdStep& step_;
  CombinedStep combined_;
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
  LocalSgdStep step(*this, loop);
  if (!role_.parameter_server || role_.master) {
    LocalSgdServerPolicy server(*this, loop, step);
    run_server(server);
  } else {
    LocalSgdWorkerPolicy worker(*this, loop, step);
    run_worker(worker);
  }
}

bool TrainingRun::averages_after(const LocalSgdLoop& loop, std::int64_t done, int verdict) const {
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

void TrainingRun::average_models(LocalSgdLoop& loop, std::int64_t step) {
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
  loop.models.combine(model, state, none, step, 0, tail);
  // The exchange averaged the state; the model is still the sum where it was combined.
  if (!role_.parameter_server || role_.master) finish_average(model, role_.workers);
  if (role_.parameter_server) loop.models.distribute(model, state, kContinue, step + 1);
  write_model(model, *net_, *optimizer_);
  if (emulated_) loop.hosted->set_all(*net_, *optimizer_);
}

}  // namespace mbkit::train
