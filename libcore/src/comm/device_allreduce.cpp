#include "mbkit/comm/device_allreduce.hpp"

#include <array>
#include <cstdint>
#include <span>

#include "mbkit/comm/world.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::comm {

std::array<std::uint8_t, plugin::kNcclIdBytes> share_nccl_id(const World& world,
                                                             const std::string& flag) {
  std::string why_not;
  const plugin::CudaPluginApi* cuda = plugin::cuda_plugin(&why_not);
  if (cuda == nullptr) usage_error(cat(flag, ": CUDA backend ", why_not));
  if (cuda->nccl_version().empty()) {
    usage_error(cat(flag, ": this mbkit was built without NCCL (nccl.h was not found)"));
  }
  // Rank 0 makes the id; MPI only carries it.
  std::array<std::uint8_t, plugin::kNcclIdBytes> id{};
  if (world.rank() == 0) cuda->nccl_unique_id(id.data());
  world.broadcast(std::span<std::uint8_t>(id), 0);
  return id;
}

std::unique_ptr<DeviceAllreduce> make_nccl_allreduce(const World& world, nn::Backend& backend) {
  const auto id = share_nccl_id(world, "--allreduce nccl");
  const auto make_sum = cuda_nccl_allreduce_maker();
  MBKIT_CHECK(make_sum != nullptr, "libmbkit-cuda defines no mbkit_cuda_make_nccl_allreduce");
  std::unique_ptr<DeviceAllreduce> sum(
      make_sum(backend, id.data(), world.size(), world.rank(), world.timeout()));
  // Joining is collective: a rank that never joins is found by the wait's deadline (and named).
  try {
    world.wait_until([&] { return sum->ready(); }, "setting up NCCL (ncclCommInitRankConfig)");
  } catch (...) {
    sum->abort();
    throw;
  }
  return sum;
}

decltype(&mbkit_cuda_make_nccl_allreduce) cuda_nccl_allreduce_maker() {
  return MBKIT_CUDA_PLUGIN_FUNCTION(mbkit_cuda_make_nccl_allreduce);
}

}  // namespace mbkit::comm
