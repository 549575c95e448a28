// The CUDA side is a plugin: the core never maps the CUDA libraries until asked, and a build
// without CUDA says so instead of failing.
#include <gtest/gtest.h>

#include <string>

#include "test_helpers.hpp"

#include "mbkit/backend/cuda_plugin.hpp"
#include "mbkit/config.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::backend {
namespace {

TEST(CudaPlugin, LoadsWhenBuiltAndExplainsWhenNot) {
  std::string why_not;
  const CudaPluginApi* plugin = cuda_plugin(&why_not);
#if MBKIT_HAVE_CUDA
  ASSERT_NE(plugin, nullptr) << why_not;
  EXPECT_EQ(plugin->abi, kCudaPluginAbi);
  EXPECT_GE(plugin->device_count(), 0);  // 0 on a machine without a driver, not an error
  bool has_cudnn = false;
  for (const auto& [library, version] : plugin->library_versions()) {
    if (library == "cuDNN") has_cudnn = !version.empty();
  }
  EXPECT_TRUE(has_cudnn);
  EXPECT_NE(test::mapped_files().find("libmbkit-cuda"), std::string::npos);
  EXPECT_EQ(cuda_plugin(), plugin);  // loaded once
#else
  EXPECT_EQ(plugin, nullptr);
  EXPECT_NE(why_not.find("-DMBKIT_CUDA=ON"), std::string::npos) << why_not;
#endif
}

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
