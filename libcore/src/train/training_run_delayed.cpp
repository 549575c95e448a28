// AMB-DG in the training run (training_run.hpp, delayed_gradients.hpp): the delay chosen at
// set-up, the round computed at its delayed version, the versions through checkpoints.
#include <algorithm>
#include <cmath>

#include "mbkit/train/roles.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

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
  if (logs_) delayed_timeline_.emplace(delay_rounds_, std::move(links));
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
