#include "mbkit/train/async_rule.hpp"

#include <algorithm>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

AsyncRule::AsyncRule(int workers, AsyncRuleSettings settings)
    : settings_(settings),
      in_update_(static_cast<std::size_t>(workers), false),
      retired_(static_cast<std::size_t>(workers), false),
      clock_(static_cast<std::size_t>(workers), 0) {
  if (workers > 0) running_clocks_.emplace(0, workers);
}

void AsyncRule::begin_update(int gradients) {
  MBKIT_CHECK(gradients >= 1, "AsyncRule: ", gradients, " gradients");
  MBKIT_CHECK(!settings_.distinct || gradients <= static_cast<int>(in_update_.size()),
              "AsyncRule: K-async ", gradients, " of ", in_update_.size(), " workers");
  for (const int w : in_update_list_) in_update_[static_cast<std::size_t>(w)] = false;
  in_update_list_.clear();
  taken_ = 0;
  wanted_ = gradients;
}

bool AsyncRule::takes(int w) const {
  return !settings_.distinct || (!complete() && !in_update_[static_cast<std::size_t>(w)]);
}

void AsyncRule::took(int w) {
  const auto i = static_cast<std::size_t>(w);
  if (!in_update_[i]) in_update_list_.push_back(w);
  in_update_[i] = true;
  ++taken_;
}

namespace {
// One running worker fewer at `clock`.
void leave_clock(std::map<std::int64_t, int>& running_clocks, std::int64_t clock) {
  const auto at = running_clocks.find(clock);
  MBKIT_CHECK(at != running_clocks.end(), "AsyncRule: no running worker at clock ", clock);
  if (--at->second == 0) running_clocks.erase(at);
}
}  // namespace

void AsyncRule::completed_round(int w) {
  const auto i = static_cast<std::size_t>(w);
  if (!retired_[i]) {
    leave_clock(running_clocks_, clock_[i]);
    ++running_clocks_[clock_[i] + 1];
  }
  ++clock_[i];
  largest_clock_ = std::max(largest_clock_, clock_[i]);
}

void AsyncRule::retire(int w) {
  const auto i = static_cast<std::size_t>(w);
  if (retired_[i]) return;
  retired_[i] = true;
  leave_clock(running_clocks_, clock_[i]);
}

std::int64_t AsyncRule::slowest() const {
  return running_clocks_.empty() ? largest_clock_ : running_clocks_.begin()->first;
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
  arrivals.block(w, rule.clock(w));
  return false;
}

std::vector<ReleasedWorker> release_blocked(VirtualArrivals& arrivals, const AsyncRule& rule,
                                            double now) {
  // may_start() holds up to some clock (the slowest's + the bound): a prefix of the blocked
  // workers by clock, whose clocks stayed (a blocked worker completes no round).
  std::vector<int> let_go;
  for (const auto& [clock, w] : arrivals.blocked_by_clock()) {
    MBKIT_CHECK(clock == rule.clock(w), "release_blocked: worker ", w, " blocked at clock ", clock,
                " is at ", rule.clock(w));
    if (!rule.may_start(w)) break;
    let_go.push_back(w);
  }
  std::sort(let_go.begin(), let_go.end());  // started in worker order
  std::vector<ReleasedWorker> released;
  for (const int w : let_go) {
    const double start = now + arrivals.message();
    released.push_back({w, start, start - arrivals.round_start(w)});
    arrivals.start(w, start);
  }
  return released;
}

}  // namespace mbkit::train
