#include "mbkit/train/emulated_async.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "exchange_internal.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

using namespace exchange_detail;

EmulatedAsyncMaster::EmulatedAsyncMaster(Parts parts)
    : parts_(std::move(parts)),
      rule_(parts_.workers.workers(), {}),
      in_flight_(static_cast<std::size_t>(parts_.workers.workers())),
      blocked_(in_flight_.size(), 0.0) {}

void EmulatedAsyncMaster::use_rule(const AsyncRuleSettings& settings) {
  rule_ = AsyncRule(parts_.workers.workers(), settings);
}

void EmulatedAsyncMaster::use_virtual_clock(double message, double now) {
  arrivals_.emplace(parts_.workers.workers(), message);
  now_ = now;
}

void EmulatedAsyncMaster::start(std::span<const float> parameters, std::span<const float> state,
                                std::int64_t step) {
  MBKIT_CHECK(arrivals_.has_value(), "emulated asynchronous master without the virtual clock");
  publish(parameters, state, step);
  // Every worker starts once the first parameters reached it.
  for (int w = 0; w < parts_.workers.workers(); ++w) begin_round(w, now_ + arrivals_->message());
}

void EmulatedAsyncMaster::publish(std::span<const float> parameters, std::span<const float> state,
                                  std::int64_t step) {
  std::shared_ptr<Snapshot> snapshot;
  for (auto& spare : spare_) {
    if (spare.use_count() == 1) {
      snapshot = spare;
      break;
    }
  }
  if (!snapshot) {
    snapshot = std::make_shared<Snapshot>();
    spare_.push_back(snapshot);
  }
  snapshot->step = step;
  snapshot->values.assign(parameters.begin(), parameters.end());
  snapshot->values.insert(snapshot->values.end(), state.begin(), state.end());
  latest_ = snapshot;
  arrivals_->publish(now_);
  history_.push_back(snapshot);
  // Workers past the staleness bound start now, from these parameters, once allowed.
  for (const ReleasedWorker& released : release_blocked(*arrivals_, rule_, now_)) {
    blocked_[static_cast<std::size_t>(released.worker)] = released.waited;
    begin_round(released.worker, released.start);
  }
}

void EmulatedAsyncMaster::from_host(int w, void* data, std::size_t bytes) const {
  if (parts_.shares == nullptr) return;
  parts_.shares->broadcast(std::span<std::uint8_t>(static_cast<std::uint8_t*>(data), bytes),
                           emulated_host(parts_.workers.workers(), parts_.shares->size(), w));
}

void EmulatedAsyncMaster::begin_round(int w, double start) {
  InFlight& round = in_flight_[static_cast<std::size_t>(w)];
  arrivals_->start(w, start);
  const std::int64_t held = arrivals_->held_at(start);
  round.held = history_[static_cast<std::size_t>(held - arrivals_->first_kept())];
  // Predicted where the worker is hosted (its round's draws are there), then known to all.
  double ready = std::numeric_limits<double>::quiet_NaN();
  if (parts_.workers.hosts(w)) {
    parts_.workers.round(w).set_round_start(start);  // --cpu-quota: its periods' phase
    if (const auto predicted = parts_.workers.round(w).predict_ready()) ready = *predicted;
  }
  from_host(w, &ready, sizeof ready);
  if (std::isnan(ready)) {
    usage_error(cat("--emulate ", parts_.workers.workers(), " --async: worker ", w, " (rank ",
                    parts_.workers.rank_of(w),
                    ") has no --compute-model: the master takes gradients in the order they "
                    "arrive, which must be known before they are computed"));
  }
  round.ready = ready;
  const TrainOptions& options = parts_.options;
  round.comm_delay =
      options.async_delay_std > 0
          ? emulation::message_delay(options.async_delay_std, options.seed, w, round.rounds)
          : 0.0;
  arrivals_->arrived(w, round.ready, round.comm_delay);
}

WorkerReport EmulatedAsyncMaster::run_round(int w) {
  InFlight& round = in_flight_[static_cast<std::size_t>(w)];
  nn::Network& net = parts_.net;
  WorkerReport report;
  if (parts_.workers.hosts(w)) {
    const std::size_t parameter_floats = net.parameter_count();
    const std::vector<float>& held = round.held->values;
    std::copy(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
              net.parameters().begin());
    std::copy(held.begin() + static_cast<std::ptrdiff_t>(parameter_floats), held.end(),
              net.state().begin());
    WorkerRound& worker = parts_.workers.round(w);
    // As the asynchronous worker policy: no send of its own to wait for, the parameters'
    // modelled receive.
    worker.set_previous_exchange(0, 0, parts_.modelled_receive);
    report = worker.run(round.held->step + round.rounds, 1.0);
    MBKIT_CHECK(report.sleep_time + report.compute_time == round.ready, "worker ", w,
                "'s round was ready at ", report.sleep_time + report.compute_time, " s, predicted ",
                round.ready, " s");
    report.stop = parts_.stop_of();
    report.based_on = round.held->step;
    report.comm_delay = round.comm_delay;
  }
  ++round.rounds;
  if (parts_.shares != nullptr) {
    // Every rank takes the gradient, state and report the host computed.
    from_host(w, &report, sizeof report);
    from_host(w, net.gradients().data(), net.gradients().size_bytes());
    from_host(w, net.state().data(), net.state().size_bytes());
  }
  // The host's log has its hosted workers' lines.
  if (parts_.worker_line && parts_.workers.hosts(w)) parts_.worker_line(round.rounds, report);
  return report;
}

