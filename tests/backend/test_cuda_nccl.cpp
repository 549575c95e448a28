// libmbkit-cuda's NCCL sum (--allreduce nccl) on a GPU, one rank, without MPI: the plugin's id,
// a non-blocking communicator set up by polling, sums of buffer ranges queued in buckets and
// polled to completion (a one-rank sum leaves every value as it was, bit for bit), and a
// communicator aborted refusing further sums. Skips, saying why, without a GPU or NCCL; the
// trainers' use of it on one and two ranks is tests/e2e/test_cuda_nccl.py.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/config.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::backend {
namespace {

class CudaNcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why_not;
    plugin_ = plugin::cuda_plugin(&why_not);
    if (plugin_ == nullptr) GTEST_SKIP() << "CUDA backend not run: " << why_not;
    if (plugin_->device_count() == 0) GTEST_SKIP() << "no CUDA GPU is visible to this process";
    if (plugin_->nccl_version().empty()) GTEST_SKIP() << "libmbkit-cuda was built without NCCL";
    gpu_.reset(backend::cuda_backend_maker()(0, 0));
    std::uint8_t id[plugin::kNcclIdBytes] = {};
    plugin_->nccl_unique_id(id);
    sum_.reset(comm::cuda_nccl_allreduce_maker()(*gpu_, id, 1, 0, 30.0));
    ASSERT_TRUE(until([&] { return sum_->ready(); })) << "ncclCommInitRankConfig: 30 s";
  }
  void TearDown() override {
    sum_.reset();  // before the backend whose stream it waits on
    gpu_.reset();
  }

  /// Polls `done` for at most 30 s.
  template <class Done>
  static bool until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
  }

  const plugin::CudaPluginApi* plugin_ = nullptr;
  std::unique_ptr<nn::Backend> gpu_;
  std::unique_ptr<comm::DeviceAllreduce> sum_;
};

TEST_F(CudaNcclGpu, OneRankSumsInBucketsLeaveEveryValue) {
  EXPECT_EQ(sum_->description().rfind("NCCL ", 0), 0u) << sum_->description();
  constexpr std::size_t kFloats = 100003;  // odd: NCCL's chunks do not divide it
  std::vector<float> values(kFloats);
  Rng rng(7);
  for (float& value : values) value = static_cast<float>(rng.normal());
  auto buffer = gpu_->make_buffer(kFloats + 10);
  gpu_->copy_from_host(values, *buffer, 0);
  // From the end backwards, as the backward pass hands them over, then the rest.
  sum_->start(*buffer, 60000, kFloats - 60000);
  ASSERT_TRUE(until([&] { return sum_->ready(); }));
  sum_->start(*buffer, 20000, 40000);
  ASSERT_TRUE(until([&] { return sum_->ready(); }));
  sum_->start(*buffer, 0, 20000);
  ASSERT_TRUE(until([&] { return sum_->poll(); })) << "the sums did not complete in 30 s";
  std::vector<float> after(kFloats);
  gpu_->copy_to_host(*buffer, 0, after);
  for (std::size_t i = 0; i < kFloats; ++i) {
    ASSERT_EQ(after[i], values[i]) << "element " << i;
  }
}

TEST_F(CudaNcclGpu, AnAbortedCommunicatorRefusesSums) {
  auto buffer = gpu_->make_buffer(16);
  sum_->abort();
  sum_->abort();  // twice: harmless
  EXPECT_THROW(sum_->start(*buffer, 0, 16), Error);
  EXPECT_THROW(sum_->poll(), Error);
}

}  // namespace
}  // namespace mbkit::backend
