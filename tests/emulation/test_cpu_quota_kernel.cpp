// --cpu-quota-tick: QuotaBudget as the kernel applies a CFS quota (the group's pool refilled to
// the quota each period, the CPU's 5 ms slices, checks only at the ticks and at waits), against
// timelines computed by hand. Half a core in periods of 2 ms, a tick of 4 ms: the ticks fall at
// (k + 0.618...) x 4 ms, the first at 2.4721359548 ms.
#include <gtest/gtest.h>

#include "mbkit/emulation/straggler.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

constexpr QuotaWindow kHalf{0.001, 0.002};
constexpr double kTick = 0.004;
constexpr double kFirstTick = 0.0024721359549995796;
constexpr double kTight = 1e-12;
// --comm-wait yield's busy part of a wait (comm::kYieldWaitSeconds).
constexpr double kYield = 0.003;

QuotaBudget fresh(double busy_wait) {
  QuotaBudget budget{kHalf, busy_wait, kTick};
  budget.pool = kHalf.quota;
  return budget;
}

TEST(KernelQuota, AComputeRunsOnUncheckedToTheTickAndRepaysItsOverrunFromTheNextRefills) {
  QuotaBudget budget = fresh(kYield);
  // 3 ms of compute from 0. Unchecked to the tick at 2.472 ms (the pool's first 1 ms is lost at
  // the refill of 2 ms, the pool already full); there its local budget, 0 - 2.472, takes the
  // pool's 1 ms: -1.472 ms owed. The refills of 4 ms (1 ms) and 6 ms (0.472 ms and 1 ns) repay
  // it; it runs from 6 ms with 0.528 ms in the pool. At the tick of 6.472 ms its 0.472 ms run
  // takes that pool (0.056 ms left locally) and it runs on: the last 0.528 ms end at 6.528.
  const double end = budget.run(0.003);
  EXPECT_NEAR(end, 0.006 + (0.003 - kFirstTick), kTight);
  EXPECT_NEAR(budget.stopped, 0.006 - kFirstTick, kTight);
  EXPECT_EQ(budget.stops, 1);
  EXPECT_EQ(budget.period, 3);
  EXPECT_NEAR(budget.pool, 0.0, kTight);
  EXPECT_NEAR(budget.local, 2 * (0.001 - (0.0064721359549995796 - 0.006)) - 0.001, 1e-15);
  EXPECT_NEAR(budget.unaccounted, end - 0.0064721359549995796, kTight);
  // The continuously checked model stops it as its budget ends: [0, 1), [2, 3), [4, 5) ms.
  QuotaBudget window{kHalf, kYield};
  EXPECT_NEAR(window.run(0.003), 0.005, kTight);
}

// 3.1 ms of compute from 0: as the 3 ms above to the tick of 6.472 ms (0.056 ms left locally),
// then 0.156 ms more to 6.628 ms, unchecked: 0.1 ms owed at the next check, the pool empty.
constexpr double kOwingAt = 0.006 + (0.0031 - kFirstTick);

TEST(KernelQuota, AYieldingWaitIsCheckedAtOnceAndASpinningOneOnlyAtTheTicks) {
  // A message at 7 ms. Yielding: its first sched_yield finds the 0.1 ms owed, stopped at
  // 6.628 ms until the refill of 8 ms repays it (1 ns above 0); the message waits for it.
  QuotaBudget yield = fresh(kYield);
  EXPECT_NEAR(yield.run(0.0031), kOwingAt, kTight);
  EXPECT_NEAR(yield.wait(0.007), 0.008, kTight);
  EXPECT_NEAR(yield.local, 1e-9, 1e-15);
  EXPECT_NEAR(yield.pool, 0.0009 - 1e-9, 1e-15);
  // Spinning from 0 for a message at 3 ms: unchecked to the tick of 2.472 ms, stopped there
  // until 6 ms as the compute was: the message waits for it.
  QuotaBudget spin = fresh(kWaitsOnCpu);
  EXPECT_NEAR(spin.wait(0.003), 0.006, kTight);
  // The window model runs a spinning worker [0, 1) and [2, 3) ms: at 3 ms its budget is
  // spent, it runs again at 4 ms.
  QuotaBudget window{kHalf, kWaitsOnCpu};
  EXPECT_NEAR(window.wait(0.003), 0.004, kTight);
}

TEST(KernelQuota, ASleepingCpuGivesItsBudgetAboveOneMillisecondBackToThePool) {
  // Half a core in periods of 100 ms: a yielding wait from 0 to 1 ms takes a 5 ms slice (45 ms
  // left in the pool) and spends 1 ms of it; asleep from 1 ms it gives back all but 1 ms.
  QuotaBudget budget{{0.05, 0.1}, kYield, kTick};
  budget.pool = 0.05;
  EXPECT_NEAR(budget.wait(0.001), 0.001, kTight);
  EXPECT_NEAR(budget.local, 0.004, kTight);
  EXPECT_NEAR(budget.pool, 0.045, kTight);
  budget.sleep(0.002);
  EXPECT_NEAR(budget.local, 0.001, kTight);
  EXPECT_NEAR(budget.pool, 0.048, kTight);
  // The next period's refill brings the pool back to the quota, no more.
  budget.sleep(0.15);
  EXPECT_NEAR(budget.pool, 0.05, kTight);
  EXPECT_EQ(budget.period, 1);
}

