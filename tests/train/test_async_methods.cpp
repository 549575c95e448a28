// The asynchronous server's rules (async_rule.hpp): K-async takes K distinct workers' gradients
// and holds a worker's next one; the count rule takes what came in; a staleness bound lets a
// worker start only while its clock is at most s ahead of the slowest running worker's. On the
// virtual clock a blocked worker sends nothing and holds no one back (VirtualArrivals::block).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(AsyncRule, KAsyncTakesDistinctWorkersAndHoldsARepeat) {
  AsyncRule rule(3, {.distinct = true});
  rule.begin_update(2);
  EXPECT_TRUE(rule.takes(0));
  rule.took(0);
  EXPECT_FALSE(rule.takes(0));  // worker 0's next gradient waits for a later update
  EXPECT_TRUE(rule.takes(2));
  rule.took(2);
  EXPECT_TRUE(rule.complete());
  EXPECT_FALSE(rule.takes(1));  // the update is full: held too
  rule.begin_update(2);
  EXPECT_TRUE(rule.takes(0));
  EXPECT_EQ(rule.taken(), 0);
}

TEST(AsyncRule, TheCountRuleTakesEveryArrivalAFastWorkersSeveral) {
  AsyncRule rule(2, {});
  rule.begin_update(2);
  rule.took(0);
  EXPECT_TRUE(rule.takes(0));
  rule.took(0);
  EXPECT_TRUE(rule.complete());
  EXPECT_TRUE(rule.may_start(0));  // no bound
}

TEST(AsyncRule, AStalenessBoundHoldsTheFastWorkerUntilTheSlowestCatchesUp) {
  AsyncRule rule(3, {.staleness_bound = 1});
  rule.completed_round(0);
  EXPECT_TRUE(rule.may_start(0));  // 1 ahead of workers 1 and 2
  rule.completed_round(0);
  EXPECT_FALSE(rule.may_start(0));  // 2 ahead
  rule.completed_round(1);
  EXPECT_FALSE(rule.may_start(0));  // worker 2 is still at 0
  rule.completed_round(2);
  EXPECT_TRUE(rule.may_start(0));
  EXPECT_EQ(rule.slowest(), 1);
  // A worker that stopped no longer holds the others back.
  rule.completed_round(0);
  rule.completed_round(0);
  EXPECT_FALSE(rule.may_start(0));
  rule.retire(1);
  rule.retire(2);
  EXPECT_TRUE(rule.may_start(0));
  EXPECT_EQ(rule.slowest(), 4);
}

TEST(AsyncRule, BoundZeroIsBulkSynchronous) {
  AsyncRule rule(2, {.staleness_bound = 0});
  rule.completed_round(1);
  EXPECT_FALSE(rule.may_start(1));
  EXPECT_TRUE(rule.may_start(0));
  rule.completed_round(0);
  EXPECT_TRUE(rule.may_start(1));
}

// The virtual schedule of --staleness-bound 0 for two workers of 1 s and 2.5 s per round and
// messages of 0.5 s, stepped as both asynchronous masters step it (one gradient per update,
// free updates; starts_next_round and release_blocked): worker 0 arrives at 2 s a round ahead
// and blocks; worker 1 arrives at 3.5 s, worker 0 starts a message later (4 s, 2.5 s after it
// was ready) and arrives at 5.5 s; worker 1, never blocked, started at 3 s and arrives at 6 s,
// which lets worker 0 start at 6.5 s (1.5 s after it was ready).
TEST(AsyncRule, StaleSynchronousScheduleOnTheVirtualClock) {
  VirtualArrivals arrivals(2, 0.5);
  AsyncRule rule(2, {.staleness_bound = 0});
  const double compute[2] = {1.0, 2.5};
  arrivals.start(0, 0.5);
  arrivals.start(1, 0.5);
  std::vector<std::pair<int, double>> updates;
  std::vector<double> starts_of_0, waits_of_0;
  double now = 0;
  while (updates.size() < 5) {
    for (int w = 0; w < 2; ++w) {
      if (!arrivals.waiting(w) && !arrivals.blocked(w)) {
        arrivals.arrived(w, compute[w]);
      }
    }
    const auto next = arrivals.next();
    ASSERT_TRUE(next.has_value());
    now = std::max(now, arrivals.take(*next));
    rule.completed_round(*next);
    const bool starts = starts_next_round(arrivals, rule, *next);
    EXPECT_EQ(starts, !arrivals.blocked(*next));
    updates.emplace_back(*next, now);
    // The update's publication lets blocked workers go.
    for (const ReleasedWorker& released : release_blocked(arrivals, rule, now)) {
      EXPECT_EQ(released.worker, 0);
      EXPECT_EQ(released.start, now + 0.5);
      EXPECT_FALSE(arrivals.blocked(0));
      waits_of_0.push_back(released.waited);
    }
    starts_of_0.push_back(arrivals.round_start(0));
  }
  const std::vector<std::pair<int, double>> expected{
      {0, 2.0}, {1, 3.5}, {0, 5.5}, {1, 6.0}, {0, 8.0}};
  EXPECT_EQ(updates, expected);
  EXPECT_EQ(starts_of_0, (std::vector<double>{1.5, 4.0, 5.0, 6.5, 7.5}));
  EXPECT_EQ(waits_of_0, (std::vector<double>{2.5, 1.5}));
}

