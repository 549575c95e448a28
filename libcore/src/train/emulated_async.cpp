#include "mbkit/train/emulated_async.hpp"

#include <algorithm>

#include "exchange_internal.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

using namespace exchange_detail;

EmulatedAsyncMaster::EmulatedAsyncMaster(Parts parts)
    : parts_(std::move(parts)),
      first_(parts_.rounds.shard(parts_.server).first),
      running_(parts_.rounds.lock(), std::defer_lock),
      rule_(parts_.rounds.workers(), {}),
      blocked_(static_cast<std::size_t>(parts_.rounds.workers()), 0.0),
      retired_(blocked_.size(), false),
      spare_(kSpareSnapshots) {}

EmulatedAsyncMaster::~EmulatedAsyncMaster() {
  abandon();
}

void EmulatedAsyncMaster::abandon() {
  if (!running_.owns_lock()) return;
  parts_.rounds.abandon();
  running_.unlock();
}

void EmulatedAsyncMaster::use_rule(const AsyncRuleSettings& settings) {
  rule_ = AsyncRule(parts_.rounds.workers(), settings);
}

void EmulatedAsyncMaster::use_virtual_clock(double message, double sender, double now) {
  arrivals_.emplace(parts_.rounds.workers(), message, sender);
  now_ = now;
}

int EmulatedAsyncMaster::workers_stop() const {
  int code = kContinue;
  for (int w = 0; w < parts_.rounds.workers(); ++w) {
    if (retired_[static_cast<std::size_t>(w)]) {
      code = std::max(code, parts_.rounds.stop_of_worker(w));
    }
  }
  return code;
}

void EmulatedAsyncMaster::start(std::span<const float> parameters, std::span<const float> state,
                                std::int64_t step) {
  MBKIT_CHECK(arrivals_.has_value(), "emulated asynchronous master without the virtual clock");
  running_.lock();
  parts_.rounds.enter(parts_.server, running_);
  publish(parameters, state, step);
  // Every worker starts once the first parameters reached it.
  for (int w = 0; w < parts_.rounds.workers(); ++w) begin_round(w, now_ + arrivals_->message());
}

void EmulatedAsyncMaster::publish(std::span<const float> parameters, std::span<const float> state,
                                  std::int64_t step) {
  const std::shared_ptr<Snapshot> snapshot = new_snapshot();
  snapshot->step = step;
  snapshot->values.assign(parameters.begin(), parameters.end());
  snapshot->values.insert(snapshot->values.end(), state.begin(), state.end());
  arrivals_->publish(now_);
  history_.push_back(snapshot);
  // Workers past the staleness bound start now, from these parameters, once allowed.
  for (const ReleasedWorker& released : release_blocked(*arrivals_, rule_, now_)) {
    blocked_[static_cast<std::size_t>(released.worker)] = released.waited;
    begin_round(released.worker, released.start);
  }
}

std::shared_ptr<EmulatedAsyncMaster::Snapshot> EmulatedAsyncMaster::new_snapshot() {
  return spare_.take();
}

void EmulatedAsyncMaster::begin_round(int w, double start) {
  if (retired_[static_cast<std::size_t>(w)]) return;
  arrivals_->start(w, start);
  const std::int64_t held = arrivals_->held_at(start);
  const auto started = parts_.rounds.start(
      parts_.server, w, history_[static_cast<std::size_t>(held - arrivals_->first_kept())], start);
  if (!started) {  // another server stopped first: the worker is done
    retire(w);
    return;
  }
  arrivals_->arrived(w, started->ready, started->comm_delay);
}

void EmulatedAsyncMaster::retire(int w) {
  if (!retired_[static_cast<std::size_t>(w)]) ++retired_count_;
  retired_[static_cast<std::size_t>(w)] = true;
  arrivals_->retire(w);
  rule_.retire(w);
}

WorkerReport EmulatedAsyncMaster::as_taken(int w, const WorkerReport& report,
                                           std::int64_t step) const {
  WorkerReport taken = report.as_carried(parts_.rounds.emulated().rank_of(w), step);
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
  // Adds worker w's gradient and state (its shard, then the state, as in a message) to the
  // sums, in the order the master takes them (AsyncMaster's additions).
  auto take = [&](int w, const Computed& round) {
    const float* computed = round.gradients.data() + first_;
    for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] += computed[i];
    for (std::size_t i = 0; i < state.size(); ++i) state[i] += round.state[i];
    add_up(result, as_taken(w, round.report, step));
    rule_.took(w);
    ++count;
  };
  // K-async: held gradients first, oldest first, as the rule takes them.
  take_held(rule_, held_,
            [&](HeldGradient& held) { take(static_cast<int>(held.worker), *held.round); });
  while (update_takes_another(rule_, *arrivals_, count, timed, deadline, min_gradients)) {
    const auto next = arrivals_->next();
    if (!next) break;  // every worker is done
    const int w = *next;
    // The round runs now (once every server started it), before the worker's next one is
    // predicted: taken into the sums, or (K-async, a worker already in this update) held for
    // a later one. None: another server stopped the run first, and the worker with it.
    std::shared_ptr<const Computed> round = parts_.rounds.take(parts_.server, w, running_);
    if (!round) {
      retire(w);
      continue;
    }
    const double arrival = arrivals_->take(w);
    rule_.completed_round(w);
    if (rule_.takes(w)) {
      take(w, *round);
    } else {
      held_.push_back({static_cast<std::size_t>(w), std::move(round)});
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
  // Every worker done with too few gradients for a step (enough: a step, though all are done).
  const bool all_done = retired_count_ == parts_.rounds.workers();
  MBKIT_CHECK(
      all_done || !update_takes_another(rule_, *arrivals_, count, timed, deadline, min_gradients),
      "no emulated worker is computing");
  ended_ = all_done && (timed ? count == 0 : !rule_.complete());
  if (ended_) {
    discarded_ += count;
    return result;
  }
  if (timed) now_ = std::max(now_, deadline);
  result.wait_time = now_ - virtual_start;
  average_async_sums(result, count, gradients, state);
  return result;
}

void EmulatedAsyncMaster::finish(std::int64_t, int code) {
  // The held gradients, and the round in flight of every worker not blocked or done, whose
  // gradient would arrive after the end.
  discarded_ += static_cast<std::int64_t>(held_.size());
  held_.clear();
  for (int w = 0; w < parts_.rounds.workers(); ++w) {
    if (!arrivals_->blocked(w) && !retired_[static_cast<std::size_t>(w)]) ++discarded_;
  }
  parts_.rounds.stopped(parts_.server, code);
  running_.unlock();
}

}  // namespace mbkit::train
