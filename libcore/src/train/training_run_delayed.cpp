// AMB-DG in the training run (training_run.hpp, delayed_gradients.hpp): the delay chosen at
// set-up, the round computed at its delayed version, the versions through checkpoints; then, on
// the wall clock, its master's and workers' policies of the engine's loops.
#include <algorithm>
#include <cmath>

#include "mbkit/train/delayed_exchange.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

void TrainingRun::set_up_delayed_gradients() {
  const DelayedGradientsOptions& delayed = options_.delayed_gradients;
  if (!delayed.enabled) return;
  // Each worker's link to the master (ps, one server), as sync_step_time prices it.
  std::vector<double> links;
  for (int w = 0; w < role_.workers; ++w) {
    links.push_back(
        comm_model_.ps_message(gradient_bytes_, role_.workers, 1, worker_rank(w, 1), 0));
  }
  if (delayed.auto_delay) {
    // The paper's tau: the rounds a round trip (the sums up, the parameters down) spans.
    const double round_trip = 2 * *std::max_element(links.begin(), links.end());
    delay_rounds_ = delay_rounds_for(round_trip, time_limit_);
  } else {
    delay_rounds_ = delayed.delay.value();
  }
  if (delay_rounds_ == 0) return;  // mb-train-amb's round as it is
  versions_.emplace(delay_rounds_);
  // Ranks hosting shares of the emulated workers each keep the run's clock, as the synchronous
  // step does.
  if (logs_ || role_.shares) delayed_timeline_.emplace(delay_rounds_, std::move(links));
}

void TrainingRun::restore_delayed(const Checkpoint& checkpoint, const std::string& path) {
  if (!versions_) return;
  versions_->restore(checkpoint.delayed_parameters, checkpoint.step, net_->parameter_count(), path);
  if (delayed_timeline_) delayed_timeline_->restore(checkpoint.delayed_timeline, path);
  if (checkpoint.delayed_parameters.empty() && checkpoint.step > 0) {
    log::warn(cat(path, " holds no parameter versions for --delayed-gradients ", delay_rounds_,
                  ": the delay's window starts over at its parameters"));
  }
}

void TrainingRun::share_delayed_versions() {
  if (!versions_ || !role_.distributed) return;
  auto versions = versions_->versions();
  std::int64_t head[2] = {static_cast<std::int64_t>(versions.size()),
                          versions.empty() ? 0 : versions.front().first};
  world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(head), sizeof head), 0);
  versions.resize(static_cast<std::size_t>(head[0]));
  for (std::size_t i = 0; i < versions.size(); ++i) {
    versions[i].first = head[1] + static_cast<std::int64_t>(i);
    versions[i].second.resize(net_->parameter_count());
    world_.broadcast(std::span<float>(versions[i].second), 0);
  }
  versions_->set_versions(std::move(versions));
  if (role_.shares && delayed_timeline_) {
    // Rank 0's timeline (resumed or new), so that every rank's clock goes on from the same.
    std::vector<double> timeline = delayed_timeline_->saved();
    std::int64_t size = static_cast<std::int64_t>(timeline.size());
    world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&size), sizeof size),
                     0);
    timeline.resize(static_cast<std::size_t>(size));
    world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(timeline.data()),
                                             timeline.size() * sizeof(double)),
                     0);
    if (world_.rank() != 0) delayed_timeline_->restore(timeline, "rank 0's delayed timeline");
  }
}

void TrainingRun::begin_delayed_round() {
  if (!versions_) return;
  nn::HostView parameters = net_->host_parameters();
  versions_->keep(step_, parameters.values());
  const std::int64_t version = versions_->version_for(step_);
  // The ps master computes no round: its network keeps the newest parameters.
  if (version == step_ || !(role_.computes || emulated_)) return;
  const auto delayed = versions_->parameters_of(version);
  std::copy(delayed.begin(), delayed.end(), parameters.values().begin());
  parameters.write_back();
  delayed_swapped_ = true;
}

void TrainingRun::end_delayed_round() {
  if (!delayed_swapped_) return;
  nn::HostView parameters = net_->host_parameters();
  const auto latest = versions_->latest();
  std::copy(latest.begin(), latest.end(), parameters.values().begin());
  parameters.write_back();
  delayed_swapped_ = false;
}

}  // namespace mbkit::train

// ---------------------------------------------------------------------------------------------
// The wall clock under mpirun (delayed_exchange.hpp): a rank per worker, the master rank 0, as
// policies of the engine's loops (loop_policies.hpp). The start (the parameters and the first
// verdict) is the synchronous exchange's broadcast (run_sync).

