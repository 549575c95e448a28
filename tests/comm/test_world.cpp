// comm::World on a single process (no launcher): collectives are no-ops that keep the values,
// waits yield and time out with a communication error naming what was waited for and the
// ranks, and rank lists read as English. The multi-rank behaviour is tested end to end under
// mpirun (tests/e2e/test_distributed.py).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::comm {
namespace {

TEST(RankList, ReadsAsEnglish) {
  EXPECT_EQ(rank_list({}), "");
  EXPECT_EQ(rank_list({3}), "3");
  EXPECT_EQ(rank_list({0, 2}), "0 and 2");
  EXPECT_EQ(rank_list({1, 2, 5}), "1, 2 and 5");
}

TEST(World, SingleProcessCollectivesKeepTheValues) {
  ASSERT_FALSE(launched_by_mpi()) << "run this test without mpirun";
  World world;
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_EQ(world.local_rank(), 0);
  EXPECT_EQ(world.local_size(), 1);
  EXPECT_FALSE(world.distributed());
  std::vector<float> values = {1.5f, -2.0f};
  world.allreduce_sum(values);
  world.reduce_sum(values, 0);
  world.broadcast(values, 0);
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(world.all_gather(std::uint64_t{42}), (std::vector<std::uint64_t>{42}));
  EXPECT_EQ(world.all_gather(std::string("host-a")), (std::vector<std::string>{"host-a"}));
  world.rendezvous("nothing to wait for");
}

TEST(World, WaitTimesOutNamingWhatAndWho) {
  World world;
  world.set_timeout(0.05);
  const auto start = std::chrono::steady_clock::now();
  try {
    world.wait_until([] { return false; }, "gradients of step 7",
                     [] {
                       return std::vector<int>{2, 4};
                     });
    FAIL() << "no timeout";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kCommunication);
    const std::string message = error.what();
    EXPECT_NE(message.find("gradients of step 7"), std::string::npos) << message;
    EXPECT_NE(message.find("--comm-timeout"), std::string::npos) << message;
    EXPECT_NE(message.find("ranks 2 and 4 do not answer"), std::string::npos) << message;
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 5.0);
}

TEST(World, WaitReturnsOnceDone) {
  World world;
  int polls = 0;
  world.wait_until([&] { return ++polls == 5; }, "five polls");
  EXPECT_EQ(polls, 5);
}

}  // namespace
}  // namespace mbkit::comm

namespace mbkit::train {
namespace {

TEST(FinishGradient, ScalesOnlyWhenTheTotalDiffers) {
  // Gradients were scaled by 1 / nominal: the result must be sum / total.
  std::vector<float> gradients = {6.0f, -3.0f};  // sums 192 and -96 over a nominal 32
  finish_gradient(gradients, 32, 32);
  EXPECT_EQ(gradients, (std::vector<float>{6.0f, -3.0f}));
  finish_gradient(gradients, 32, 24);  // 24 samples were done: 192 / 24 = 8
  EXPECT_FLOAT_EQ(gradients[0], 8.0f);
  EXPECT_FLOAT_EQ(gradients[1], -4.0f);
}

TEST(SyncExchange, SingleProcessCombinesItsOwnReport) {
  comm::World world;
  SyncExchange exchange(world, true);  // ps needs 2 ranks: alone it is a local run
  EXPECT_FALSE(exchange.parameter_server());
  EXPECT_TRUE(exchange.computes());
  std::vector<float> gradients = {2.0f};
  std::vector<float> state = {0.5f};
  WorkerReport report;
  report.samples = 10;
  report.loss_sum = 4.0;
  report.correct = 7;
  const auto combined = exchange.combine(gradients, state, report, 0, 20);
  EXPECT_EQ(combined.samples, 10);
  EXPECT_DOUBLE_EQ(combined.loss_sum, 4.0);
  EXPECT_EQ(combined.correct, 7);
  ASSERT_EQ(combined.workers.size(), 1u);
  EXPECT_FLOAT_EQ(gradients[0], 4.0f);  // scaled for 20, only 10 done
  EXPECT_FLOAT_EQ(state[0], 0.5f);
  EXPECT_EQ(exchange.distribute(gradients, state, kFinished, 1), kFinished);
}

}  // namespace
}  // namespace mbkit::train
