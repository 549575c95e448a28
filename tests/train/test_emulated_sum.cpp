// The in-process transport of --emulate: add_worker_to_sum lays the hosted workers' gradients,
// state and reports out as SyncExchange's fused buffer and adds them in rank order, with the
// additions of the shared-memory sum (worker 0 of allreduce starts the sum; the ps master's
// zeros start it otherwise); combine() of an in-process exchange then gives the step's totals,
// every worker's report, the mean state and the gradients divided by the samples, as rank 0 of a
// run with a process per worker gets them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::train {
namespace {

constexpr std::size_t kGradients = 37;
constexpr std::size_t kState = 5;
constexpr int kWorkers = 4;

// Values of mixed magnitudes, so that another order of addition changes the bits.
std::vector<float> values(std::size_t n, std::uint64_t stream) {
  Rng rng(11, stream);
  std::vector<float> out(n);
  for (float& x : out) {
    x = static_cast<float>(rng.normal() * std::pow(10.0, rng.uniform() * 6 - 3));
  }
  return out;
}

WorkerReport report_of(int w) {
  WorkerReport r;
  r.samples = 10 + w;
  r.loss_sum = 2.5 * (w + 1);
  r.correct = 3 + w;
  r.compute_time = 0.25 * (w + 1);
  r.sleep_time = 0.5 * w;
  r.micro_batches = 1 + w;
  r.finished_early = w % 2 == 1;
  return r;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

class EmulatedSum : public ::testing::TestWithParam<bool> {};

TEST_P(EmulatedSum, AddsInRankOrderAndCombinesAsRankZero) {
  const bool parameter_server = GetParam();
  std::vector<std::vector<float>> gradients, states;
  for (int w = 0; w < kWorkers; ++w) {
    gradients.push_back(values(kGradients, 2 * w));
    states.push_back(values(kState, 2 * w + 1));
  }
  comm::World world;  // one rank: the in-process exchange moves nothing
  SyncExchange exchange(world, parameter_server);
  exchange.set_in_process(kWorkers, parameter_server);
  std::vector<float> sum(kGradients + exchange.tail_floats(kState), 1e9f);  // garbage first
  if (parameter_server) std::fill_n(sum.begin(), kGradients + kState, 0.0f);
  for (int w = 0; w < kWorkers; ++w) {
    add_worker_to_sum(sum, gradients[w], states[w], report_of(w), w, parameter_server);
  }
  // The shared-memory sum's order: rank 0's buffer (the ps master's zeros), then rank by rank.
  for (std::size_t i = 0; i < kGradients + kState; ++i) {
    const auto value = [&](int w) {
      return i < kGradients ? gradients[w][i] : states[w][i - kGradients];
    };
    float expected = parameter_server ? 0.0f + value(0) : value(0);
    for (int w = 1; w < kWorkers; ++w) expected += value(w);
    ASSERT_TRUE(same_bits(sum[i], expected)) << "float " << i;
  }
  std::vector<float> state(kState);
  const std::int64_t nominal = 40;  // 10 a worker planned; 46 computed
  const std::span<float> all(sum);
  const CombinedStep step = exchange.combine(all.first(kGradients), state, WorkerReport{}, 0,
                                             nominal, all.subspan(kGradients));
  EXPECT_EQ(step.samples, 10 + 11 + 12 + 13);
  EXPECT_EQ(step.correct, 3 + 4 + 5 + 6);
  EXPECT_DOUBLE_EQ(step.loss_sum, 2.5 * (1 + 2 + 3 + 4));
  ASSERT_EQ(step.workers.size(), static_cast<std::size_t>(kWorkers));
  for (int w = 0; w < kWorkers; ++w) {
    const WorkerReport& r = step.workers[static_cast<std::size_t>(w)];
    EXPECT_EQ(r.rank, w + (parameter_server ? 1 : 0));
    EXPECT_EQ(r.samples, report_of(w).samples);
    EXPECT_DOUBLE_EQ(r.compute_time, report_of(w).compute_time);
    EXPECT_DOUBLE_EQ(r.sleep_time, report_of(w).sleep_time);
    EXPECT_EQ(r.micro_batches, report_of(w).micro_batches);
    EXPECT_EQ(r.finished_early, report_of(w).finished_early);
  }
  for (std::size_t i = 0; i < kState; ++i) {
    EXPECT_TRUE(same_bits(state[i], sum[kGradients + i] * (1.0f / kWorkers)));
  }
  // The gradients were scaled for 40 samples; 46 were computed: nominal / total.
  const float factor = static_cast<float>(40.0 / 46.0);
  float expected0 = parameter_server ? 0.0f + gradients[0][0] : gradients[0][0];
  for (int w = 1; w < kWorkers; ++w) expected0 += gradients[w][0];
  EXPECT_TRUE(same_bits(sum[0], expected0 * factor));
}

std::string exchange_name(const ::testing::TestParamInfo<bool>& param) {
  return param.param ? "ps" : "allreduce";
}

INSTANTIATE_TEST_SUITE_P(Exchanges, EmulatedSum, ::testing::Values(true, false), exchange_name);

// --emulate --servers 3: the process plays the three servers, so the sum carries no server
// slots; the step has a /servers row per shard (the shards tile the gradients, each gets every
// worker's values) and the workers are ranks 3 and up.
TEST(EmulatedSumLayout, SeveralServersReportAShardEach) {
  constexpr int kServers = 3;
  comm::World world;
  SyncExchange exchange(world, true, AllreduceVia::kMpi, kServers);
  exchange.set_in_process(kWorkers, true);
  EXPECT_EQ(exchange.tail_floats(kState),
            kState + static_cast<std::size_t>(kWorkers) * report_slot_floats(true));
  std::vector<float> sum(kGradients + exchange.tail_floats(kState), 0.0f);
  for (int w = 0; w < kWorkers; ++w) {
    add_worker_to_sum(sum, values(kGradients, 2 * w), values(kState, 2 * w + 1), report_of(w), w,
                      true);
  }
  std::vector<float> state(kState);
  const std::span<float> all(sum);
  const CombinedStep step =
      exchange.combine(all.first(kGradients), state, WorkerReport{}, 0, 0, all.subspan(kGradients));
  ASSERT_EQ(step.servers.size(), static_cast<std::size_t>(kServers));
  std::int64_t floats = 0;
  for (int s = 0; s < kServers; ++s) {
    const ServerReport& r = step.servers[static_cast<std::size_t>(s)];
    const auto [first, last] = server_shard(kGradients, s, kServers);
    EXPECT_EQ(r.rank, s);
    EXPECT_EQ(r.floats, static_cast<std::int64_t>(last - first));
    EXPECT_EQ(r.bytes_received, r.floats * static_cast<std::int64_t>(sizeof(float)) * kWorkers);
    EXPECT_EQ(r.recv_time, 0.0);
    EXPECT_EQ(r.send_time, 0.0);
    floats += r.floats;
  }
  EXPECT_EQ(floats, static_cast<std::int64_t>(kGradients));
  ASSERT_EQ(step.workers.size(), static_cast<std::size_t>(kWorkers));
  for (int w = 0; w < kWorkers; ++w)
    EXPECT_EQ(step.workers[static_cast<std::size_t>(w)].rank, w + kServers);
}

TEST(EmulatedSumLayout, AWorkerOutsideTheSumIsRefused) {
  std::vector<float> sum(kGradients + kState + 2 * report_slot_floats(true));
  const std::vector<float> g(kGradients), s(kState);
  EXPECT_ANY_THROW(add_worker_to_sum(sum, g, s, WorkerReport{}, 2, true));
}

}  // namespace
}  // namespace mbkit::train
