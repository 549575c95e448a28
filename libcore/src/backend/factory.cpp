#include "mbkit/backend/factory.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/device.hpp"
#include "mbkit/config.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu"};
  // "cuda" where libmbkit-cuda loads and sees a GPU. This opens the plugin: nothing on a CPU
  // run's path calls it (only messages, tests and shell completion).
  if (!plugin::gpu_driver_present()) return names;
  const plugin::CudaPluginApi* cuda = plugin::cuda_plugin();
  if (cuda != nullptr && cuda->device_count() > 0) names.push_back("cuda");
  return names;
}

namespace {

std::mutex registry_mutex;
std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> factories;
  return factories;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  const std::lock_guard lock(registry_mutex);
  registry()[name] = std::move(factory);
}

namespace {

// The CPU backend (and the test backends registered over it) compute in fp32 only: oneDNN's
// bf16 paths need AVX-512 BF16 or AMX, and TF32 is a GPU format.
void refuse_on_host(const std::string& name, nn::Precision precision) {
  if (precision == nn::Precision::kFp32) return;
  usage_error(cat("--precision ", nn::precision_name(precision), ": --device ", name,
                  " computes in fp32 only (tf32 and bf16 need --device cuda)"));
}

}  // namespace

void check_precision(const std::string& name, nn::Precision precision) {
  if (name == "cpu") refuse_on_host(name, precision);
}

std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads,
                                          nn::Precision precision) {
  if (threads < 0) usage_error(cat("--threads ", threads, " must not be negative"));
  {
    const std::lock_guard lock(registry_mutex);
    const auto found = registry().find(name);
    if (found != registry().end()) {
      refuse_on_host(name, precision);
      return found->second(threads);
    }
  }
  const Device device = parse_device(name);
  if (device.kind == Device::Kind::kCpu) {
    refuse_on_host(name, precision);
    return make_cpu_backend(threads);
  }
  // A GPU was asked for: every check a GPU run will need, in the order a user can act on.
  std::string why_not;
  const plugin::CudaPluginApi* cuda = plugin::cuda_plugin(&why_not);
  if (cuda == nullptr) usage_error(cat("--device ", device.text(), ": CUDA backend ", why_not));
  const int gpu = choose_gpu(device, local_rank_from_environment(), cuda->device_count(),
                             std::getenv("CUDA_VISIBLE_DEVICES"));
  // --threads is the CPU backend's: a GPU backend runs its host side on the calling thread.
  const auto make_cuda_backend = cuda_backend_maker();
  MBKIT_CHECK(make_cuda_backend != nullptr, "libmbkit-cuda defines no mbkit_cuda_make_backend");
  return std::unique_ptr<nn::Backend>(make_cuda_backend(gpu, static_cast<int>(precision)));
}

decltype(&mbkit_cuda_make_backend) cuda_backend_maker() {
  return MBKIT_CUDA_PLUGIN_FUNCTION(mbkit_cuda_make_backend);
}

}  // namespace mbkit::backend