namespace mbkit::train {

bool TrainingRun::delays_on_wall_clock() const {
  // From the options, not versions_: the test data's split (master_evaluates_alone) is decided
  // before the delay is set up. auto is refused on the wall clock; TAU 0 is AMB's round.
  const DelayedGradientsOptions& delayed = options_.delayed_gradients;
  return delayed.enabled && delayed.delay.value_or(0) > 0 &&
         options_.clock != ClockMode::kVirtual && role_.parameter_server && role_.distributed &&
         role_.emulated == 0;
}

// The master: round t's sums from every worker, an optimizer step, version t + 1 to every
// worker; it keeps the versions a checkpoint carries.
class TrainingRun::DelayedServerPolicy final : public ServerPolicy {
 public:
  explicit DelayedServerPolicy(TrainingRun& run)
      : run_(run),
        exchange_(run.world_, run.role_.workers, run.net_->parameter_count(),
                  run.net_->state_count(), run.delay_rounds_) {}

  // The workers have the starting parameters and the verdict from run_sync's broadcast.
  int start(std::int64_t /*step*/, int /*stop*/) override { return run_.stop_; }

  ServerUpdate collect(std::int64_t step) override {
    nn::Network& net = *run_.net_;
    ServerUpdate update;
    update.lr = run_.schedule_->at(step, run_.epoch_at(step));
    const nn::HostView parameters = net.host_parameters();
    run_.versions_->keep(step, parameters.values());  // the versions a checkpoint carries
    nn::HostView state = net.host_state();
    update.combined = exchange_.collect(net.gradients(), state.values(), step, run_.global_batch_);
    state.write_back();
    return update;
  }

  void update(ServerUpdate& update) override {
    update.combined.servers.front().update_time = run_.timed_optimizer_step(update.lr);
  }

  double virtual_now() const override { return run_.clock_.virtual_now(); }  // the wall clock's

  void publish(std::int64_t step) override {
    const nn::HostView parameters = run_.net_->host_parameters();
    const nn::HostView state = run_.net_->host_state();
    exchange_.publish(parameters.values(), state.values(), step);
  }

  int finish(std::int64_t step, int stop) override {
    exchange_.finish(step, stop);
    if (exchange_.discarded() > 0) {
      log::verbose(cat(exchange_.discarded(), " sums of rounds past the end received and dropped"));
    }
    return stop;
  }

 private:
  TrainingRun& run_;
  DelayedExchange exchange_;
};

// A worker: round t at version t - TAU (waiting only while it has not come), its sum sent
// non-blocking, round t + 1 at once.
class TrainingRun::DelayedWorkerPolicy final : public WorkerPolicy {
 public:
  explicit DelayedWorkerPolicy(TrainingRun& run)
      : run_(run),
        exchange_(run.world_, run.role_.workers, run.net_->parameter_count(),
                  run.net_->state_count(), run.delay_rounds_),
        scale_(1.0 / static_cast<double>(run.global_batch_)) {
    // The versions held at the start: those a resumed checkpoint carried
    // (share_delayed_versions) and the parameters now, version step_.
    const nn::HostView parameters = run.net_->host_parameters();
    const nn::HostView state = run.net_->host_state();
    for (const auto& [version, values] : run.versions_->versions()) {
      if (version < run.step_) exchange_.hold(version, values, state.values());
    }
    exchange_.hold(run.step_, parameters.values(), state.values());
    run.versions_->set_versions({});  // the exchange holds them now
  }

  bool receive(std::int64_t rounds) override {
    if (rounds > 0) ++run_.step_;  // the round sent
    nn::HostView parameters = run_.net_->host_parameters();
    nn::HostView state = run_.net_->host_state();
    stop_ = exchange_.take(run_.step_, parameters.values(), state.values());
    parameters.write_back();
    state.write_back();
    if (stop_ != kContinue) return false;
    run_.round_->set_previous_exchange(exchange_.last_send_time(), exchange_.last_wait_time());
    return true;
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    return run_.round_->run(run_.step_, scale_);
  }

  void send(const WorkerReport& report) override {
    const nn::HostView state = run_.net_->host_state();
    exchange_.send(run_.net_->gradients(), state.values(), report, run_.step_,
                   exchange_.last_version());
  }

  std::int64_t numbered(std::int64_t /*rounds*/) const override { return run_.step_ + 1; }

  int finish() override {
    exchange_.finish_worker();
    return stop_;
  }

 private:
  TrainingRun& run_;
  DelayedExchange exchange_;
  const double scale_;
  int stop_ = kContinue;
};

std::unique_ptr<ServerPolicy> TrainingRun::make_delayed_server() {
  return std::make_unique<DelayedServerPolicy>(*this);
}

std::unique_ptr<WorkerPolicy> TrainingRun::make_delayed_worker() {
  return std::make_unique<DelayedWorkerPolicy>(*this);
}

}  // namespace mbkit::train
