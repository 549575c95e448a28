// A CPU run never maps the CUDA libraries: the CUDA side is a plugin opened on demand
// (plugin/plugin_loader). The plugin's own tests are in tests/backend/test_cuda_plugin.cpp.
#include <gtest/gtest.h>

#include <string>

#include "test_helpers.hpp"

namespace mbkit {
namespace {

// No util test asks for CUDA (the plugin tests are in the backend binary), so whatever order
// the binary runs its tests in, nothing has opened the plugin yet.
TEST(CudaPlugin, CudaLibrariesAreNotLoadedUntilAsked) {
  const std::string maps = test::mapped_files();
  EXPECT_EQ(maps.find("libcublas"), std::string::npos);
  EXPECT_EQ(maps.find("libcudnn"), std::string::npos);
  EXPECT_EQ(maps.find("libmbkit-cuda"), std::string::npos);
}

}  // namespace
}  // namespace mbkit
