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

/// The most bytes deflate can expand one compressed byte to (258 bytes from about 2 bits: the
/// format's limit, 1032:1): a gzip file declaring more content than this ratio allows is lying.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;

/// Inflates at most the first `limit` bytes of a gzip stream (a header), leaving the rest.
std::vector<std::uint8_t> gunzip_prefix(std::span<const std::uint8_t> compressed, std::size_t limit,
                                        const std::string& name);

/// Inflates a gzip stream whose content is declared to be `expected_size` bytes into one buffer
/// of that size, allocated before inflating (no doubling as it grows): out of memory there
/// names the file and `what` it holds ("60000 images of 28x28"); a stream holding more is a
/// data error, one holding less is returned short.
std::vector<std::uint8_t> gunzip_exact(std::span<const std::uint8_t> compressed,
                                       std::uint64_t expected_size, const std::string& name,
                                       const std::string& what);

/// Reads a file and inflates it when it is gzip-compressed (by content, not by name).
std::vector<std::uint8_t> read_maybe_gzipped(const std::string& path);

/// Reads the regular-file members of a tar archive (optionally gzip/bzip2/xz compressed) whose
/// base names are in `wanted`; members not found are simply absent from the result.
std::map<std::string, std::vector<std::uint8_t>> read_tar_members(
    const std::string& path, const std::set<std::string>& wanted);

}  // namespace mbkit::data
