#include "mbkit/util/version.hpp"

#include <archive.h>
#include <curl/curl.h>
#include <hdf5.h>
#include <mpi.h>
#include <oneapi/dnnl/dnnl.h>
#include <zlib.h>

#include "mbkit/config.hpp"
#include "mbkit/util/strings.hpp"

#include "mbkit/plugin/cuda_plugin.hpp"

namespace mbkit {

std::string version() {
  return MBKIT_VERSION;
}

std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> versions;
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) >= 0) {
    versions.emplace_back("HDF5", strprintf("%u.%u.%u", major, minor, release));
  }
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  // Allowed before MPI_Init by the standard.
  if (MPI_Get_library_version(mpi_version, &length) == MPI_SUCCESS) {
    std::string text(mpi_version, static_cast<std::size_t>(length));
    versions.emplace_back("MPI", std::string(trim(split(text, ',')[0])));
  }
  if (const dnnl_version_t* dnnl = dnnl_version(); dnnl != nullptr) {
    versions.emplace_back("oneDNN", strprintf("%d.%d.%d", dnnl->major, dnnl->minor, dnnl->patch));
  }
  versions.emplace_back("libcurl", curl_version_info(CURLVERSION_NOW)->version);
  versions.emplace_back("zlib", zlibVersion());
  versions.emplace_back("libarchive", ARCHIVE_VERSION_ONLY_STRING);
  std::string why_not;
  if (const plugin::CudaPluginApi* cuda = plugin::cuda_plugin(&why_not); cuda != nullptr) {
    for (auto& entry : cuda->library_versions()) versions.push_back(std::move(entry));
  } else {
    versions.emplace_back("CUDA", why_not);
  }
  return versions;
}

std::string version_text(const std::string& tool) {
  std::string text = cat(tool, " (mbkit) ", MBKIT_VERSION, ", commit ", MBKIT_GIT_COMMIT, ", ",
                         MBKIT_BUILD_TYPE, " build\n");
  for (const auto& [library, library_version] : library_versions()) {
    text += strprintf("  %-11s %s\n", library.c_str(), library_version.c_str());
  }
  return text;
}

}  // namespace mbkit
