#pragma once
// The asynchronous master's policy (AsyncMaster, exchange.hpp): which of the gradients that
// arrived an update takes, and when a worker may start its next round. The exchange moves the
// messages and keeps the clock; this decides, from worker numbers alone, so that a rule is
// tested without MPI and another asynchronous method (AMB-DG, say) adds its rule here.
//
//  - the count rule (--async, --async-min-grads K, --k-batch-async K): an update takes K
//    gradients in the order of arrival, a fast worker's several among them;
//  - K-async (--k-async K, Dutta et al. 2018): an update takes K gradients from K distinct
//    workers. The others are not cancelled: a worker whose gradient is already in the update
//    and sends another is not blocked, its newer gradient waits (held, in order of arrival)
//    for a later update, which takes the held gradients first, oldest first, one per worker;
//  - stale synchronous parallel (--staleness-bound s, Ho et al. 2013): a worker's clock is the
//    number of rounds it completed (gradients the master received from it); a worker may start
//    a round only while its clock is at most s ahead of the slowest worker's still running.
//    A worker past the bound waits for the master's go, which comes with the parameters the
//    master publishes after the slowest worker's gradient is applied. s = 0: a bulk-synchronous
//    schedule; s larger than any gap: plain --async.
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

struct AsyncRuleSettings {
  bool distinct = false;     ///< --k-async: an update's gradients from distinct workers
  int staleness_bound = -1;  ///< --staleness-bound s; -1: none
};

class AsyncRule {
 public:
  AsyncRule(int workers, AsyncRuleSettings settings);

  const AsyncRuleSettings& settings() const { return settings_; }
  int workers() const { return static_cast<int>(clock_.size()); }
  /// An update of `gradients` gradients starts: it has taken nothing yet.
  void begin_update(int gradients);
  /// Whether the update in progress takes worker w's gradient now (else it is held for a
  /// later update). Without `distinct` always: the count rule takes what came in.
  bool takes(int w) const;
  /// The update took worker w's gradient.
  void took(int w);
  /// The update has its gradients.
  bool complete() const { return taken_ >= wanted_; }
  int taken() const { return taken_; }

  /// Stale synchronous parallel: the master received worker w's gradient (its clock ticks).
  void completed_round(int w);
  /// Worker w stopped sending: it no longer holds the others back.
  void retire(int w);
  /// Whether worker w may start its next round (always, without a staleness bound).
  bool may_start(int w) const;
  bool bounded() const { return settings_.staleness_bound >= 0; }
  std::int64_t clock(int w) const { return clock_[static_cast<std::size_t>(w)]; }
  /// The slowest running worker's clock (the largest clock when every worker retired).
  std::int64_t slowest() const;

 private:
  AsyncRuleSettings settings_;
  std::vector<bool> in_update_, retired_;
  std::vector<int> in_update_list_;  ///< the workers in_update_ marks (cleared, not scanned)
  std::vector<std::int64_t> clock_;
  // How many running (not retired) workers have each clock, so that slowest() and may_start()
  // cost O(log N) on every event, not a scan of every worker.
  std::map<std::int64_t, int> running_clocks_;
  std::int64_t largest_clock_ = 0;
  int taken_ = 0, wanted_ = 1;
};

/// K-async, an update's start: the held gradients (in order of arrival; each has `worker`) it
/// takes first, oldest first, one per worker. take(held) adds one to the update and calls
/// rule.took(); the gradients taken leave `held`. Both masters keep their own held messages.
template <class Held, class Take>
void take_held(const AsyncRule& rule, std::deque<Held>& held, Take take) {
  for (auto it = held.begin(); it != held.end() && !rule.complete();) {
    if (rule.takes(static_cast<int>(it->worker))) {
      take(*it);
      it = held.erase(it);
    } else {
      ++it;
    }
  }
}

/// Whether an update on the virtual clock waits for another arrival, having taken `count`
/// gradients: K-async until K distinct workers' are in; the count rule until `min_gradients`;
/// the time rule (`timed`) until one is taken and none can arrive by `deadline` any more.
bool update_takes_another(const AsyncRule& rule, const VirtualArrivals& arrivals, int count,
                          bool timed, double deadline, int min_gradients);

/// Virtual clock, worker w's gradient just taken from `arrivals` (and the rule told of its
/// round): true when its next round starts at once (round_start(w), when it was ready); false
/// when the staleness bound holds it back (it is blocked until release_blocked() lets it go).
bool starts_next_round(VirtualArrivals& arrivals, const AsyncRule& rule, int w);

/// A blocked worker let go by a publication: its round starts at `start` (the parameters'
/// arrival), after `waited` seconds past its ready time.
struct ReleasedWorker {
  int worker;
  double start, waited;
};
/// Virtual clock, a publication at master time `now`: the blocked workers the rule now lets
/// start, in worker order, each started in `arrivals` once the parameters reached it. Costs
/// what it releases (arrivals.blocked_by_clock()'s prefix), not a scan of every worker.
std::vector<ReleasedWorker> release_blocked(VirtualArrivals& arrivals, const AsyncRule& rule,
                                            double now);

}  // namespace mbkit::train