// K-async's held gradients at an update's start: oldest first, one per worker, until K.
TEST(AsyncRule, AnUpdateTakesHeldGradientsOldestFirstOnePerWorker) {
  struct Held {
    std::size_t worker;
    int round;
  };
  AsyncRule rule(3, {.distinct = true});
  std::deque<Held> held{{1, 0}, {1, 1}, {2, 0}, {0, 0}};
  rule.begin_update(2);
  std::vector<int> taken;
  take_held(rule, held, [&](const Held& h) {
    taken.push_back(static_cast<int>(h.worker) * 10 + h.round);
    rule.took(static_cast<int>(h.worker));
  });
  EXPECT_EQ(taken, (std::vector<int>{10, 20}));
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].round, 1);  // worker 1's newer gradient waits for the next update
  EXPECT_EQ(held[1].worker, 0u);
  EXPECT_TRUE(rule.complete());
  EXPECT_FALSE(update_takes_another(rule, VirtualArrivals(3, 0.5), 2, false, 0, 2));
}

// slowest() keeps a count of the running workers at each clock and release_blocked() walks the
// blocked workers by clock (both O(log N) an event); here against the rule itself, scans of
// every worker, over random runs of the master's loop on the virtual clock with bounds 0 to 3,
// ties, retirements and K-async's per-update marks.
TEST(AsyncRule, IndexedClocksAgreeWithAScanOfEveryWorkerOverRandomRuns) {
  std::mt19937 random(5);
  const auto grid = [&](int steps) { return 0.25 * static_cast<int>(random() % steps); };
  int releases = 0, mixed_clocks = 0;  // not vacuous: workers were let go, some of two clocks
  for (int run = 0; run < 300; ++run) {
    const int workers = 1 + static_cast<int>(random() % 10);
    const int bound = static_cast<int>(random() % 4);
    const unsigned retire_one_in = 4 + random() % 12;
    VirtualArrivals arrivals(workers, 0.25);
    AsyncRule rule(workers, {.distinct = true, .staleness_bound = bound});
    std::vector<std::int64_t> clock(static_cast<std::size_t>(workers), 0);
    std::vector<bool> retired(clock.size(), false), in_update(clock.size(), false);
    const auto scanned_slowest = [&] {
      std::int64_t slowest = -1;
      for (std::size_t w = 0; w < clock.size(); ++w) {
        if (!retired[w] && (slowest < 0 || clock[w] < slowest)) slowest = clock[w];
      }
      return slowest >= 0 ? slowest : *std::max_element(clock.begin(), clock.end());
    };
    for (int w = 0; w < workers; ++w) arrivals.start(w, 0.25);
    double now = 0;
    for (int event = 0; event < 80; ++event) {
      if (event % 4 == 0) {  // K-async's update of (up to) 2 distinct workers
        rule.begin_update(std::min(2, workers));
        std::fill(in_update.begin(), in_update.end(), false);
      }
      for (int w = 0; w < workers; ++w) {
        const auto i = static_cast<std::size_t>(w);
        if (!retired[i] && !arrivals.waiting(w) && !arrivals.blocked(w)) {
          arrivals.arrived(w, grid(12));
        }
      }
      const auto next = arrivals.next();
      if (!next) break;  // all retired
      const auto i = static_cast<std::size_t>(*next);
      now = std::max(now, arrivals.take(*next));
      if (random() % retire_one_in == 0) {
        arrivals.retire(*next);
        rule.retire(*next);
        retired[i] = true;
      } else {
        rule.completed_round(*next);
        ++clock[i];
        ASSERT_EQ(rule.takes(*next), !rule.complete() && !in_update[i]) << "run " << run;
        if (rule.takes(*next)) {
          rule.took(*next);
          in_update[i] = true;
        }
        const bool may_start = clock[i] - scanned_slowest() <= bound;
        ASSERT_EQ(starts_next_round(arrivals, rule, *next), may_start) << "run " << run;
      }
      ASSERT_EQ(rule.slowest(), scanned_slowest()) << "run " << run << ", event " << event;
      if (random() % 4 != 0) continue;  // several gradients an update (K-async, the count rule)
      // The publication lets go every blocked worker the bound allows, in worker order.
      std::vector<int> expected;
      std::vector<std::int64_t> clocks;
      for (int w = 0; w < workers; ++w) {
        const std::int64_t at = clock[static_cast<std::size_t>(w)];
        if (arrivals.blocked(w) && at - scanned_slowest() <= bound) {
          expected.push_back(w);
          clocks.push_back(at);
        }
      }
      releases += static_cast<int>(expected.size());
      if (std::adjacent_find(clocks.begin(), clocks.end(), std::not_equal_to<>()) != clocks.end())
        ++mixed_clocks;
      std::vector<int> released;
      for (const ReleasedWorker& go : release_blocked(arrivals, rule, now)) {
        released.push_back(go.worker);
        EXPECT_EQ(go.start, now + 0.25);
        EXPECT_FALSE(arrivals.blocked(go.worker));
      }
      ASSERT_EQ(released, expected) << "run " << run << ", event " << event;
    }
  }
  EXPECT_GT(releases, 500);
  EXPECT_GT(mixed_clocks, 10);
}

