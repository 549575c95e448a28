// The training engine called in-process (as the tools do, without mpirun): the clock on its
// own, then whole runs of mb-train-fmb and mb-train-amb on a tiny dataset.
#include <gtest/gtest.h>

#include <thread>

#include "mbkit/data/synth.hpp"
#include "mbkit/tools/mb_train.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/run_clock.hpp"
#include "mbkit/util/log.hpp"
#include "test_helpers.hpp"

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

class TrainingRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::world_of_ranks();  // MPI starts once per process and ends at exit
    log::set_level(log::Level::kQuiet);
    data::ToySynthOptions toy;
    toy.train = 96;
    toy.test = 20;
    toy.learnable = true;
    data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
  }
  void TearDown() override { log::set_level(log::Level::kNormal); }

  TrainOptions options(const std::string& checkpoint) const {
    TrainOptions o;
    o.data = dir_.file("toy.h5");
    o.model.name = "mlp";
    o.model.hidden = {8};
    o.optimizer.name = "momentum";
    o.optimizer.momentum = 0.9;
    o.schedule.lr = 0.05;
    o.batch_size = 16;
    o.steps = 8;
    o.threads = 1;
    o.checkpoint = dir_.file(checkpoint);
    return o;
  }

  std::vector<float> parameters(const std::string& checkpoint) const {
    std::vector<float> all;
    for (const auto& array : read_checkpoint(dir_.file(checkpoint)).params) {
      all.insert(all.end(), array.values.begin(), array.values.end());
    }
    return all;
  }

  test::TempDir dir_;
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
  amb.amb.time_limit = "1000";
  ASSERT_EQ(tools::train::run_train_amb(amb), 0);
  EXPECT_EQ(parameters("fmb.h5"), parameters("amb.h5"));
  // Four micro-batches of 4 under a limit that allows one: another gradient each step.
  amb = options("amb4.h5");
  amb.amb.partitions = 4;
  amb.amb.time_limit = "1e-9";
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
  o.amb.time_limit = "1";
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--partitions 32");
  o = options("never.h5");
  o.induce = "nonsense";
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(o), ExitCode::kUsage, "--induce");
  EXPECT_EQ(dir_.entries(), std::vector<std::string>{"toy.h5"});
}

}  // namespace
}  // namespace mbkit::train
