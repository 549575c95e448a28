// The plugin module is a leaf (see cuda_plugin.hpp): nothing here but the standard library,
// dlopen and the build's configuration.
#include "mbkit/plugin/cuda_plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "mbkit/config.hpp"

namespace mbkit::plugin {
namespace {

struct LoadResult {
  const CudaPluginApi* api = nullptr;
  void* handle = nullptr;  ///< dlopen's, where api is set
  std::string why_not;
};

#if MBKIT_HAVE_CUDA
/// libmbkit-cuda sits next to libmbkit-core, in the build tree and once installed; looking
/// there first keeps a different mbkit on LD_LIBRARY_PATH from being picked up.
std::vector<std::string> plugin_candidates() {
  const std::string name = "libmbkit-cuda.so." + std::to_string(MBKIT_VERSION_MAJOR);
  std::vector<std::string> candidates;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cuda_plugin), &info) != 0 &&
      info.dli_fname != nullptr) {
    candidates.push_back((std::filesystem::path(info.dli_fname).parent_path() / name).string());
  }
  candidates.push_back(name);  // the dynamic linker's own search path
  return candidates;
}

LoadResult load() {
  std::string errors;
  for (const std::string& candidate : plugin_candidates()) {
    // RTLD_LOCAL: the CUDA libraries' symbols stay out of the global namespace.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      errors += (errors.empty() ? "" : "; ") + (error != nullptr ? error : candidate);
      continue;
    }
    using Entry = const CudaPluginApi* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "mbkit_cuda_plugin"));
    if (entry == nullptr) {
      return {nullptr, nullptr, candidate + ": no mbkit_cuda_plugin entry point"};
    }
    const CudaPluginApi* api = entry();
    if (api == nullptr || api->abi != kCudaPluginAbi) {
      return {nullptr, nullptr,
              candidate + ": plugin interface " + std::to_string(api == nullptr ? 0 : api->abi) +
                  ", this mbkit needs " + std::to_string(kCudaPluginAbi) +
                  " (mixed installations?)"};
    }
    return {api, handle, ""};  // the handle stays open for the life of the process
  }
  return {nullptr, nullptr, "cannot load the CUDA backend: " + errors};
}
#else
LoadResult load() {
  return {nullptr, nullptr, "not built (configure with -DMBKIT_CUDA=ON)"};
}
#endif

}  // namespace

bool gpu_driver_present() {
#if MBKIT_HAVE_CUDA
  // Kept open where it opens: the plugin's CUDA runtime loads it anyway.
  static const bool present = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  return present;
#else
  return false;
#endif
}

namespace {

const LoadResult& loaded() {
  static std::once_flag once;
  static LoadResult result;
  std::call_once(once, [] { result = load(); });
  return result;
}

}  // namespace

const CudaPluginApi* cuda_plugin(std::string* why_not) {
  const LoadResult& result = loaded();
  if (result.api == nullptr && why_not != nullptr) *why_not = result.why_not;
  return result.api;
}

void* cuda_plugin_symbol(const char* name) {
  const LoadResult& result = loaded();
  return result.handle == nullptr ? nullptr : dlsym(result.handle, name);
}

}  // namespace mbkit::plugin
