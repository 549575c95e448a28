#include "mbkit/train/async_rule.hpp"

#include <algorithm>
#include <limits>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

AsyncRule::AsyncRule(int workers, AsyncRuleSettings settings)
    : settings_(settings),
      in_update_(static_cast<std::size_t>(workers), false),
      retired_(static_cast<std::size_t>(workers), false),
      clock_(static_cast<std::size_t>(workers), 0) {}

void AsyncRule::begin_update(int gradients) {
  MBKIT_CHECK(gradients >= 1, "AsyncRule: ", gradients, " gradients");
  MBKIT_CHECK(!settings_.distinct || gradients <= static_cast<int>(in_update_.size()),
              "AsyncRule: K-async ", gradients, " of ", in_update_.size(), " workers");
  std::fill(in_update_.begin(), in_update_.end(), false);
  taken_ = 0;
  wanted_ = gradients;
}

bool AsyncRule::takes(int w) const {
  return !settings_.distinct || (!complete() && !in_update_[static_cast<std::size_t>(w)]);
}

void AsyncRule::took(int w) {
  in_update_[static_cast<std::size_t>(w)] = true;
  ++taken_;
}

void AsyncRule::completed_round(int w) {
  ++clock_[static_cast<std::size_t>(w)];
}

void AsyncRule::retire(int w) {
  retired_[static_cast<std::size_t>(w)] = true;
}

std::int64_t AsyncRule::slowest() const {
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
  for (std::size_t w = 0; w < clock_.size(); ++w) {
    if (!retired_[w]) slowest = std::min(slowest, clock_[w]);
  }
  if (slowest == std::numeric_limits<std::int64_t>::max()) {
    slowest = *std::max_element(clock_.begin(), clock_.end());
  }
  return slowest;
}

bool AsyncRule::may_start(int w) const {
  return !bounded() || clock(w) - slowest() <= settings_.staleness_bound;
}

bool update_takes_another(const AsyncRule& rule, const VirtualArrivals& arrivals, int count,
                          bool timed, double deadline, int min_gradients) {
  // K-async counts the distinct workers its rule took; the count and time rules, gradients.
  if (rule.settings().distinct) return !rule.complete();
  return timed ? !(count >= 1 && arrivals.none_until(deadline)) : count < min_gradients;
}

bool starts_next_round(VirtualArrivals& arrivals, const AsyncRule& rule, int w) {
  if (rule.may_start(w)) return true;
  arrivals.block(w);
  return false;
}

std::vector<ReleasedWorker> release_blocked(VirtualArrivals& arrivals, const AsyncRule& rule,
                                            double now) {
  std::vector<ReleasedWorker> released;
  for (int w = 0; w < static_cast<int>(rule.workers()); ++w) {
    if (!arrivals.blocked(w) || !rule.may_start(w)) continue;
    const double start = now + arrivals.message();
    released.push_back({w, start, start - arrivals.round_start(w)});
    arrivals.start(w, start);
  }
  return released;
}

}  // namespace mbkit::train
