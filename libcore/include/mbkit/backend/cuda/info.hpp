// Versions of the CUDA libraries this build links, and the devices this process can see.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mbkit::backend {

/// (library, version) pairs for CUDA runtime/driver, cuDNN, cuBLAS, NCCL, plus "devices".
std::vector<std::pair<std::string, std::string>> cuda_library_versions();
/// Number of usable CUDA devices; 0 when there is no driver or no device.
int cuda_device_count();

}  // namespace mbkit::backend
