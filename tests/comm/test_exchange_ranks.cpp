// The synchronous exchanges on several ranks: run under `mpirun -n 3` by
// tests/e2e/test_distributed.py (alone, the test has no ranks to exchange with and is skipped).
// Gradients and per-step values sent as one message (a tail after the gradients) give exactly
// what two messages give, and both give the sums worked out by hand. Values are small integers,
// so every sum is exact whatever order MPI adds in (buckets too).
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "mbkit/comm/compression.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/util/error.hpp"
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

// Buckets (--bucket-mb): the backward pass hands over its gradients from the end in parts; a
// sum starts whenever the parts not yet started hold a bucket, and combine() sums the rest.
// Whatever the bucket size, every rank ends with exactly the one-sum result, over three steps
// in a row (nothing of a step's buckets is left for the next).
TEST(OnRanks, BucketsGiveTheOneSumResult) {
  const comm::World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  constexpr std::size_t kCount = 1000;
  const std::vector<std::size_t> parts = {900, 700, 650, 300, 0};  // as layers finish
  const int r = world.rank();
  const std::vector<float> state_in = {static_cast<float>(r), static_cast<float>(2 * r)};
  auto gradient_of = [&](int step, std::size_t i) {
    return static_cast<float>((r + 1) * static_cast<int>(i % 97 + 1) + step);
  };
  // The one-sum results of each step.
  std::vector<std::vector<float>> expected;
  {
    SyncExchange exchange(world, false, AllreduceVia::kMpi);
    std::vector<float> buffer(kCount + exchange.tail_floats(state_in.size()));
    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = 0; i < kCount; ++i) buffer[i] = gradient_of(step, i);
      std::vector<float> state = state_in;
      WorkerReport report;
      report.samples = 10 + r;
      exchange.combine(std::span<float>(buffer).first(kCount), state, report, step, 33,
                       std::span<float>(buffer).subspan(kCount));
      expected.emplace_back(buffer.begin(), buffer.begin() + kCount);
    }
  }
  // bucket size -> sums started while the parts came in
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {
      {1, 5}, {150, 3}, {400, 1}, {5000, 0}};
  for (const auto& [bucket, started] : cases) {
    for (const bool fused : {true, false}) {
      SyncExchange exchange(world, false, AllreduceVia::kMpi);
      exchange.set_bucket_floats(bucket);
      ASSERT_TRUE(exchange.buckets());
      std::vector<float> buffer(kCount + exchange.tail_floats(state_in.size()));
      const std::span<float> gradients = std::span<float>(buffer).first(kCount);
      for (int step = 0; step < 3; ++step) {
        for (std::size_t i = 0; i < kCount; ++i) gradients[i] = gradient_of(step, i);
        for (const std::size_t from : parts) exchange.gradients_ready(gradients, from);
        EXPECT_EQ(exchange.started_sums(), started) << "bucket " << bucket;
        std::vector<float> state = state_in;
        WorkerReport report;
        report.samples = 10 + r;
        const CombinedStep combined =
            exchange.combine(gradients, state, report, step, 33,
                             fused ? std::span<float>(buffer).subspan(kCount) : std::span<float>());
        EXPECT_EQ(exchange.started_sums(), 0u);
        EXPECT_EQ(std::vector<float>(gradients.begin(), gradients.end()),
                  expected[static_cast<std::size_t>(step)])
            << "bucket " << bucket << " fused " << fused << " step " << step;
        EXPECT_EQ(state, (std::vector<float>{1.0f, 2.0f}));
        EXPECT_EQ(combined.samples, 33);
      }
    }
  }
  // ps and the shared-memory sum have no buckets.
  SyncExchange ps(world, true, AllreduceVia::kMpi);
  EXPECT_THROW(ps.set_bucket_floats(100), mbkit::Error);
  SyncExchange shared(world, false, AllreduceVia::kSharedMemory);
  EXPECT_THROW(shared.set_bucket_floats(100), mbkit::Error);
}

// --compress: rank r sends (r+1)(i+1) at every step, 2bit with T = 2.5 (by hand: rank 0 sends
// 0 0 T T T and keeps 1 2 .5 1.5 2.5; rank 1 0 T T T T, keeps 2 1.5 3.5 5.5 7.5; rank 2 T T T T T,
// keeps .5 3.5 6.5 9.5 12.5; at the second step rank 0's residual lifts its first value but one
// over T, rank 1's all), and fp16 (small integers: exact). Every rank gets the same sums.
std::vector<std::vector<float>> compressed_steps(const comm::World& world, bool parameter_server,
                                                 const std::string& compress, int steps) {
  SyncExchange exchange(world, parameter_server, AllreduceVia::kMpi);
  exchange.set_compression(comm::parse_compression(compress));
  const int r = world.rank();
  std::vector<std::vector<float>> sums;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> state = {0.0f};
    std::vector<float> gradients(kParameters);
    for (std::size_t i = 0; i < kParameters; ++i)
      gradients[i] = static_cast<float>((r + 1) * static_cast<int>(i + 1));
    WorkerReport report;
    report.samples = 10 + r;  // totals 23 (ps: ranks 1 and 2) or 33: the nominal
    exchange.combine(gradients, state, report, step, parameter_server ? 23 : 33);
    sums.push_back(gradients);
  }
  return sums;
}

TEST(OnRanks, CompressedSumsAreTheHandQuantisedOnes) {
  const comm::World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  using V = std::vector<float>;
  EXPECT_EQ(compressed_steps(world, false, "2bit:2.5", 2),
            (std::vector<V>{{2.5f, 5, 7.5f, 7.5f, 7.5f}, {5, 7.5f, 7.5f, 7.5f, 7.5f}}));
  EXPECT_EQ(compressed_steps(world, false, "fp16", 1), (std::vector<V>{{6, 12, 18, 24, 30}}));
  EXPECT_EQ(compressed_steps(world, false, "bf16", 1), (std::vector<V>{{6, 12, 18, 24, 30}}));
  // ps: ranks 1 and 2 are the workers; the master holds the sum, workers their own gradient.
  const auto ps = compressed_steps(world, true, "2bit:2.5", 2);
  if (world.rank() == 0) {
    EXPECT_EQ(ps, (std::vector<V>{{2.5f, 5, 5, 5, 5}, {5, 5, 5, 5, 5}}));
  } else {
    const float k = static_cast<float>(world.rank() + 1);
    EXPECT_EQ(ps[1], (V{k, 2 * k, 3 * k, 4 * k, 5 * k}));
  }
  const auto ps16 = compressed_steps(world, true, "fp16", 1);
  if (world.rank() == 0) {
    EXPECT_EQ(ps16, (std::vector<V>{{5, 10, 15, 20, 25}}));
  }
}

}  // namespace
}  // namespace mbkit::train
