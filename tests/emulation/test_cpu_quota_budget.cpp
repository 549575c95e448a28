// --cpu-quota's CFS budget (QuotaBudget): Q seconds of CPU per period, refilled at each period's
// start, spent by compute (and by waits when the worker spins), against timelines computed by
// hand; a spinning worker's budget is QuotaWindow's window, over many random rounds.
#include <gtest/gtest.h>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

// Half a core in periods of 100 ms.
constexpr QuotaWindow kHalf{0.05, 0.1};
constexpr double kTight = 1e-12;

// A worker that sleeps as soon as it waits (the waits spend nothing), and one that spins.
QuotaBudget yielding() {
  return QuotaBudget{kHalf, 0.0};
}
QuotaBudget spinning() {
  return QuotaBudget{kHalf, kWaitsOnCpu};
}

TEST(QuotaBudget, ASecondComputeInThePeriodIsStoppedWhenTheBudgetIsSpent) {
  for (QuotaBudget budget : {yielding(), spinning()}) {
    SCOPED_TRACE(budget.busy_wait > 0 ? "spin" : "sleep");
    // 30 ms from a fresh period: as on a core of its own.
    EXPECT_NEAR(budget.run(0.03), 0.03, kTight);
    EXPECT_NEAR(budget.spent, 0.03, kTight);
    // 30 ms more at once: 20 ms to 0.05, stopped until 0.1, the last 10 ms from there.
    EXPECT_NEAR(budget.run(0.03), 0.11, kTight);
    EXPECT_EQ(budget.period, 1);
    EXPECT_NEAR(budget.spent, 0.01, kTight);
  }
}

TEST(QuotaBudget, OnlyASpinningWaitSpendsBudget) {
  // Compute to 0.03, a wait for the parameters to 0.04, then 30 ms of compute.
  QuotaBudget yield = yielding();
  yield.run(0.03);
  EXPECT_NEAR(yield.wait(0.04), 0.04, kTight);
  // Asleep in its poll: 20 ms left, to 0.06; stopped until 0.1; 10 ms more.
  EXPECT_NEAR(yield.run(0.03), 0.11, kTight);
  QuotaBudget spin = spinning();
  spin.run(0.03);
  EXPECT_NEAR(spin.wait(0.04), 0.04, kTight);
  EXPECT_NEAR(spin.spent, 0.04, kTight);
  // The wait spent 10 ms: 10 ms left, to 0.05; stopped until 0.1; 20 ms more.
  EXPECT_NEAR(spin.run(0.03), 0.12, kTight);
  // A spinning wait that spends the budget ends at the next period, when the worker can run.
  QuotaBudget spent = spinning();
  spent.run(0.03);
  EXPECT_NEAR(spent.wait(0.07), 0.1, kTight);
  EXPECT_NEAR(spent.spent, 0.0, kTight);
  QuotaBudget idle = yielding();
  idle.run(0.03);
  EXPECT_NEAR(idle.wait(0.07), 0.07, kTight);  // 20 ms of budget left
}

// --comm-wait yield: a wait stays on the CPU (spinning, then sched_yield) for its first 3 ms
// (comm::kYieldWaitSeconds; here 10 ms of half a core in 100 ms periods), then sleeps.
TEST(QuotaBudget, AYieldingWaitSpendsBudgetForItsBusyPartOnly) {
  QuotaBudget budget{kHalf, 0.01};
  budget.run(0.03);
  // A wait to 0.04 is all busy: 10 ms spent, as spinning.
  EXPECT_NEAR(budget.wait(0.04), 0.04, kTight);
  EXPECT_NEAR(budget.spent, 0.04, kTight);
  // A wait to 0.09: busy to 0.05, where the budget is spent (stopped, still its busy part),
  // then asleep; at 0.09 it cannot run until 0.1.
  EXPECT_NEAR(budget.wait(0.09), 0.1, kTight);
  EXPECT_NEAR(budget.spent, 0.0, kTight);
  // From 0.1 20 ms of compute, then a wait of 30 ms: 10 ms busy, 20 asleep, at 0.15 with
  // 30 ms spent; 30 ms more compute: 20 ms to 0.17, stopped, 10 ms from 0.2.
  budget.run(0.02);
  EXPECT_NEAR(budget.wait(0.15), 0.15, kTight);
  EXPECT_NEAR(budget.spent, 0.03, kTight);
  EXPECT_NEAR(budget.run(0.03), 0.21, kTight);
  // A wait from 0.045 with 5 ms left: busy to 0.055 (5 ms spent, 5 stopped), asleep into
  // period 3: refilled.
  QuotaBudget late{kHalf, 0.01};
  late.run(0.045);
  EXPECT_NEAR(late.wait(0.35), 0.35, kTight);
  EXPECT_EQ(late.period, 3);
  EXPECT_NEAR(late.spent, 0.0, kTight);
  QuotaBudget across{kHalf, 0.01};
  across.wait(0.095);
  EXPECT_NEAR(across.wait(0.25), 0.25, kTight);  // busy 0.095 to 0.105: 5 ms of period 1
  EXPECT_NEAR(across.spent, 0.0, kTight);        // ... but asleep into period 2: refilled
  QuotaBudget within{kHalf, 0.01};
  within.wait(0.095);
  EXPECT_NEAR(within.wait(0.15), 0.15, kTight);  // busy 0.095 to 0.105, asleep to 0.15
  EXPECT_NEAR(within.spent, 0.005, kTight);
}

