// Decompression of the archives datasets are published in: gzip (zlib) and tar.gz (libarchive).
// Damaged input (truncated, bad magic, CRC error) is a data error naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace mbkit::data {

/// True when the bytes start with the gzip magic number.
bool is_gzip(std::span<const std::uint8_t> bytes);

/// Inflates a gzip stream (several concatenated members are allowed, as gzip(1) does).
/// `name` is used in error messages.
std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> compressed, const std::string& name);

/// Reads a file and inflates it when it is gzip-compressed (by content, not by name).
std::vector<std::uint8_t> read_maybe_gzipped(const std::string& path);

/// Reads the regular-file members of a tar archive (optionally gzip/bzip2/xz compressed) whose
/// base names are in `wanted`; members not found are simply absent from the result.
std::map<std::string, std::vector<std::uint8_t>> read_tar_members(
    const std::string& path, const std::set<std::string>& wanted);

}  // namespace mbkit::data
