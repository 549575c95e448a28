#include "mbkit/backend/factory.hpp"

#include "mbkit/backend/cpu.hpp"
#include "mbkit/config.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {

std::vector<std::string> available_backends() {
  // The CUDA backend (a later issue) will come from libmbkit-cuda through cuda_plugin(); that
  // library holds only the CUDA version and device queries for now.
  return {"cpu"};
}

std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads) {
  if (threads < 0) usage_error(cat("--threads ", threads, " must not be negative"));
  if (name == "cpu") return make_cpu_backend(threads);
  usage_error(cat("--device: unknown or unavailable backend '", name,
                  "' (available: ", join(available_backends(), ", "), ")"));
}

}  // namespace mbkit::backend
