#include "mbkit/backend/factory.hpp"

#include <cstdlib>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/cuda_plugin.hpp"
#include "mbkit/backend/device.hpp"
#include "mbkit/config.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {

std::vector<std::string> available_backends() {
  // libmbkit-cuda has the CUDA backend's kernels, but a Network still keeps its parameters,
  // gradients and state in host memory, which GPU kernels cannot read: "cuda" joins this list
  // when networks keep them in the backend's buffers (nn/buffer.hpp).
  return {"cpu"};
}

std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads) {
  if (threads < 0) usage_error(cat("--threads ", threads, " must not be negative"));
  const Device device = parse_device(name);
  if (device.kind == Device::Kind::kCpu) return make_cpu_backend(threads);
  // A GPU was asked for: every check a GPU run will need, in the order a user can act on.
  std::string why_not;
  const CudaPluginApi* cuda = cuda_plugin(&why_not);
  if (cuda == nullptr) usage_error(cat("--device ", device.text(), ": CUDA backend ", why_not));
  const int gpu = choose_gpu(device, local_rank_from_environment(), cuda->device_count(),
                             std::getenv("CUDA_VISIBLE_DEVICES"));
  usage_error(cat("--device ", device.text(), ": GPU ", gpu,
                  " is there and this mbkit's CUDA backend has its kernels, but networks still "
                  "keep their parameters in host memory, so it cannot train yet; use --device cpu "
                  "(available: ",
                  join(available_backends(), ", "), ")"));
}

}  // namespace mbkit::backend
