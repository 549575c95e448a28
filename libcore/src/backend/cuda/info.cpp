#include "mbkit/backend/cuda/info.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "mbkit/config.hpp"
#include "mbkit/util/strings.hpp"
#if MBKIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace mbkit::backend {
namespace {

std::string cuda_version_text(int version) {
  return strprintf("%d.%d", version / 1000, (version % 1000) / 10);
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error: no driver/device is not a failure here
    return 0;
  }
  return count;
}

std::vector<std::pair<std::string, std::string>> cuda_library_versions() {
  std::vector<std::pair<std::string, std::string>> versions;
  int runtime = 0;
  versions.emplace_back("CUDA", cudaRuntimeGetVersion(&runtime) == cudaSuccess
                                    ? "runtime " + cuda_version_text(runtime)
                                    : "runtime unknown");
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    versions.back().second += ", driver " + cuda_version_text(driver);
  } else {
    versions.back().second += ", no driver";
  }
  const auto cudnn = cudnnGetVersion();
  versions.emplace_back(
      "cuDNN", strprintf("%zu.%zu.%zu", cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100));
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    versions.emplace_back("cuBLAS", strprintf("%d.%d.%d", major, minor, patch));
  }
#if MBKIT_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    versions.emplace_back("NCCL",
                          strprintf("%d.%d.%d", nccl / 10000, (nccl % 10000) / 100, nccl % 100));
  }
#endif
  const int devices = cuda_device_count();
  std::string device_text = cat(devices);
  for (int device = 0; device < devices; ++device) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device) == cudaSuccess) {
      device_text += cat(device == 0 ? ": " : ", ", properties.name);
    }
  }
  versions.emplace_back("GPUs", device_text);
  return versions;
}

}  // namespace mbkit::backend
