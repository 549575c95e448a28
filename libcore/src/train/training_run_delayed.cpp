// AMB-DG in the training run (training_run.hpp, delayed_gradients.hpp): the delay chosen at
// set-up, the round computed at its delayed version, the versions through checkpoints.
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
    links.push_back(comm_model_.message(gradient_bytes_, worker_rank(w, 1), 0));
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
  // Ranks hosting shares of the emulated workers each keep the run's clock, as sync_step does.
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
// The wall clock under mpirun (delayed_exchange.hpp): a rank per worker, the master rank 0.

namespace mbkit::train {

bool TrainingRun::delays_on_wall_clock() const {
  // From the options, not versions_: the test data's split (master_evaluates_alone) is decided
  // before the delay is set up. auto is refused on the wall clock; TAU 0 is AMB's round.
  const DelayedGradientsOptions& delayed = options_.delayed_gradients;
  return delayed.enabled && delayed.delay.value_or(0) > 0 &&
         options_.clock != ClockMode::kVirtual && role_.parameter_server && role_.distributed &&
         role_.emulated == 0;
}

void TrainingRun::run_delayed() {
  if (stop_ != kContinue) return;  // the start's verdict reached every rank (distribute)
  DelayedExchange exchange(world_, role_.workers, net_->parameter_count(), net_->state_count(),
                           delay_rounds_);
  if (role_.master) {
    run_delayed_master(exchange);
  } else {
    run_delayed_worker(exchange);
  }
}

void TrainingRun::run_delayed_master(DelayedExchange& exchange) {
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double lr = schedule_->at(step_, epoch_at(step_));
    CombinedStep combined;
    {
      const nn::HostView parameters = net_->host_parameters();
      versions_->keep(step_, parameters.values());  // the versions a checkpoint carries
      nn::HostView state = net_->host_state();
      combined = exchange.collect(net_->gradients(), state.values(), step_, global_batch_);
      state.write_back();
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
    if (verdict == kContinue) {
      const nn::HostView parameters = net_->host_parameters();
      const nn::HostView state = net_->host_state();
      exchange.publish(parameters.values(), state.values(), step_);
    }
    if (logs_) record_step(combined, seconds_since(step_start), lr);
    stop_ = verdict;
    if (stop_ == kDiverged) break;
    after_step(clock_.now());
  }
  exchange.finish(step_, stop_);
  if (exchange.discarded() > 0) {
    log::verbose(cat(exchange.discarded(), " sums of rounds past the end received and dropped"));
  }
}

void TrainingRun::run_delayed_worker(DelayedExchange& exchange) {
  // The versions held at the start: those a resumed checkpoint carried (share_delayed_versions)
  // and the parameters now, version step_.
  {
    const nn::HostView parameters = net_->host_parameters();
    const nn::HostView state = net_->host_state();
    for (const auto& [version, values] : versions_->versions()) {
      if (version < step_) exchange.hold(version, values, state.values());
    }
    exchange.hold(step_, parameters.values(), state.values());
  }
  versions_->set_versions({});  // the exchange holds them now
  const double scale = 1.0 / static_cast<double>(global_batch_);
  int stop = kContinue;
  while (true) {
    {
      nn::HostView parameters = net_->host_parameters();
      nn::HostView state = net_->host_state();
      stop = exchange.take(step_, parameters.values(), state.values());
      parameters.write_back();
      state.write_back();
    }
    if (stop != kContinue) break;
    round_->set_previous_exchange(exchange.last_send_time(), exchange.last_wait_time());
    WorkerReport report = round_->run(step_, scale);
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    const nn::HostView state = net_->host_state();
    exchange.send(net_->gradients(), state.values(), report, step_, exchange.last_version());
    worker_line(step_ + 1, report);
    ++step_;
  }
  exchange.finish_worker();
  stop_ = stop;
}

}  // namespace mbkit::train
