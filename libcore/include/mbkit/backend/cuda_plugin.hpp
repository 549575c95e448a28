// The CUDA side of mbkit lives in its own library, libmbkit-cuda, which the core opens with
// dlopen() the first time something asks for it. CPU runs therefore never load cuBLAS, cuDNN
// or NCCL: merely mapping them costs about 150 MB of resident memory per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mbkit::nn {
class Backend;
}
namespace mbkit::comm {
class DeviceAllreduce;
}
namespace mbkit::bench {
class DeviceBench;
}

namespace mbkit::backend {

/// Bumped whenever CudaPluginApi changes, so that a stale libmbkit-cuda is refused, not called.
/// 2: make_backend. 3: NCCL (nccl_version, nccl_unique_id, make_nccl_allreduce). 4: make_backend's
/// precision, round_to_bf16. 5: nn::Backend's step graphs (begin_capture, end_capture,
/// set_input_fixed) and nn::Kernel's replay hooks (the Backend's and Kernels' vtables changed).
/// 6: make_device_bench (mb-bench-bandwidth --device cuda).
inline constexpr int kCudaPluginAbi = 6;

/// Bytes of NCCL's unique id (NCCL_UNIQUE_ID_BYTES), which the core carries over MPI.
inline constexpr std::size_t kNcclIdBytes = 128;

/// What libmbkit-cuda exports, through its one C entry point `mbkit_cuda_plugin`.
struct CudaPluginApi {
  int abi = kCudaPluginAbi;
  /// (library, version) pairs for the CUDA runtime and driver, cuDNN, cuBLAS, NCCL, and "GPUs".
  std::vector<std::pair<std::string, std::string>> (*library_versions)() = nullptr;
  /// Number of usable CUDA devices; 0 when there is no driver or no device.
  int (*device_count)() = nullptr;
  /// A new CUDA backend on visible GPU `gpu` (checked by the caller against device_count()),
  /// computing at `precision` (an nn::Precision's value), owned by the caller; throws
  /// mbkit::Error when the GPU cannot be set up.
  nn::Backend* (*make_backend)(int gpu, int precision) = nullptr;
  /// NCCL's version ("2.28.9"), empty when libmbkit-cuda was built without NCCL.
  std::string (*nccl_version)() = nullptr;
  /// Rank 0's new NCCL unique id into kNcclIdBytes bytes; throws mbkit::Error on failure.
  void (*nccl_unique_id)(std::uint8_t* id) = nullptr;
  /// Starts joining a communicator of `ranks` ranks as `rank`, on the GPU of `backend` (one
  /// make_backend made; any other is a usage error), non-blocking: ready() says when it is
  /// set up. A call that NCCL is still enqueuing holds the next one at most `timeout` seconds.
  /// Owned by the caller; throws mbkit::Error naming the call on failure.
  comm::DeviceAllreduce* (*make_nccl_allreduce)(nn::Backend& backend, const std::uint8_t* id,
                                                int ranks, int rank, double timeout) = nullptr;
  /// Tests: `count` floats (host memory) rounded to bf16 by the cast kernel of --precision bf16
  /// on GPU `gpu`, their bits into `bits` (host memory); throws mbkit::Error on a CUDA failure.
  void (*round_to_bf16)(int gpu, const float* values, std::uint16_t* bits,
                        std::size_t count) = nullptr;
  /// mb-bench-bandwidth's buffers on the GPU of `backend` (one make_backend made; any other is a
  /// usage error); with `nccl_id` (not null) also a non-blocking NCCL communicator of `ranks`
  /// as `rank`, set up as make_nccl_allreduce's. Owned by the caller; throws mbkit::Error.
  bench::DeviceBench* (*make_device_bench)(nn::Backend& backend, const std::uint8_t* nccl_id,
                                           int ranks, int rank, double timeout) = nullptr;
};

/// The loaded plugin, or nullptr with the reason in *why_not (a build without CUDA, a missing
/// libmbkit-cuda, a CUDA library it cannot load). Loads once; later calls return the same.
const CudaPluginApi* cuda_plugin(std::string* why_not = nullptr);

/// Whether the NVIDIA driver's library (libcuda.so.1) opens: without it no GPU can be used, and
/// loading the plugin only to learn that maps cuDNN and cuBLAS (seconds of page faults in each
/// process that asks, such as every test program listing its backends). Checked once.
bool gpu_driver_present();

}  // namespace mbkit::backend

/// The entry point libmbkit-cuda defines.
extern "C" const mbkit::backend::CudaPluginApi* mbkit_cuda_plugin();
