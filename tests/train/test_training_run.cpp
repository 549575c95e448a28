// The training engine called in-process (as the tools do, without mpirun): the clock on its
// own, then whole runs of mb-train-fmb and mb-train-amb on a tiny dataset.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "mbkit/tools/mb_train.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/run_clock.hpp"
#include "test_helpers.hpp"
#include "train_fixture.hpp"

namespace mbkit::train {
namespace {

TEST(RunClock, WallClockContinuesFromTheResumedRun) {
  RunClock clock(false, SteadyClock::now());
  clock.resume_at(100.0, 250.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(clock.now(), 100.02);
  EXPECT_LT(clock.now(), 110.0);
  EXPECT_GE(clock.wall_now(), 250.02);
  EXPECT_DOUBLE_EQ(clock.elapsed_before(), 100.0);
}

TEST(RunClock, VirtualClockMovesOnlyWhenAdvanced) {
  RunClock clock(true, SteadyClock::now());
  clock.resume_at(7.0, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_DOUBLE_EQ(clock.now(), 7.0);
  clock.advance(0.5);
  EXPECT_DOUBLE_EQ(clock.now(), 7.5);
  clock.set_virtual_now(9.0);
  EXPECT_DOUBLE_EQ(clock.virtual_now(), 9.0);
  EXPECT_GT(clock.wall_now(), 1.0);  // real seconds go on regardless
}

class TrainingRunTest : public test::TrainFixture {
 protected:
  TrainOptions options(const std::string& checkpoint) const {
    TrainOptions o = short_run(checkpoint);
    o.optimizer.name = "momentum";
    o.optimizer.momentum = 0.9;
    o.schedule.lr = 0.05;
    o.steps = 8;
    return o;
  }
};

TEST_F(TrainingRunTest, SameSeedSameParameters) {
  ASSERT_EQ(tools::train::run_train_fmb(options("a.h5")), 0);
  ASSERT_EQ(tools::train::run_train_fmb(options("b.h5")), 0);
  EXPECT_EQ(parameters("a.h5"), parameters("b.h5"));
  TrainOptions other = options("c.h5");
  other.seed = 2;
  ASSERT_EQ(tools::train::run_train_fmb(other), 0);
  EXPECT_NE(parameters("a.h5"), parameters("c.h5"));
}

// FMB and AMB are rounds of the same engine: an anytime round of one micro-batch (the whole
// batch, always done) is FMB's round, so the runs agree to the bit.
TEST_F(TrainingRunTest, AnytimeWithOneMicroBatchIsFixedMiniBatch) {
  ASSERT_EQ(tools::train::run_train_fmb(options("fmb.h5")), 0);
  TrainOptions amb = options("amb.h5");
  amb.amb.partitions = 1;
  amb.amb.time_limit = 1000;
  ASSERT_EQ(tools::train::run_train_amb(amb), 0);
  EXPECT_EQ(parameters("fmb.h5"), parameters("amb.h5"));
  // Four micro-batches of 4 under a limit that allows one: another gradient each step.
  amb = options("amb4.h5");
  amb.amb.partitions = 4;
  amb.amb.time_limit = 1e-9;
  ASSERT_EQ(tools::train::run_train_amb(amb), 0);
  EXPECT_NE(parameters("fmb.h5"), parameters("amb4.h5"));
}

TEST_F(TrainingRunTest, ResumedRunEqualsAnUninterruptedOne) {
  ASSERT_EQ(tools::train::run_train_fmb(options("straight.h5")), 0);
  TrainOptions first = options("resumed.h5");
  first.steps = 3;
  ASSERT_EQ(tools::train::run_train_fmb(first), 0);
  TrainOptions rest = options("resumed.h5");
  rest.resume = "auto";
  ASSERT_EQ(tools::train::run_train_fmb(rest), 0);
  EXPECT_EQ(read_checkpoint(dir_.file("resumed.h5")).step, 8);
  EXPECT_EQ(parameters("straight.h5"), parameters("resumed.h5"));
}

TEST_F(TrainingRunTest, BadOptionsAreRefusedBeforeAnyWork) {
  TrainOptions o = options("never.h5");
  o.amb.enabled = true;
  o.amb.partitions = 32;  // more than the batch of 16
  o.amb.time_limit = 1;
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--partitions 32");
  o = options("never.h5");
  o.epochs = std::nan("");
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--epochs nan");
  o = options("never.h5");
  o.time_budget = HUGE_VAL;
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--time-budget inf");
  o = options("never.h5");
  o.epochs = 1e300;  // finite, but more steps than a run can take
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--epochs 1e+300");
  o = options("never.h5");
  o.warmup_epochs = 1e300;
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--warmup-epochs 1e+300");
  EXPECT_EQ(dir_.entries(), std::vector<std::string>{"toy.h5"});
}

// The options given as text are parsed once, into typed values, where they are read: the engine
// never parses, and a bad text names its flag.
TEST(OptionTexts, AreParsedIntoTypedOptions) {
  TrainOptions o;
  o.given.induce = "niagara";
  o.given.slowdown = "2=3";
  o.given.comm_model = "1e-5,1e-9";
  o.given.compute_model = {"1e-4,1e-3"};
  o.given.time_limit = "0.5";
  o.given.prefetch = "3";
  o.given.allreduce = "mpi";
  parse_option_texts(o);
  ASSERT_TRUE(o.induce.has_value());
  EXPECT_EQ(o.induce->name, "niagara");
  EXPECT_DOUBLE_EQ(o.slowdown.factor_for(2), 3.0);
  ASSERT_TRUE(o.comm_model.has_value());
  EXPECT_DOUBLE_EQ(o.comm_model->alpha, 1e-5);
  ASSERT_TRUE(o.compute_model.for_rank(7).has_value());
  EXPECT_DOUBLE_EQ(o.compute_model.for_rank(7)->per_batch, 1e-3);
  EXPECT_EQ(o.amb.time_limit, 0.5);
  EXPECT_FALSE(o.amb.auto_time_limit);
  EXPECT_EQ(o.prefetch, 3);
  EXPECT_EQ(o.allreduce, AllreduceVia::kMpi);
  o.given.time_limit = "auto";
  parse_option_texts(o);
  EXPECT_TRUE(o.amb.auto_time_limit);
  EXPECT_FALSE(o.amb.time_limit.has_value());

  struct Bad {
    std::string OptionTexts::*field;
    std::string text;
    std::string flag;
  };
  for (const Bad& bad : {Bad{&OptionTexts::induce, "nonsense", "--induce"},
                         Bad{&OptionTexts::slowdown, "1=0.5", "--slowdown"},
                         Bad{&OptionTexts::comm_model, "1,nan", "--comm-model"},
                         Bad{&OptionTexts::time_limit, "nan", "--time-limit"},
                         Bad{&OptionTexts::time_limit, "-1", "--time-limit"},
                         Bad{&OptionTexts::prefetch, "65", "--prefetch"},
                         Bad{&OptionTexts::allreduce, "ring", "--allreduce"}}) {
    TrainOptions bad_options;
    bad_options.given.*bad.field = bad.text;
    EXPECT_MBKIT_ERROR(parse_option_texts(bad_options), ExitCode::kUsage, bad.flag);
  }
}

}  // namespace
}  // namespace mbkit::train