TEST(QuotaBudget, AWaitIntoALaterPeriodFindsItRefilled) {
  // 30 ms, then a wait to 0.13: a yielding worker has all 50 ms of period 1, to 0.16; a
  // spinning one has spun from 0.1 and has 20 ms, to 0.15, then 10 ms from 0.2.
  QuotaBudget yield = yielding();
  yield.run(0.03);
  EXPECT_NEAR(yield.wait(0.13), 0.13, kTight);
  EXPECT_NEAR(yield.run(0.03), 0.16, kTight);
  QuotaBudget spin = spinning();
  spin.run(0.03);
  EXPECT_NEAR(spin.wait(0.13), 0.13, kTight);
  EXPECT_NEAR(spin.spent, 0.03, kTight);
  EXPECT_NEAR(spin.run(0.03), 0.21, kTight);
  // Many periods later: refilled (the spinner has spun 20 ms of this one).
  EXPECT_NEAR(spin.wait(1.02), 1.02, kTight);
  EXPECT_EQ(spin.period, 10);
  EXPECT_NEAR(spin.spent, 0.02, kTight);
}

TEST(QuotaBudget, ComputeRunsOnAcrossAPeriodsEndWhileBudgetIsLeft) {
  // From 0.08 with the whole budget: 20 ms to the period's end, refilled, 10 ms more. (A
  // window from each period's start would stop it at 0.08 and end it at 0.13.)
  QuotaBudget budget = yielding();
  budget.wait(0.08);
  EXPECT_NEAR(budget.run(0.03), 0.11, kTight);
  EXPECT_NEAR(budget.spent, 0.01, kTight);
  EXPECT_NEAR(kHalf.compute_end(0.08, 0.03), 0.13, kTight);
}

TEST(QuotaBudget, ComputeThatSpendsTheBudgetExactlyCanGoOnOnlyAtTheNextPeriod) {
  QuotaBudget budget = yielding();
  budget.wait(0.12);
  EXPECT_NEAR(budget.run(0.03), 0.15, kTight);
  EXPECT_NEAR(budget.run(0.02), 0.17, kTight);  // the 20 ms of period 1 left
  EXPECT_NEAR(budget.runnable(), 0.2, kTight);  // spent at 0.17: its message leaves at 0.2
  EXPECT_NEAR(budget.run(0.0), 0.2, kTight);
}

TEST(QuotaBudget, SleepsSpendNoBudget) {
  // 30 ms, asleep 15 ms (an induced delay), 30 ms: 20 ms to 0.065, then 10 ms from 0.1.
  for (QuotaBudget budget : {yielding(), spinning()}) {
    budget.run(0.03);
    budget.sleep(0.045);
    EXPECT_NEAR(budget.spent, 0.03, kTight);
    EXPECT_NEAR(budget.run(0.03), 0.11, kTight);
    // A sleep into the next period wakes refilled.
    budget.sleep(0.23);
    EXPECT_EQ(budget.period, 2);
    EXPECT_NEAR(budget.spent, 0.0, kTight);
  }
}

TEST(QuotaBudget, LongComputeTakesTheQuotaOfEachPeriod) {
  // 250 ms from 0: 50 ms a period, the last ending at 0.45.
  QuotaBudget budget = yielding();
  EXPECT_NEAR(budget.run(0.25), 0.45, kTight);
  // A tiny quota takes its periods in one go: 1 s of compute at 1 us per second.
  QuotaBudget tiny{QuotaWindow{1e-6, 1.0}, 0.0};
  EXPECT_NEAR(tiny.run(1.0), 999999.0 + 1e-6, 1e-6);
  // A whole core: no stop.
  QuotaBudget whole{QuotaWindow{0.1, 0.1}, 0.0};
  whole.wait(0.37);
  EXPECT_NEAR(whole.run(1.5), 1.87, 1e-9);
}