TEST(AsyncRule, ABlockedWorkerHoldsNoOneBack) {
  VirtualArrivals arrivals(2, 0.5);
  arrivals.start(0, 0);
  arrivals.start(1, 0);
  arrivals.arrived(1, 1.0);
  EXPECT_FALSE(arrivals.next().has_value());  // worker 0 could still arrive first
  arrivals.block(0, 0);
  EXPECT_EQ(arrivals.next(), 1);
  EXPECT_TRUE(arrivals.none_until(1.0));
}

TrainOptions async_options() {
  TrainOptions o;
  o.data = "x.h5";
  o.steps = 1;
  o.comm = CommMode::kPs;
  o.async = true;
  return o;
}

TEST(AsyncMethods, BadCombinationsNameBothFlags) {
  TrainOptions k = async_options();
  k.k_async = 2;
  EXPECT_NO_THROW(validate(k));
  EXPECT_EQ(async_gradients_per_update(k), 2);
  k.async_min_grads = 3;
  EXPECT_MBKIT_ERROR(validate(k), ExitCode::kUsage, "--k-async 2 and --async-min-grads 3");
  k.async_min_grads = 1;
  k.async_master_time_limit = 1;
  EXPECT_MBKIT_ERROR(validate(k), ExitCode::kUsage, "--k-async 2 and --async-master-time-limit");
  k.async_master_time_limit = 0;
  k.k_batch_async = 2;
  EXPECT_MBKIT_ERROR(validate(k), ExitCode::kUsage, "--k-async 2 and --k-batch-async 2");
  k.k_batch_async = 0;
  k.async = false;
  EXPECT_MBKIT_ERROR(validate(k), ExitCode::kUsage, "--k-async 2 needs --async");

  TrainOptions ssp = async_options();
  ssp.staleness_bound = 0;
  EXPECT_NO_THROW(validate(ssp));
  ssp.async_min_grads = 2;
  EXPECT_MBKIT_ERROR(validate(ssp), ExitCode::kUsage,
                     "--staleness-bound 0 and --async-min-grads 2");
  ssp.async_min_grads = 1;
  ssp.k_async = 2;
  EXPECT_MBKIT_ERROR(validate(ssp), ExitCode::kUsage, "--k-async 2");
  ssp.k_async = 0;
  ssp.comm = CommMode::kAllreduce;
  ssp.async = false;
  EXPECT_MBKIT_ERROR(validate(ssp), ExitCode::kUsage, "--staleness-bound 0 and --comm allreduce");
  ssp = async_options();
  ssp.staleness_bound = -2;
  EXPECT_MBKIT_ERROR(validate(ssp), ExitCode::kUsage, "--staleness-bound -2 must not be negative");
}

}  // namespace
}  // namespace mbkit::train
