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
#include <vector>

namespace mbkit::train {

struct AsyncRuleSettings {
  bool distinct = false;     ///< --k-async: an update's gradients from distinct workers
  int staleness_bound = -1;  ///< --staleness-bound s; -1: none
};

class AsyncRule {
 public:
  AsyncRule(int workers, AsyncRuleSettings settings);

  const AsyncRuleSettings& settings() const { return settings_; }
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
  std::vector<std::int64_t> clock_;
  int taken_ = 0, wanted_ = 1;
};

}  // namespace mbkit::train
