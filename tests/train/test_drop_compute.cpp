// DropCompute's threshold (--drop-compute auto): the expected samples per second of a step at
// each candidate threshold, worked out by hand for a worker that straggles and one that does not.
#include <gtest/gtest.h>

#include <vector>

#include "mbkit/train/drop_compute.hpp"

namespace mbkit::train {
namespace {

TEST(DropCompute, DropsTheStragglersLateMicroBatches) {
  // Two workers, 4 micro-batches of 8 samples at 1 s each; worker 1 is 3 s late. Threshold in
  // (3, 4]: worker 0 does its 4 (ready at 4 s), worker 1 one (3 + 1 = 4 s): 40 samples / 4 s.
  // Nothing dropped: 64 samples / 7 s = 9.14; (4, 5]: 48 / 5; (2, 3]: 32 / 4.
  const auto choice = choose_drop_compute_threshold({1.0, 1.0}, 4, 8, {{0.0, 3.0}}, 0.0);
  EXPECT_GT(choice.threshold, 3.0);
  EXPECT_LE(choice.threshold, 4.0);
  EXPECT_DOUBLE_EQ(choice.samples_per_second, 10.0);
  EXPECT_DOUBLE_EQ(choice.full_batches_per_second, 64.0 / 7.0);
}

TEST(DropCompute, WithoutStragglersNothingIsDropped) {
  const auto choice = choose_drop_compute_threshold({0.5, 0.5}, 4, 16, {{0.0, 0.0}}, 0.1);
  // Every worker's whole batch by 2 s: the threshold lets all of it through.
  EXPECT_GE(choice.threshold, 2.0);
  EXPECT_DOUBLE_EQ(choice.samples_per_second, choice.full_batches_per_second);
  EXPECT_DOUBLE_EQ(choice.full_batches_per_second, 128.0 / 2.1);
}

TEST(DropCompute, ASlowerWorkerIsCutAtTheFasterOnesBatch) {
  // Unequal workers (0.5 and 0.25 s a micro-batch): at 1 s worker 0 has done 2, worker 1 all 4:
  // 96 samples / 1.1 s beats the whole batches' 128 / 2.1.
  const auto choice = choose_drop_compute_threshold({0.5, 0.25}, 4, 16, {{0.0, 0.0}}, 0.1);
  EXPECT_DOUBLE_EQ(choice.samples_per_second, 96.0 / 1.1);
  EXPECT_GT(choice.threshold, 0.5);
  EXPECT_LE(choice.threshold, 1.0);
}

TEST(DropCompute, TheExchangeMakesDroppingLessWorthIt) {
  // With a 10 s exchange per step, waiting 3 s more for worker 1's whole batch costs little:
  // nothing dropped (64 / 17 = 3.76) beats (3, 4] (40 / 14 = 2.86).
  const auto choice = choose_drop_compute_threshold({1.0, 1.0}, 4, 8, {{0.0, 3.0}}, 10.0);
  EXPECT_DOUBLE_EQ(choice.samples_per_second, 64.0 / 17.0);
  EXPECT_GE(choice.threshold, 7.0);
}

TEST(DropCompute, AveragesOverTrials) {
  // Trial 1 as above, trial 2 without delays: at (3, 4] 40 + 64 samples in 4 + 4 s = 13;
  // nothing dropped 128 / 11 = 11.6.
  const auto choice =
      choose_drop_compute_threshold({1.0, 1.0}, 4, 8, {{0.0, 3.0}, {0.0, 0.0}}, 0.0);
  EXPECT_DOUBLE_EQ(choice.samples_per_second, 13.0);
  EXPECT_GT(choice.threshold, 3.0);
  EXPECT_LE(choice.threshold, 4.0);
}

}  // namespace
}  // namespace mbkit::train
