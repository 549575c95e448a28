// Strong scaling: --global-batch-size split over the workers with the remainder to the first
// ones, and --lr-scaling's factor (Goyal et al.'s linear rule, or its square root).
#include <gtest/gtest.h>

#include <cmath>

#include "mbkit/train/options.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TrainOptions options_with(std::int64_t global, int batch = 64) {
  TrainOptions o;
  o.data = "x.h5";
  o.steps = 1;
  o.batch_size = batch;
  o.global_batch_size = global;
  return o;
}

TEST(GlobalBatch, SplitsEvenlyWithTheRemainderToTheFirstWorkers) {
  const TrainOptions o = options_with(10);
  EXPECT_EQ(worker_batch_size(o, 3, 0), 4);
  EXPECT_EQ(worker_batch_size(o, 3, 1), 3);
  EXPECT_EQ(worker_batch_size(o, 3, 2), 3);
  EXPECT_EQ(global_batch_size(o, 3), 10);
  int sum = 0;
  for (int w = 0; w < 7; ++w) sum += worker_batch_size(options_with(100), 7, w);
  EXPECT_EQ(sum, 100);
  EXPECT_EQ(worker_batch_size(options_with(96), 1, 0), 96);  // one process takes it all
}

TEST(GlobalBatch, WithoutItTheBatchIsPerWorker) {
  const TrainOptions o = options_with(0, 16);
  EXPECT_EQ(worker_batch_size(o, 3, 2), 16);
  EXPECT_EQ(global_batch_size(o, 3), 48);
}

TEST(GlobalBatch, FewerSamplesThanWorkersAndTooManyPartitionsAreRefused) {
  EXPECT_MBKIT_ERROR(validate_batches(options_with(2), 3), ExitCode::kUsage,
                     "--global-batch-size 2 is less than the 3 workers");
  TrainOptions amb = options_with(20);
  amb.amb.enabled = true;
  amb.amb.partitions = 7;  // 7, 7, 6 samples: the last worker cannot make 7 micro-batches
  EXPECT_MBKIT_ERROR(validate_batches(amb, 3), ExitCode::kUsage,
                     "--partitions 7 is larger than the 6 samples");
  amb.amb.partitions = 6;
  EXPECT_NO_THROW(validate_batches(amb, 3));
}

TEST(LrScaling, LinearAndSqrtOfGlobalOverBaseBatch) {
  TrainOptions o = options_with(0, 32);
  EXPECT_EQ(lr_scale_factor(o, 4), 1.0);  // none
  o.lr_scaling = "linear";
  EXPECT_EQ(lr_scale_factor(o, 4), 4.0);  // 4 x 32 against one worker's 32
  o.lr_scaling = "sqrt";
  EXPECT_EQ(lr_scale_factor(o, 4), 2.0);
  TrainOptions g = options_with(512);
  g.lr_scaling = "linear";
  g.lr_base_batch = 256;  // Goyal et al.: 0.1 for 256
  EXPECT_EQ(lr_scale_factor(g, 8), 2.0);
  EXPECT_EQ(lr_scale_factor(g, 3), 2.0);  // strong scaling: the workers do not matter
}

TEST(LrScaling, BadCombinationsNameTheFlag) {
  TrainOptions o = options_with(0);
  o.lr_scaling = "cubic";
  EXPECT_MBKIT_ERROR(validate(o), ExitCode::kUsage, "--lr-scaling: 'cubic'");
  o.lr_scaling = "none";
  o.lr_base_batch = 128;
  EXPECT_MBKIT_ERROR(validate(o), ExitCode::kUsage, "--lr-base-batch needs --lr-scaling");
  TrainOptions g = options_with(512);
  g.lr_scaling = "linear";
  EXPECT_MBKIT_ERROR(validate(g), ExitCode::kUsage, "needs --lr-base-batch");
  g.lr_base_batch = 256;
  EXPECT_NO_THROW(validate(g));
}

}  // namespace
}  // namespace mbkit::train