// A worker that spins in its waits and never sleeps always wants the CPU: its budget is spent
// in [kP, kP + Q) of every period, QuotaWindow's window. Random rounds of waits and computes
// of up to two periods, from the run's start, under several quotas.
TEST(QuotaBudget, ASpinningWorkerWithoutSleepsIsTheWindowModel) {
  for (const QuotaWindow window : {kHalf, QuotaWindow{0.002, 0.01}, QuotaWindow{0.003, 0.004},
                                   QuotaWindow{0.1, 0.1}, QuotaWindow{0.0002, 0.002}}) {
    SCOPED_TRACE(window.quota);
    QuotaBudget budget{window, true};
    Rng rng(7, static_cast<std::uint64_t>(window.quota * 1e6));
    double now = 0;  // the window model's time
    for (int round = 0; round < 2000; ++round) {
      const double start = now + rng.uniform() * window.period;  // the parameters arrive
      now = window.runnable_from(start);
      ASSERT_NEAR(budget.wait(start), now, 1e-9) << "round " << round;
      for (int batch = 0; batch < 3; ++batch) {
        const double cost = rng.uniform() * 2 * window.period;
        now = window.compute_end(now, cost);
        ASSERT_NEAR(budget.run(cost), now, 1e-9) << "round " << round;
      }
      now = window.runnable_from(now);  // its gradient leaves
      ASSERT_NEAR(budget.runnable(), now, 1e-9) << "round " << round;
    }
  }
}

TEST(QuotaBudget, ItsStateIsSavedAndRestored) {
  QuotaBudget budget = yielding();
  budget.wait(0.12);
  budget.run(0.03);
  QuotaBudget restored = yielding();
  restored.restore(budget.saved(), "the test's");
  EXPECT_EQ(restored.saved(), budget.saved());
  EXPECT_EQ(restored.run(0.04), budget.run(0.04));
  EXPECT_MBKIT_ERROR(restored.restore({0.1, 1}, "the test's"), ExitCode::kBadData,
                     "the test's: a CPU quota's state is 3 values (time, period, spent), not 2");
  EXPECT_MBKIT_ERROR(restored.restore({0.1, 1.5, 0.01}, "the test's"), ExitCode::kBadData,
                     "the test's: (0.1, 1.5, 0.01) is not a state of a CPU quota of 0.05 s per "
                     "0.1 s");
  EXPECT_MBKIT_ERROR(restored.restore({0.1, 1, 0.06}, "the test's"), ExitCode::kBadData,
                     "is not a state of a CPU quota");
}

TEST(CpuQuota, GivesEachListedRankABudgetFromTheRunsStart) {
  const auto quota = parse_cpu_quota("1=0.05/0.1");
  EXPECT_FALSE(quota.budget_for(2, 0.0));
  const auto budget = quota.budget_for(1, 3e-3);
  ASSERT_TRUE(budget);
  EXPECT_EQ(budget->busy_wait, 3e-3);
  EXPECT_EQ(budget->limit.quota, 0.05);
  EXPECT_EQ(budget->saved(), (std::vector<double>{0, 0, 0}));
}

TEST(QuotaBudget, CountsTheCpuItChargedAndTheTimeItWasStopped) {
  QuotaBudget budget{kHalf, 0.003};  // 50 ms per 100 ms, a wait's first 3 ms on the CPU
  budget.run(0.03);
  // 20 ms to 0.05, stopped until 0.1 (50 ms, once), 10 ms from there.
  budget.run(0.03);
  EXPECT_NEAR(budget.charged, 0.06, kTight);
  EXPECT_NEAR(budget.stopped, 0.05, kTight);
  EXPECT_EQ(budget.stops, 1);
  // A wait to 0.2 charges its first 3 ms only; the new period lets it run at once.
  budget.wait(0.2);
  EXPECT_NEAR(budget.charged, 0.063, kTight);
  EXPECT_EQ(budget.stops, 1);
  // 250 ms from 0.2: 50 ms in each of five periods, stopped 50 ms between them (four times).
  EXPECT_NEAR(budget.run(0.25), 0.65, kTight);
  EXPECT_NEAR(budget.charged, 0.313, kTight);
  EXPECT_NEAR(budget.stopped, 0.25, kTight);
  EXPECT_EQ(budget.stops, 5);
  // A spinning wait across periods: the 10 ms left of the first, the whole second's 50 ms and
  // the third's 30 ms to 0.23.
  QuotaBudget spin = spinning();
  spin.run(0.04);
  spin.wait(0.23);
  EXPECT_NEAR(spin.charged, 0.04 + 0.09, kTight);
  // The totals are no part of the saved state.
  EXPECT_EQ(spin.saved().size(), 3U);
}