TEST(KernelQuota, ASleepThatStartsOwingWakesWhenTheRefillsHaveRepaidIt) {
  // The 3.1 ms compute owes 0.1 ms at 6.628 ms; a sleep from there checks it (the pool is
  // empty: stopped), the refill of 8 ms repays it. A sleep to 7 ms wakes at 8 ms, kept from
  // running 1 ms; one to 9 ms at 9 ms, kept from nothing.
  QuotaBudget short_sleep = fresh(kYield);
  short_sleep.run(0.0031);
  const double stopped_before = short_sleep.stopped;
  short_sleep.sleep(0.007);
  EXPECT_NEAR(short_sleep.time, 0.008, kTight);
  EXPECT_NEAR(short_sleep.stopped - stopped_before, 0.001, kTight);
  QuotaBudget long_sleep = fresh(kYield);
  long_sleep.run(0.0031);
  long_sleep.sleep(0.009);
  EXPECT_NEAR(long_sleep.time, 0.009, kTight);
  EXPECT_EQ(long_sleep.stopped, stopped_before);
  EXPECT_NEAR(long_sleep.pool, 0.0009 - 1e-9, 1e-15);
}

TEST(KernelQuota, AComputingWorkerNeverGetsMoreThanItsQuotaOverManyPeriods) {
  // 1.2 ms steps, each after a wait of 0.3 ms, for 2,000 steps: the refills bound its CPU to
  // half a core (what the overruns borrow is repaid); the refills lost while it runs
  // unchecked make it less.
  for (const double busy_wait : {kYield, kWaitsOnCpu, 0.0}) {
    QuotaBudget budget = fresh(busy_wait);
    double computed = 0;
    for (int step = 0; step < 2000; ++step) {
      budget.wait(budget.time + 0.0003);
      budget.run(0.0012);
      computed += 0.0012;
    }
    const double share = budget.charged / budget.time;
    EXPECT_LE(share, 0.5 + 1e-3) << "busy_wait " << busy_wait;
    EXPECT_GE(computed / budget.time, 0.25) << "busy_wait " << busy_wait;
  }
}

TEST(KernelQuota, ItsStateIsFiveValuesThatRestoreReadsBack) {
  QuotaBudget budget = fresh(kYield);
  budget.run(0.003);
  const auto saved = budget.saved();
  ASSERT_EQ(saved.size(), 5U);
  QuotaBudget restored = fresh(kYield);
  restored.restore(saved, "test");
  EXPECT_EQ(restored.saved(), saved);
  // The next compute from either is the same to the bit.
  EXPECT_EQ(budget.run(0.002), restored.run(0.002));
  EXPECT_MBKIT_ERROR(restored.restore({0, 0, 0}, "the checkpoint"), ExitCode::kBadData,
                     "the checkpoint: a CPU quota's state is 5 values under --cpu-quota-tick "
                     "(time, period, pool, local, unaccounted), not 3");
  EXPECT_MBKIT_ERROR(restored.restore({0, 0, 0.5, 0, 0}, "the checkpoint"), ExitCode::kBadData,
                     "is not a state of a CPU quota of 0.001 s per 0.002 s checked at a tick of "
                     "0.004 s");
  QuotaBudget window{kHalf, kYield};
  EXPECT_MBKIT_ERROR(window.restore(saved, "the checkpoint"), ExitCode::kBadData,
                     "a CPU quota's state is 3 values (time, period, spent), not 5");
}

TEST(KernelQuota, CpuBesideTheWorkerIsTakenAtItsNextCheck) {
  // The loader's 1.5 ms beside the worker at 0: unaccounted until a yielding wait checks it at
  // once, which takes the pool's 1 ms and owes 0.5 ms: stopped until the refill of 2 ms repays
  // it, 0.5 ms (less 1 ns) left in the pool.
  QuotaBudget budget = fresh(kYield);
  budget.beside(0.0015);
  EXPECT_EQ(budget.time, 0.0);
  EXPECT_NEAR(budget.unaccounted, 0.0015, kTight);
  EXPECT_NEAR(budget.charged, 0.0015, kTight);
  EXPECT_NEAR(budget.wait(0.0001), 0.002, kTight);
  EXPECT_NEAR(budget.pool, 0.0005 - 1e-9, kTight);
  EXPECT_EQ(budget.stops, 1);
}

}  // namespace
}  // namespace mbkit::emulation
