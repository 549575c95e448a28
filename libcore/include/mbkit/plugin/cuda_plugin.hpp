// The CUDA side of mbkit lives in its own library, libmbkit-cuda, which the core opens with
// dlopen() the first time something asks for it. CPU runs therefore never load cuBLAS, cuDNN
// or NCCL: merely mapping them costs about 150 MB of resident memory per process.
//
// This module is a leaf: its table carries standard types only, so any module may ask the plugin
// (util's version listing among them) without a loop between modules. The plugin's functions
// that make one module's objects (an nn::Backend, a comm::DeviceAllreduce, a bench::DeviceBench)
// are declared by that module, extern "C" so that libmbkit-cuda's definition must match the
// declaration, and found by name here (MBKIT_CUDA_PLUGIN_FUNCTION).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mbkit::plugin {

/// Bumped whenever CudaPluginApi or the functions found by name change, so that a stale
/// libmbkit-cuda is refused, not called. 2: make_backend. 3: NCCL (nccl_version, nccl_unique_id,
/// make_nccl_allreduce). 4: make_backend's precision, round_to_bf16. 5: nn::Backend's step
/// graphs (begin_capture, end_capture, set_input_fixed) and nn::Kernel's replay hooks (the
/// Backend's and Kernels' vtables changed). 6: make_device_bench (mb-bench-bandwidth --device
/// cuda). 7: make_backend, make_nccl_allreduce and make_device_bench left the table for
/// functions found by name (mbkit_cuda_make_backend ...), declared by backend, comm and bench.
inline constexpr int kCudaPluginAbi = 7;

/// Bytes of NCCL's unique id (NCCL_UNIQUE_ID_BYTES), which the core carries over MPI.
inline constexpr std::size_t kNcclIdBytes = 128;

/// What libmbkit-cuda exports through its C entry point `mbkit_cuda_plugin`, in standard types.
struct CudaPluginApi {
  int abi = kCudaPluginAbi;
  /// (library, version) pairs for the CUDA runtime and driver, cuDNN, cuBLAS, NCCL, and "GPUs".
  std::vector<std::pair<std::string, std::string>> (*library_versions)() = nullptr;
  /// Number of usable CUDA devices; 0 when there is no driver or no device.
  int (*device_count)() = nullptr;
  /// NCCL's version ("2.28.9"), empty when libmbkit-cuda was built without NCCL.
  std::string (*nccl_version)() = nullptr;
  /// Rank 0's new NCCL unique id into kNcclIdBytes bytes; throws mbkit::Error on failure.
  void (*nccl_unique_id)(std::uint8_t* id) = nullptr;
  /// Tests: `count` floats (host memory) rounded to bf16 by the cast kernel of --precision bf16
  /// on GPU `gpu`, their bits into `bits` (host memory); throws mbkit::Error on a CUDA failure.
  void (*round_to_bf16)(int gpu, const float* values, std::uint16_t* bits,
                        std::size_t count) = nullptr;
};

/// The loaded plugin, or nullptr with the reason in *why_not (a build without CUDA, a missing
/// libmbkit-cuda, a CUDA library it cannot load). Loads once; later calls return the same.
const CudaPluginApi* cuda_plugin(std::string* why_not = nullptr);

/// Whether the NVIDIA driver's library (libcuda.so.1) opens: without it no GPU can be used, and
/// loading the plugin only to learn that maps cuDNN and cuBLAS (seconds of page faults in each
/// process that asks, such as every test program listing its backends). Checked once.
bool gpu_driver_present();

/// The loaded plugin's exported symbol `name` (loading the plugin if needed); nullptr when the
/// plugin does not load or does not define it.
void* cuda_plugin_symbol(const char* name);

/// The loaded plugin's definition of the extern "C" function `name`, whose declaration gives
/// `Function`; nullptr as cuda_plugin_symbol's.
template <class Function>
Function* cuda_plugin_function(const char* name) {
  return reinterpret_cast<Function*>(cuda_plugin_symbol(name));
}

}  // namespace mbkit::plugin

/// The plugin's definition of `function` (an extern "C" function the caller's module declares),
/// or nullptr: the name and the type are taken from the one declaration, so they cannot drift.
#define MBKIT_CUDA_PLUGIN_FUNCTION(function) \
  ::mbkit::plugin::cuda_plugin_function<decltype(function)>(#function)

/// The entry point libmbkit-cuda defines.
extern "C" const mbkit::plugin::CudaPluginApi* mbkit_cuda_plugin();
