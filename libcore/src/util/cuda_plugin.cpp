// The entry point of libmbkit-cuda (see mbkit/util/gpu_plugin.hpp).
#include "mbkit/util/cuda_info.hpp"
#include "mbkit/util/gpu_plugin.hpp"

extern "C" const mbkit::CudaPluginApi* mbkit_cuda_plugin() {
  static const mbkit::CudaPluginApi api{
      .abi = mbkit::kCudaPluginAbi,
      .library_versions = &mbkit::cuda_library_versions,
      .device_count = &mbkit::cuda_device_count,
  };
  return &api;
}
