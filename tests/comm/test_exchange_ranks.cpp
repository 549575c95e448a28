// The synchronous exchanges on several ranks: run under `mpirun -n 3` by
// tests/e2e/test_distributed.py (alone, the test has no ranks to exchange with and is skipped).
// Gradients and per-step values sent as one message (a tail after the gradients) give exactly
// what two messages give, and both give the sums worked out by hand. Values are small integers,
// so every sum is exact whatever order MPI adds in.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

constexpr std::size_t kParameters = 5;

struct Outcome {
  std::vector<float> gradients, state;
  CombinedStep combined;
};

// Rank r sends gradient (r+1)*(i+1), state {r, 2r} and r+10 samples.
// `in_window`: with shared memory, the gradients are computed in the exchange's shared buffer
// (as mb-train does) rather than copied in and out.
Outcome exchange_once(const comm::World& world, bool parameter_server, bool fused,
                      std::int64_t nominal, AllreduceVia via = AllreduceVia::kMpi,
                      bool in_window = false) {
  SyncExchange exchange(world, parameter_server, via);
  const int r = world.rank();
  std::vector<float> state = {static_cast<float>(r), static_cast<float>(2 * r)};
  std::vector<float> own(kParameters + exchange.tail_floats(state.size()), -1.0f);
  const std::span<float> buffer = in_window ? exchange.shared_buffer(own.size()) : own;
  const std::span<float> gradients = buffer.first(kParameters);
  for (std::size_t i = 0; i < kParameters; ++i)
    gradients[i] = static_cast<float>((r + 1) * static_cast<int>(i + 1));
  WorkerReport report;
  report.samples = 10 + r;
  report.loss_sum = r + 1;
  report.correct = r;
  const std::span<float> tail = fused ? buffer.subspan(kParameters) : std::span<float>();
  Outcome outcome;
  outcome.combined = exchange.combine(gradients, state, report, 0, nominal, tail);
  outcome.gradients.assign(gradients.begin(), gradients.end());
  outcome.state = state;
  return outcome;
}

TEST(OnRanks, OneMessageEqualsTwoAndTheHandSums) {
  const comm::World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  const int r = world.rank();

  // allreduce: every rank holds sum / total; nominal 33 = 10 + 11 + 12, so no correction.
  for (const std::int64_t nominal : {33, 30}) {
    const Outcome two = exchange_once(world, false, false, nominal);
    const Outcome one = exchange_once(world, false, true, nominal);
    EXPECT_EQ(one.gradients, two.gradients) << "nominal " << nominal;
    EXPECT_EQ(one.state, two.state);
    EXPECT_EQ(one.combined.samples, 33);
    EXPECT_EQ(two.combined.samples, 33);
    EXPECT_DOUBLE_EQ(one.combined.loss_sum, 6.0);
    EXPECT_EQ(one.combined.correct, 3);
    ASSERT_EQ(one.combined.workers.size(), 3u);
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(one.combined.workers[static_cast<std::size_t>(w)].rank, w);
      EXPECT_EQ(one.combined.workers[static_cast<std::size_t>(w)].samples, 10 + w);
    }
    for (std::size_t i = 0; i < kParameters; ++i) {
      // sum over ranks of (r+1)(i+1) = 6(i+1), times nominal / total when they differ
      const float expected = static_cast<float>(6 * (i + 1)) *
                             (nominal == 33 ? 1.0f : static_cast<float>(30.0 / 33.0));
      EXPECT_FLOAT_EQ(one.gradients[i], expected) << i;
    }
    EXPECT_EQ(one.state, (std::vector<float>{1.0f, 2.0f}));  // mean of {r, 2r}
  }

  // ps: the master (rank 0) holds the workers' sum; the workers' buffers are unchanged.
  const Outcome two = exchange_once(world, true, false, 23);
  const Outcome one = exchange_once(world, true, true, 23);
  EXPECT_EQ(one.gradients, two.gradients);
  EXPECT_EQ(one.state, two.state);
  if (r == 0) {
    EXPECT_EQ(one.combined.samples, 23);  // 11 + 12
    ASSERT_EQ(one.combined.workers.size(), 2u);
    EXPECT_EQ(one.combined.workers[0].rank, 1);
    EXPECT_EQ(one.combined.workers[1].rank, 2);
    for (std::size_t i = 0; i < kParameters; ++i)
      EXPECT_EQ(one.gradients[i], static_cast<float>(5 * (i + 1))) << i;  // 2(i+1) + 3(i+1)
    EXPECT_EQ(one.state, (std::vector<float>{1.5f, 3.0f}));               // mean over workers
  } else {
    for (std::size_t i = 0; i < kParameters; ++i)
      EXPECT_EQ(one.gradients[i], static_cast<float>((r + 1) * static_cast<int>(i + 1)));
  }
}

TEST(OnRanks, SharedMemoryEqualsMpiAllreduce) {
  const comm::World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  ASSERT_TRUE(SyncExchange::uses_shared_memory(world, false, AllreduceVia::kAuto));
  EXPECT_FALSE(SyncExchange::uses_shared_memory(world, false, AllreduceVia::kMpi));
  EXPECT_FALSE(SyncExchange::uses_shared_memory(world, true, AllreduceVia::kAuto));  // ps
  for (const std::int64_t nominal : {33, 30}) {
    const Outcome mpi = exchange_once(world, false, true, nominal);
    for (const bool in_window : {true, false}) {
      for (const bool fused : {true, false}) {
        const Outcome shared =
            exchange_once(world, false, fused, nominal, AllreduceVia::kSharedMemory, in_window);
        EXPECT_EQ(shared.gradients, mpi.gradients) << nominal << in_window << fused;
        EXPECT_EQ(shared.state, mpi.state);
        EXPECT_EQ(shared.combined.samples, 33);
        EXPECT_DOUBLE_EQ(shared.combined.loss_sum, 6.0);
        EXPECT_EQ(shared.combined.correct, 3);
        ASSERT_EQ(shared.combined.workers.size(), 3u);
        for (int w = 0; w < 3; ++w)
          EXPECT_EQ(shared.combined.workers[static_cast<std::size_t>(w)].samples, 10 + w);
      }
    }
  }
}

}  // namespace
}  // namespace mbkit::train
