// Learning-rate schedules at chosen steps and epochs, warm-up, and the messages of bad settings.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mbkit/optim/schedule.hpp"
#include "test_helpers.hpp"

namespace mbkit::optim {
namespace {

ScheduleConfig schedule_of(const std::string& kind, double lr = 0.1) {
  ScheduleConfig config;
  config.kind = kind;
  config.lr = lr;
  return config;
}

TEST(Schedule, ConstantIgnoresStepAndEpoch) {
  const LearningRateSchedule schedule(schedule_of("constant", 0.05));
  EXPECT_EQ(schedule.at(0, 0.0), 0.05);
  EXPECT_EQ(schedule.at(123456, 300.5), 0.05);
  EXPECT_EQ(schedule.config().kind, "constant");
}

TEST(Schedule, ExponentialStaircaseDecaysAtWholeIntervals) {
  auto config = schedule_of("exponential");
  config.decay_steps = 50;
  config.decay_rate = 0.9;
  config.staircase = true;
  const LearningRateSchedule schedule(config);
  EXPECT_DOUBLE_EQ(schedule.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(49, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(50, 0.0), 0.09);
  EXPECT_DOUBLE_EQ(schedule.at(149, 0.0), 0.081);
  EXPECT_DOUBLE_EQ(schedule.at(150, 0.0), 0.0729);
}

TEST(Schedule, ExponentialSmoothDecaysEveryStep) {
  auto config = schedule_of("exponential");
  config.decay_steps = 50;
  config.decay_rate = 0.9;
  config.staircase = false;
  const LearningRateSchedule schedule(config);
  EXPECT_DOUBLE_EQ(schedule.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(25, 0.0), 0.1 * std::sqrt(0.9));
  EXPECT_DOUBLE_EQ(schedule.at(50, 0.0), 0.09);
  EXPECT_DOUBLE_EQ(schedule.at(75, 0.0), 0.1 * std::pow(0.9, 1.5));
}

TEST(Schedule, MultistepCountsMilestonesReachedByWholeEpochs) {
  // The DBSL runs: x0.2 at epochs 80 and 120.
  auto config = schedule_of("multistep");
  config.milestones = {80, 120};
  config.gamma = 0.2;
  const LearningRateSchedule schedule(config);
  EXPECT_DOUBLE_EQ(schedule.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(0, 79.9), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(0, 80.0), 0.02);
  EXPECT_DOUBLE_EQ(schedule.at(0, 119.0), 0.02);
  EXPECT_DOUBLE_EQ(schedule.at(0, 119.99), 0.02);
  EXPECT_DOUBLE_EQ(schedule.at(0, 120.0), 0.004);
  EXPECT_DOUBLE_EQ(schedule.at(0, 500.0), 0.004);
}

TEST(Schedule, LinearReachesTheEndAndStaysThere) {
  auto config = schedule_of("linear");
  config.end_lr = 0.01;
  config.total_steps = 100;
  const LearningRateSchedule schedule(config);
  EXPECT_DOUBLE_EQ(schedule.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(50, 0.0), 0.055);
  EXPECT_DOUBLE_EQ(schedule.at(100, 0.0), 0.01);
  EXPECT_DOUBLE_EQ(schedule.at(150, 0.0), 0.01);
}

// The AMB original's `epochs` schedule (thadikari/utilities learningrate.py), by hand:
// lr * frac^floor(epoch / every), whatever the step.
TEST(Schedule, EpochsIsTheOriginalsPeriodicDecay) {
  auto config = schedule_of("epochs", 0.1);
  const LearningRateSchedule defaults(config);  // the original's: every 10 epochs, x0.5
  EXPECT_DOUBLE_EQ(defaults.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(defaults.at(5000, 9.999), 0.1);
  EXPECT_DOUBLE_EQ(defaults.at(5001, 10.0), 0.05);
  EXPECT_DOUBLE_EQ(defaults.at(9999, 25.3), 0.025);
  config.every_epochs = 2.5;
  config.frac = 0.93;
  const LearningRateSchedule fractional(config);
  for (const double epoch : {0.0, 2.4, 2.5, 7.49, 7.5, 100.0}) {
    EXPECT_DOUBLE_EQ(fractional.at(0, epoch), 0.1 * std::pow(0.93, std::floor(epoch / 2.5)))
        << "epoch " << epoch;
  }
  EXPECT_DOUBLE_EQ(fractional.at(0, 7.5), 0.1 * 0.93 * 0.93 * 0.93);
}

TEST(Schedule, WarmUpScalesTheFirstSteps) {
  auto config = schedule_of("constant");
  config.warmup_steps = 10;
  const LearningRateSchedule constant(config);
  EXPECT_DOUBLE_EQ(constant.at(0, 0.0), 0.01);  // (0 + 1) / 10: the first step is not zero
  EXPECT_DOUBLE_EQ(constant.at(4, 0.0), 0.05);
  EXPECT_DOUBLE_EQ(constant.at(9, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(constant.at(1000, 0.0), 0.1);

  // The factor multiplies whatever the schedule gives.
  config.kind = "exponential";
  config.decay_steps = 2;
  config.decay_rate = 0.5;
  config.staircase = true;
  const LearningRateSchedule exponential(config);
  EXPECT_DOUBLE_EQ(exponential.at(5, 0.0), 0.1 * 0.25 * 0.6);  // 0.5^floor(5 / 2), (5 + 1) / 10
  EXPECT_DOUBLE_EQ(exponential.at(12, 0.0), 0.1 * std::pow(0.5, 6));
}

// Goyal et al.'s gradual warm-up: from the small batch's rate (1/k of lr) at step 0 to lr at
// warmup_steps, in equal increments.
TEST(Schedule, WarmUpFromAFractionRisesLinearlyToTheRate) {
  auto config = schedule_of("constant", 0.4);
  config.warmup_steps = 4;
  config.warmup_from = 0.25;
  const LearningRateSchedule schedule(config);
  EXPECT_DOUBLE_EQ(schedule.at(0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.at(1, 0.0), 0.4 * (0.25 + 0.75 * 0.25));  // 0.175
  EXPECT_DOUBLE_EQ(schedule.at(2, 0.0), 0.25);
  EXPECT_DOUBLE_EQ(schedule.at(4, 0.0), 0.4);
  EXPECT_DOUBLE_EQ(schedule.at(100, 0.0), 0.4);
}

TEST(Schedule, SettingsOfOtherKindsAreIgnored) {
  auto config = schedule_of("constant");
  config.decay_steps = 0;
  config.gamma = -1;
  config.total_steps = 0;
  EXPECT_NO_THROW(LearningRateSchedule{config});
}

TEST(Schedule, BadSettingsNameTheFlag) {
  EXPECT_EQ(known_schedules(), "constant, exponential, multistep, linear, epochs");
  EXPECT_MBKIT_ERROR(LearningRateSchedule{schedule_of("cosine")}, ExitCode::kUsage,
                     "--lr-schedule: unknown schedule 'cosine' (known: constant, exponential, "
                     "multistep, linear, epochs)");
  for (const double lr : {0.0, -0.1, std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_MBKIT_ERROR(LearningRateSchedule{schedule_of("constant", lr)}, ExitCode::kUsage,
                       "--lr must be positive");
  }

  auto config = schedule_of("constant");
  config.warmup_steps = -1;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--warmup-steps must be non-negative (got -1)");

  config = schedule_of("exponential");
  config.decay_steps = 0;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--decay-steps must be positive");
  config = schedule_of("exponential");
  config.decay_rate = 0;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--decay-rate must be positive");

  config = schedule_of("multistep");
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--lr-schedule multistep needs --milestones");
  config.milestones = {120, 80};
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--milestones must be increasing (120 then 80)");
  config.milestones = {-5};
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--milestones: -5 is not an epoch");
  config.milestones = {80};
  config.gamma = 0;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage, "--gamma must be positive");

  config = schedule_of("linear");
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--lr-schedule linear needs the total number of steps");
  config.total_steps = 100;
  config.end_lr = -0.01;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage,
                     "--end-lr must be non-negative");

  config = schedule_of("epochs");
  config.every_epochs = 0;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage, "--lr-every must be positive");
  config = schedule_of("epochs");
  config.frac = -0.5;
  EXPECT_MBKIT_ERROR(LearningRateSchedule{config}, ExitCode::kUsage, "--lr-frac must be positive");
}

TEST(Schedule, NegativeStepIsAnInternalError) {
  const LearningRateSchedule schedule(schedule_of("constant"));
  EXPECT_MBKIT_ERROR(schedule.at(-1, 0.0), ExitCode::kFailure, "learning rate asked for step -1");
}

}  // namespace
}  // namespace mbkit::optim
