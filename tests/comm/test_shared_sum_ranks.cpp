// The shared-memory sum on several ranks: run under `mpirun -n 3` by
// tests/e2e/test_distributed.py (alone, there is nothing to share and the tests are skipped).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mbkit/comm/allreduce_trial.hpp"
#include "mbkit/comm/shared_sum.hpp"
#include "mbkit/comm/world.hpp"
#include "test_helpers.hpp"

namespace mbkit::comm {
namespace {

// A value no two (rank, index, call) share, with a fraction, so that float sums depend on
// their order.
float value_of(int rank, std::size_t index, int call) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) << 40) ^ (index * 0x9e3779b97f4a7c15ULL) ^
                    static_cast<std::uint64_t>(call) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 32;
  return static_cast<float>(static_cast<double>(x % 2000003) / 997.0 - 1000.0);
}

std::uint64_t digest(const std::vector<float>& values) {
  std::uint64_t h = 1469598103934665603ULL;
  for (float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    h = (h ^ bits) * 1099511628211ULL;
  }
  return h;
}

TEST(OnRanks, SharedSumAddsInRankOrderAndEveryRankGetsTheSameBits) {
  const World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  ASSERT_TRUE(SharedSum::possible(world));
  // Sizes below, at and above a segment per rank, not multiples of a cache line or a block.
  for (const std::size_t floats : {std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{48},
                                   std::size_t{3073}, std::size_t{100003}}) {
    SharedSum shared(world, floats);
    ASSERT_EQ(shared.buffer().size(), floats);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(shared.buffer().data()) % 64, 0u);
    for (int call = 0; call < 3; ++call) {  // the phase counters move on between calls
      for (std::size_t i = 0; i < floats; ++i) shared.buffer()[i] = value_of(world.rank(), i, call);
      EXPECT_GE(shared.sum("test"), 0.0);
      std::vector<float> got(shared.buffer().begin(), shared.buffer().end());
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < floats; ++i) {
        float expected = value_of(0, i, call);  // ((v0 + v1) + v2), in float
        expected += value_of(1, i, call);
        expected += value_of(2, i, call);
        if (std::memcmp(&expected, &got[i], sizeof expected) != 0) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << floats << " floats, call " << call;
      const auto digests = world.all_gather(digest(got));
      EXPECT_EQ(digests[0], digests[1]);
      EXPECT_EQ(digests[0], digests[2]);
    }
  }
}

TEST(OnRanks, SharedSumReportsTheWaitForALateRank) {
  const World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  SharedSum shared(world, 1000);
  std::fill(shared.buffer().begin(), shared.buffer().end(), 1.0f);
  if (world.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double waited = shared.sum("test");
  if (world.rank() != 2) {
    EXPECT_GT(waited, 0.1);
  }
  for (float v : shared.buffer()) ASSERT_EQ(v, 3.0f);
}

// --allreduce auto decides on these figures: every rank must see the same ones, or ranks
// would pick different sums and deadlock.
TEST(OnRanks, AllreduceTrialGivesEveryRankTheSameFigures) {
  const World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  // Rank 1 is slow to arrive: the barrier before each timed sum keeps its lateness out.
  if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const AllreduceTrial trial = time_allreduce_sums(world, 20000, 3);
  EXPECT_EQ(trial.rounds, 3);
  EXPECT_GT(trial.shared_memory_seconds, 0.0);
  EXPECT_GT(trial.mpi_seconds, 0.0);
  EXPECT_LT(trial.shared_memory_seconds, 5.0);  // seconds, not garbage
  EXPECT_LT(trial.mpi_seconds, 5.0);
  std::uint64_t bits[2];
  std::memcpy(&bits[0], &trial.shared_memory_seconds, sizeof bits[0]);
  std::memcpy(&bits[1], &trial.mpi_seconds, sizeof bits[1]);
  const auto first = world.all_gather(bits[0]);
  const auto second = world.all_gather(bits[1]);
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_EQ(first[rank], first[0]) << "rank " << rank;
    EXPECT_EQ(second[rank], second[0]) << "rank " << rank;
  }
}

}  // namespace
}  // namespace mbkit::comm
