// NCCL in libmbkit-cuda, as the plugin exports it (mbkit/plugin/cuda_plugin.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "mbkit/plugin/cuda_plugin.hpp"

namespace mbkit::nn {
class Backend;
}
namespace mbkit::comm {
class DeviceAllreduce;
}
namespace mbkit::bench {
class DeviceBench;
}

namespace mbkit::backend::cuda {

/// "2.28.9"; empty when built without NCCL.
std::string nccl_version();
/// A new ncclUniqueId into plugin::kNcclIdBytes bytes.
void nccl_unique_id(std::uint8_t* id);
/// See mbkit_cuda_make_nccl_allreduce (mbkit/comm/device_allreduce.hpp).
comm::DeviceAllreduce* make_nccl_allreduce(nn::Backend& backend, const std::uint8_t* id, int ranks,
                                           int rank, double timeout);
/// See mbkit_cuda_make_device_bench (mbkit/bench/device_bench.hpp).
bench::DeviceBench* make_device_bench(nn::Backend& backend, const std::uint8_t* nccl_id, int ranks,
                                      int rank, double timeout);

}  // namespace mbkit::backend::cuda
