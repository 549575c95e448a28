// The entry point of libmbkit-cuda (see mbkit/backend/cuda_plugin.hpp).
#include "mbkit/backend/cuda/backend.hpp"
#include "mbkit/backend/cuda/info.hpp"
#include "mbkit/backend/cuda/nccl.hpp"
#include "mbkit/backend/cuda_plugin.hpp"

namespace {

mbkit::nn::Backend* make_backend(int gpu, int precision) {
  return mbkit::backend::cuda::make_cuda_backend(gpu, static_cast<mbkit::nn::Precision>(precision))
      .release();
}

}  // namespace

extern "C" const mbkit::backend::CudaPluginApi* mbkit_cuda_plugin() {
  static const mbkit::backend::CudaPluginApi api{
      .abi = mbkit::backend::kCudaPluginAbi,
      .library_versions = &mbkit::backend::cuda_library_versions,
      .device_count = &mbkit::backend::cuda_device_count,
      .make_backend = &make_backend,
      .nccl_version = &mbkit::backend::cuda::nccl_version,
      .nccl_unique_id = &mbkit::backend::cuda::nccl_unique_id,
      .make_nccl_allreduce = &mbkit::backend::cuda::make_nccl_allreduce,
      .round_to_bf16 = &mbkit::backend::cuda::round_to_bf16_on_gpu,
      .make_device_bench = &mbkit::backend::cuda::make_device_bench,
  };
  return &api;
}
