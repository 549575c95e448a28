// Buffers of messages still pending when their owner goes away (mbkit/comm/in_flight.hpp), on
// several ranks: run under `mpirun -n 3` by tests/e2e/test_distributed.py (alone, there is no
// peer and the test is skipped).
//
// Ranks 1 and 2 are asynchronous workers of rank 0. Each destroys its AsyncWorker, as an error
// unwinding it would, with its receive of parameters posted and a 4 MiB gradient being sent
// (too large to go out eagerly: the master has posted no receive yet). Only then does the
// master take the gradients and send parameters. The gradient must arrive intact (its buffer
// was kept), and the parameters must not land in the destroyed worker's buffer (its receive
// was cancelled): a block of the same size allocated after the destruction keeps its bytes,
// and a receive posted afresh gets the message.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "mbkit/comm/in_flight.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "test_helpers.hpp"

namespace mbkit::comm {
namespace {

constexpr std::size_t kParameters = std::size_t{1} << 20;  // 4 MiB of floats
constexpr int kGradientTag = 12;                           // exchange_internal.hpp's tags
constexpr int kParametersTag = 13;
constexpr std::size_t kParametersHeader = 2 * sizeof(double);  // ParametersHeader

float gradient_value(int rank, std::size_t i) {
  return static_cast<float>(rank * 1000003 + static_cast<int>(i % 65521));
}

// Polls `request` for at most two seconds (a message that went elsewhere never comes); a
// request still pending then is cancelled.
bool completes(const World& world, Request& request, std::size_t* bytes = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (world.test(request, bytes)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  world.cancel(request);
  return false;
}

TEST(OnRanks, AnExchangeDestroyedWithMessagesPendingLeavesTheirBuffersToMpi) {
  const World& world = test::world_of_ranks();
  if (world.size() != 3) GTEST_SKIP() << "needs mpirun -n 3 (tests/e2e/test_distributed.py)";
  const int rank = world.rank();
  const KeptBuffers before = kept_buffers();
  const std::size_t parameters_bytes = kParametersHeader + kParameters * sizeof(float);

  if (rank == 0) {
    world.barrier();  // the workers' exchanges are gone
    for (int w = 1; w <= 2; ++w) {
      std::vector<unsigned char> gradient(kParameters * sizeof(float) + 1024);
      Request received = world.irecv(gradient.data(), gradient.size(), w, kGradientTag);
      std::size_t bytes = 0;
      ASSERT_TRUE(completes(world, received, &bytes)) << "rank " << w;
      ASSERT_GE(bytes, kParameters * sizeof(float));
      std::vector<float> values(kParameters);
      std::memcpy(values.data(), gradient.data() + bytes - kParameters * sizeof(float),
                  kParameters * sizeof(float));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < kParameters; ++i) wrong += values[i] != gradient_value(w, i);
      EXPECT_EQ(wrong, 0u) << "floats of rank " << w << "'s gradient not as sent";
    }
    std::vector<unsigned char> parameters(parameters_bytes, 0x5A);
    for (int w = 1; w <= 2; ++w) {
      Request sent = world.isend(parameters.data(), parameters.size(), w, kParametersTag);
      EXPECT_TRUE(completes(world, sent)) << "parameters to rank " << w;
    }
  } else {
    {
      train::AsyncWorker exchange(world, kParameters, 0, 1);  // posts its receive
      std::vector<float> gradient(kParameters);
      for (std::size_t i = 0; i < kParameters; ++i) gradient[i] = gradient_value(rank, i);
      exchange.send(gradient, {}, train::WorkerReport{});
    }  // destroyed with the receive posted and the send pending
    const KeptBuffers after = kept_buffers();
    EXPECT_EQ(after.blocks - before.blocks, 1u) << "the gradient's buffer";
    EXPECT_GE(after.bytes - before.bytes, kParameters * sizeof(float));
    EXPECT_EQ(after.requests - before.requests, 1u);
    EXPECT_EQ(after.cancelled_receives - before.cancelled_receives, 1u);
    // Where the destroyed receive's buffer was (a block of its size, freed just now).
    std::vector<unsigned char> scribble(parameters_bytes, 0xEE);
    world.barrier();
    std::vector<unsigned char> parameters(parameters_bytes);
    Request received = world.irecv(parameters.data(), parameters.size(), 0, kParametersTag);
    EXPECT_TRUE(completes(world, received)) << "the parameters went to the destroyed receive";
    EXPECT_EQ(std::count(parameters.begin(), parameters.end(), 0x5A),
              static_cast<std::ptrdiff_t>(parameters_bytes));
    EXPECT_EQ(std::count(scribble.begin(), scribble.end(), 0xEE),
              static_cast<std::ptrdiff_t>(parameters_bytes))
        << "a freed receive buffer was written into";
  }
  world.barrier();
}

}  // namespace
}  // namespace mbkit::comm
