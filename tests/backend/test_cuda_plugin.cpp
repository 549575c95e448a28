// The CUDA side is a plugin: the core never maps the CUDA libraries until asked, and a build
// without CUDA says so instead of failing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "test_helpers.hpp"

#include "mbkit/backend/factory.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/config.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::backend {
namespace {

TEST(CudaPluginDeathTest, ListingBackendsWithoutADriverMapsNoCudaLibrary) {
  // Every test program lists its backends as it starts (the parity suites' parameters): where
  // no driver is installed that must not map cuDNN and cuBLAS (seconds of page faults). The
  // check runs in a fresh run of this program ("threadsafe" death tests start it again), as it
  // is after start-up, before any test loads the plugin on purpose.
  if (plugin::gpu_driver_present()) GTEST_SKIP() << "the NVIDIA driver is installed here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool only_cpu = available_backends() == std::vector<std::string>{"cpu"};
        const std::string mapped = test::mapped_files();
        const bool mapped_cuda = mapped.find("libmbkit-cuda") != std::string::npos ||
                                 mapped.find("libcudnn") != std::string::npos;
        std::exit(only_cpu && !mapped_cuda ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(CudaPlugin, LoadsWhenBuiltAndExplainsWhenNot) {
  std::string why_not;
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin(&why_not);
#if MBKIT_HAVE_CUDA
  ASSERT_NE(plugin, nullptr) << why_not;
  EXPECT_EQ(plugin->abi, plugin::kCudaPluginAbi);
  EXPECT_GE(plugin->device_count(), 0);  // 0 on a machine without a driver, not an error
  bool has_cudnn = false;
  for (const auto& [library, version] : plugin->library_versions()) {
    if (library == "cuDNN") has_cudnn = !version.empty();
  }
  EXPECT_TRUE(has_cudnn);
  EXPECT_NE(test::mapped_files().find("libmbkit-cuda"), std::string::npos);
  EXPECT_EQ(plugin::cuda_plugin(), plugin);  // loaded once
#else
  EXPECT_EQ(plugin, nullptr);
  EXPECT_NE(why_not.find("-DMBKIT_CUDA=ON"), std::string::npos) << why_not;
#endif
}

#if MBKIT_HAVE_CUDA
TEST(CudaPlugin, MakesABackendOnAGpuOrSaysWhichCallFailed) {
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_NE(backend::cuda_backend_maker(), nullptr);
  if (plugin->device_count() > 0) {
    std::unique_ptr<nn::Backend> backend(backend::cuda_backend_maker()(0, 0));
    EXPECT_EQ(backend->description().rfind("cuda:0: ", 0), 0u) << backend->description();
    EXPECT_FALSE(backend->host_accessible());
    for (nn::Op op : {nn::Op::kConv2d, nn::Op::kBatchNorm, nn::Op::kSoftmaxCrossEntropy}) {
      EXPECT_TRUE(backend->supports(op)) << nn::op_name(op);
    }
    EXPECT_EQ(backend->precision(), nn::Precision::kFp32);
    return;
  }
  // No GPU here: the first CUDA call fails, as one mbkit::Error naming it.
  try {
    std::unique_ptr<nn::Backend> backend(backend::cuda_backend_maker()(0, 0));
    ADD_FAILURE() << "a CUDA backend without a GPU";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cudaSetDevice"), std::string::npos) << error.what();
  }
}

TEST(CudaPlugin, NcclEntryPointsRefuseABackendTheyDidNotMake) {
  // ABI 3: NCCL through the plugin. A CPU backend (or any the plugin did not make) has no GPU
  // stream to sum on: a usage error before any NCCL call, so this runs without a GPU.
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_NE(plugin->nccl_version, nullptr);
  ASSERT_NE(plugin->nccl_unique_id, nullptr);
  ASSERT_NE(comm::cuda_nccl_allreduce_maker(), nullptr);
#if MBKIT_HAVE_NCCL
  EXPECT_FALSE(plugin->nccl_version().empty());
#else
  EXPECT_TRUE(plugin->nccl_version().empty());
#endif
  auto cpu = make_backend("cpu", 1);
  std::uint8_t id[plugin::kNcclIdBytes] = {};
  EXPECT_MBKIT_ERROR(comm::cuda_nccl_allreduce_maker()(*cpu, id, 1, 0, 1.0), ExitCode::kUsage,
                     "--allreduce nccl");
  // ABI 6: mb-bench-bandwidth's GPU buffers, with and without NCCL, need a CUDA backend too.
  ASSERT_NE(bench::cuda_device_bench_maker(), nullptr);
  EXPECT_MBKIT_ERROR(bench::cuda_device_bench_maker()(*cpu, id, 1, 0, 1.0), ExitCode::kUsage,
                     "--device");
  EXPECT_MBKIT_ERROR(bench::cuda_device_bench_maker()(*cpu, nullptr, 1, 0, 1.0), ExitCode::kUsage,
                     "--device");
}

// The precision travels through the plugin (ABI 4): the backend computes at it, says so in its
// description, or (a GPU before Ampere) refuses it with a usage error naming --precision.
TEST(CudaPlugin, MakesABackendAtEachPrecision) {
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_NE(plugin->round_to_bf16, nullptr);
  const float one = 1.0f;
  std::uint16_t bits = 0;
  if (plugin->device_count() == 0) {
    // Without a GPU the cast's first CUDA call fails, as one mbkit::Error naming it.
    try {
      plugin->round_to_bf16(0, &one, &bits, 1);
      ADD_FAILURE() << "a bf16 cast without a GPU";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("cudaSetDevice"), std::string::npos) << error.what();
    }
    return;
  }
  plugin->round_to_bf16(0, &one, &bits, 1);
  EXPECT_EQ(bits, 0x3f80);
  for (nn::Precision precision : {nn::Precision::kTf32, nn::Precision::kBf16}) {
    try {
      std::unique_ptr<nn::Backend> backend(
          backend::cuda_backend_maker()(0, static_cast<int>(precision)));
      EXPECT_EQ(backend->precision(), precision);
      EXPECT_TRUE(backend->description().ends_with(nn::precision_name(precision)))
          << backend->description();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kUsage) << error.what();
      EXPECT_NE(std::string(error.what()).find("--precision"), std::string::npos) << error.what();
    }
  }
}
#endif

TEST(CudaPlugin, VersionListingHasOneCudaLine) {
  int cuda_lines = 0;
  for (const auto& [library, version] : mbkit::library_versions()) {
    if (library == "CUDA") {
      ++cuda_lines;
      EXPECT_FALSE(version.empty());
    }
  }
  EXPECT_EQ(cuda_lines, 1);
}

}  // namespace
}  // namespace mbkit::backend