WorkerReport EmulatedAsyncMaster::as_taken(int w, const WorkerReport& report,
                                           std::int64_t step) const {
  WorkerReport taken = report.as_carried(parts_.workers.rank_of(w), step);
  taken.send_time = arrivals_->message();
  taken.wait_time = blocked_[static_cast<std::size_t>(w)];  // before its round started
  taken.finished_early = report.finished_early;
  taken.recv_time = report.recv_time;
  taken.exit_time = report.exit_time;
  taken.queued_updates = 0;  // one parameter set a round: none is overtaken
  taken.comm_delay = report.comm_delay;
  return taken;
}

CombinedStep EmulatedAsyncMaster::collect(std::span<float> gradients, std::span<float> state,
                                          int min_gradients, std::int64_t step) {
  CombinedStep result;
  std::fill(gradients.begin(), gradients.end(), 0.0f);
  std::fill(state.begin(), state.end(), 0.0f);
  int count = 0;
  const double virtual_start = now_;
  const bool timed = window_ > 0;
  const double deadline = virtual_start + window_;
  rule_.begin_update(min_gradients);
  // Adds worker w's gradient and state (parameters then state, as in a message) to the sums,
  // in the order the master takes them (AsyncMaster's additions).
  auto take = [&](int w, const WorkerReport& report, std::span<const float> computed,
                  std::span<const float> computed_state) {
    for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] += computed[i];
    for (std::size_t i = 0; i < state.size(); ++i) state[i] += computed_state[i];
    add_up(result, as_taken(w, report, step));
    rule_.took(w);
    ++count;
  };
  // K-async: held gradients first, oldest first, as the rule takes them.
  take_held(rule_, held_, [&](HeldGradient& held) {
    const std::span<const float> values = held.values;
    take(static_cast<int>(held.worker), held.report, values.first(gradients.size()),
         values.subspan(gradients.size()));
    spare_values_.push_back(std::move(held.values));
  });
  while (update_takes_another(rule_, *arrivals_, count, timed, deadline, min_gradients)) {
    const auto next = arrivals_->next();
    MBKIT_CHECK(next.has_value(), "no emulated worker is computing");
    const int w = *next;
    const double arrival = arrivals_->take(w);
    // The round runs now, before the worker's next one is predicted: taken into the sums, or
    // (K-async, a worker already in this update) its gradient and state held for a later one.
    const WorkerReport report = run_round(w);
    rule_.completed_round(w);
    if (rule_.takes(w)) {
      take(w, report, parts_.net.gradients(), parts_.net.state());
    } else {
      std::vector<float> values;
      if (!spare_values_.empty()) {
        values = std::move(spare_values_.back());
        spare_values_.pop_back();
      }
      const std::span<const float> computed = parts_.net.gradients();
      const std::span<const float> computed_state = parts_.net.state();
      values.assign(computed.begin(),
                    computed.begin() + static_cast<std::ptrdiff_t>(gradients.size()));
      values.insert(values.end(), computed_state.begin(),
                    computed_state.begin() + static_cast<std::ptrdiff_t>(state.size()));
      held_.push_back({static_cast<std::size_t>(w), report, std::move(values)});
    }
    blocked_[static_cast<std::size_t>(w)] = 0;
    now_ = std::max(now_, arrival);
    // A worker past the staleness bound is blocked: publish() starts it.
    if (starts_next_round(*arrivals_, rule_, w)) begin_round(w, arrivals_->round_start(w));
    // Later rounds start no earlier than this one's: older publications can go (rounds in
    // flight keep what they started from).
    const std::int64_t forgotten = arrivals_->forget_before(arrivals_->round_start(w));
    history_.erase(history_.begin(), history_.begin() + forgotten);
  }
  // The network is the master's again: its parameters (the newest published) for the update.
  const std::size_t parameter_floats = parts_.net.parameter_count();
  std::copy(latest_->values.begin(),
            latest_->values.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            parts_.net.parameters().begin());
  std::copy(latest_->values.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            latest_->values.end(), parts_.net.state().begin());
  if (timed) now_ = std::max(now_, deadline);
  result.wait_time = now_ - virtual_start;
  average_async_sums(result, count, gradients, state);
  return result;
}

void EmulatedAsyncMaster::finish(std::int64_t, int) {
  // The held gradients, and the round in flight of every worker not blocked, whose gradient
  // would arrive after the end.
  discarded_ += static_cast<std::int64_t>(held_.size());
  held_.clear();
  for (int w = 0; w < parts_.workers.workers(); ++w) {
    if (!arrivals_->blocked(w)) ++discarded_;
  }
}

}  // namespace mbkit::train