// The loader's thread prepares the next batch beside the compute: no time of the worker's, but
// the group's budget pays it, and past the quota later periods do before the worker runs.
TEST(QuotaBudget, CpuBesideTheWorkerSpendsItsBudgetWithoutMovingItsTime) {
  QuotaBudget budget = yielding();
  budget.run(0.02);
  budget.beside(0.01);
  EXPECT_NEAR(budget.time, 0.02, kTight);
  EXPECT_NEAR(budget.spent, 0.03, kTight);
  EXPECT_NEAR(budget.charged, 0.03, kTight);
  // 30 ms of compute: 20 ms left, to 0.04; stopped until 0.1; the last 10 ms from there.
  EXPECT_NEAR(budget.run(0.03), 0.11, kTight);
  // Without the loader's 10 ms the same compute ended within the period.
  QuotaBudget alone = yielding();
  alone.run(0.02);
  EXPECT_NEAR(alone.run(0.03), 0.05, kTight);
  // Nothing beside: nothing changes.
  alone.beside(0.0);
  EXPECT_NEAR(alone.spent, 0.05, kTight);
}

TEST(QuotaBudget, CpuBesideThePastQuotaIsADebtTheNextPeriodsPay) {
  // 40 ms of compute, then 90 ms beside it: 80 ms past the quota of 50. The next period's 50
  // ms pay 50 of it, the one after 30: the worker runs again at 0.2 with 20 ms left there.
  QuotaBudget budget = yielding();
  budget.run(0.04);
  budget.beside(0.09);
  EXPECT_NEAR(budget.run(0.01), 0.21, kTight);
  EXPECT_EQ(budget.period, 2);
  EXPECT_NEAR(budget.spent, 0.04, kTight);
  EXPECT_NEAR(budget.stopped, 0.16, kTight);
  // A worker that sleeps across the periods that pay finds its budget refilled by then.
  QuotaBudget asleep = yielding();
  asleep.run(0.04);
  asleep.beside(0.06);  // 50 ms past the quota: the next period's whole budget
  asleep.sleep(0.15);
  EXPECT_NEAR(asleep.runnable(), 0.2, kTight);
  QuotaBudget later = yielding();
  later.run(0.04);
  later.beside(0.06);
  later.sleep(0.25);  // period 2: paid in full
  EXPECT_NEAR(later.runnable(), 0.25, kTight);
  EXPECT_NEAR(later.spent, 0.0, kTight);
}

// A quota under the rounding slack of its period (the fuzzer's 1 us per 1002 s) counts as spent
// at once: each stop waits for the next period only, as before there was CPU beside the worker.
TEST(QuotaBudget, ATinyQuotaStopsTheWorkerOnePeriodAtATime) {
  const QuotaWindow tiny{1e-6, 1002};
  for (const double busy_wait : {0.0, 0.2 * tiny.period, kWaitsOnCpu}) {
    QuotaBudget budget{tiny, busy_wait};
    budget.run(0.3 * tiny.quota);
    const double from = budget.wait(0.37 * tiny.period);
    const double seconds = 2.5 * tiny.quota;
    const double done = budget.run(seconds);
    EXPECT_GE(done, from + seconds * (1 - 1e-12));
    EXPECT_LE(done, from + (seconds / tiny.quota + 2) * tiny.period);
    EXPECT_LE(budget.spent, tiny.quota);
  }
  // With CPU beside it past the quota: the debt's periods, the last one's rest within the slack
  // counted as spent (one more); at half a core, 125 ms beside: periods 0 and 1 pay 100 ms, the
  // worker runs from 0.2 with 25 ms of period 2 spent.
  QuotaBudget owing{tiny, 0.0};
  owing.beside(2.5 * tiny.quota);
  EXPECT_EQ(owing.runnable(), 3 * tiny.period);
  EXPECT_EQ(owing.spent, 0.0);
  QuotaBudget half = yielding();
  half.beside(0.125);
  EXPECT_NEAR(half.runnable(), 0.2, kTight);
  EXPECT_NEAR(half.spent, 0.025, kTight);
}

}  // namespace
}  // namespace mbkit::emulation
