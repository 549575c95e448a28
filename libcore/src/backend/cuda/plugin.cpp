// The entry points of libmbkit-cuda (see mbkit/plugin/cuda_plugin.hpp): the table of standard
// types, and the functions that make the core modules' objects, which those modules declare.
#include "mbkit/backend/cuda/backend.hpp"
#include "mbkit/backend/cuda/info.hpp"
#include "mbkit/backend/cuda/nccl.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"

extern "C" const mbkit::plugin::CudaPluginApi* mbkit_cuda_plugin() {
  static const mbkit::plugin::CudaPluginApi api{
      .abi = mbkit::plugin::kCudaPluginAbi,
      .library_versions = &mbkit::backend::cuda_library_versions,
      .device_count = &mbkit::backend::cuda_device_count,
      .nccl_version = &mbkit::backend::cuda::nccl_version,
      .nccl_unique_id = &mbkit::backend::cuda::nccl_unique_id,
      .round_to_bf16 = &mbkit::backend::cuda::round_to_bf16_on_gpu,
  };
  return &api;
}

extern "C" mbkit::nn::Backend* mbkit_cuda_make_backend(int gpu, int precision) {
  return mbkit::backend::cuda::make_cuda_backend(gpu, static_cast<mbkit::nn::Precision>(precision))
      .release();
}

extern "C" mbkit::comm::DeviceAllreduce* mbkit_cuda_make_nccl_allreduce(mbkit::nn::Backend& backend,
                                                                        const std::uint8_t* id,
                                                                        int ranks, int rank,
                                                                        double timeout) {
  return mbkit::backend::cuda::make_nccl_allreduce(backend, id, ranks, rank, timeout);
}

extern "C" mbkit::bench::DeviceBench* mbkit_cuda_make_device_bench(mbkit::nn::Backend& backend,
                                                                   const std::uint8_t* nccl_id,
                                                                   int ranks, int rank,
                                                                   double timeout) {
  return mbkit::backend::cuda::make_device_bench(backend, nccl_id, ranks, rank, timeout);
}
