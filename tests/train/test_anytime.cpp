// The anytime round with a fake clock: the deadline is checked before every micro-batch but
// the first, a started micro-batch is finished, at least one is always done, the leftover of a
// batch is never used, and a batch done with time to spare is reported.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "mbkit/train/anytime.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

// A round on a fake clock: the delay before it, then `cost` seconds per micro-batch.
struct FakeRound {
  double clock = 0;
  std::vector<int> ran;
  int betweens = 0;

  AnytimeRound run(const MicroBatches& plan, double limit, double delay, double cost) {
    clock = delay;
    return run_anytime_round(
        plan, limit, [&] { return clock; },
        [&](int k) {
          ran.push_back(k);
          clock += cost;
        },
        [&] { ++betweens; });
  }
};

TEST(SplitBatch, MicroBatchesOfFloorBatchOverPartitionsAndTheLeftoverUnused) {
  EXPECT_EQ(split_batch(64, 8).size, 8);
  EXPECT_EQ(split_batch(64, 8).available, 8);
  EXPECT_EQ(split_batch(10, 10 / 3).available, 3);  // 3 x 3, one sample unused
  EXPECT_EQ(split_batch(7, 8).size, 7);             // a short last batch: one micro-batch
  EXPECT_EQ(split_batch(7, 8).available, 1);
  EXPECT_EQ(split_batch(20, 8).available, 2);  // a short batch keeps the micro-batch size
}

TEST(AnytimeRound, StopsAtTheFirstCheckPastTheLimitAndFinishesAStartedMicroBatch) {
  FakeRound round;
  // 10 ms per micro-batch, limit 35 ms: checks at 10, 20, 30 pass, the one at 40 stops.
  const auto result = round.run({8, 8}, 0.035, 0, 0.010);
  EXPECT_EQ(result.done, 4);
  EXPECT_FALSE(result.finished_early);
  EXPECT_EQ(round.ran, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(round.betweens, 3);
  EXPECT_NEAR(round.clock, 0.040, 1e-12);  // overshoot: at most one micro-batch
}

TEST(AnytimeRound, TheDelayCountsAgainstTheLimit) {
  FakeRound round;
  EXPECT_EQ(round.run({8, 8}, 0.035, 0.020, 0.010).done, 2);  // checks at 30 (go), 40 (stop)
}

TEST(AnytimeRound, AtLeastOneMicroBatchEvenPastTheDeadline) {
  FakeRound round;
  const auto result = round.run({8, 8}, 0.035, 1.0, 0.010);
  EXPECT_EQ(result.done, 1);
  EXPECT_FALSE(result.finished_early);
  EXPECT_EQ(round.betweens, 0);
}

TEST(AnytimeRound, AWholeBatchWithTimeLeftIsReported) {
  FakeRound round;
  const auto result = round.run({16, 4}, 1.0, 0, 0.010);
  EXPECT_EQ(result.done, 4);
  EXPECT_TRUE(result.finished_early);
  // Exactly at the limit after the last one: not early.
  FakeRound exact;
  EXPECT_FALSE(exact.run({16, 4}, 0.25, 0, 0.0625).finished_early);
}

TEST(AnytimeRound, NoLimitIsFixedMiniBatch) {
  FakeRound round;
  const auto result = round.run({64, 1}, std::numeric_limits<double>::infinity(), 5.0, 1.0);
  EXPECT_EQ(result.done, 1);
  EXPECT_TRUE(result.finished_early);
}

TEST(AnytimeRound, ACutEndsTheRoundBeforeTheNextMicroBatchAfterBetween) {
  // The wall-clock selection's late round: the cut is asked before micro-batches 1, 2, ...
  double clock = 0;
  std::vector<int> ran;
  std::vector<int> order;  // 0: between, 1: cut
  int asked = 0;
  const auto result = run_anytime_round(
      {8, 8}, std::numeric_limits<double>::infinity(), [&] { return clock; },
      [&](int k) {
        ran.push_back(k);
        clock += 1;
      },
      [&] { order.push_back(0); },
      [&] {
        order.push_back(1);
        return ++asked == 3;  // the third check: after micro-batches 0, 1, 2
      });
  EXPECT_EQ(result.done, 3);
  EXPECT_TRUE(result.cut);
  EXPECT_FALSE(result.finished_early);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

TEST(AnytimeRound, ANeverTrueCutChangesNothing) {
  const auto result = run_anytime_round(
      {8, 4}, std::numeric_limits<double>::infinity(), [] { return 0.0; }, [](int) {}, {},
      [] { return false; });
  EXPECT_EQ(result.done, 4);
  EXPECT_FALSE(result.cut);
  EXPECT_TRUE(result.finished_early);
}

}  // namespace
}  // namespace mbkit::train
