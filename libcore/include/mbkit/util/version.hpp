// What this build is: mbkit's version and commit, and the versions of the libraries it runs on.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mbkit {

/// "0.1.0".
std::string version();
/// "mb-dataset (mbkit) 0.1.0, commit abc123" followed by one line per library.
std::string version_text(const std::string& tool);
/// (library, version) pairs: HDF5, Open MPI, oneDNN, libcurl, zlib, libarchive, CUDA...
std::vector<std::pair<std::string, std::string>> library_versions();

}  // namespace mbkit
