// The entry point of libmbkit-cuda (see mbkit/backend/cuda_plugin.hpp).
#include "mbkit/backend/cuda/info.hpp"
#include "mbkit/backend/cuda_plugin.hpp"

extern "C" const mbkit::backend::CudaPluginApi* mbkit_cuda_plugin() {
  static const mbkit::backend::CudaPluginApi api{
      .abi = mbkit::backend::kCudaPluginAbi,
      .library_versions = &mbkit::backend::cuda_library_versions,
      .device_count = &mbkit::backend::cuda_device_count,
  };
  return &api;
}
