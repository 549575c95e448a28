// NCCL in libmbkit-cuda, as the plugin exports it (mbkit/backend/cuda_plugin.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "mbkit/backend/cuda_plugin.hpp"

namespace mbkit::nn {
class Backend;
}
namespace mbkit::bench {
class DeviceBench;
}

namespace mbkit::backend::cuda {

/// "2.28.9"; empty when built without NCCL.
std::string nccl_version();
/// A new ncclUniqueId into kNcclIdBytes bytes.
void nccl_unique_id(std::uint8_t* id);
/// See CudaPluginApi::make_nccl_allreduce.
comm::DeviceAllreduce* make_nccl_allreduce(nn::Backend& backend, const std::uint8_t* id, int ranks,
                                           int rank, double timeout);
/// See CudaPluginApi::make_device_bench.
bench::DeviceBench* make_device_bench(nn::Backend& backend, const std::uint8_t* nccl_id, int ranks,
                                      int rank, double timeout);

}  // namespace mbkit::backend::cuda
