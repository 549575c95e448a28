// SHA-256 (FIPS 180-4) and MD5 (RFC 1321), streaming. MD5 is only used to compare archives with
// the checksums their publishers list; SHA-256 is what mbkit records in its own files.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace mbkit {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::span<const std::uint8_t> bytes) { update(bytes.data(), bytes.size()); }
  /// Finishes and returns the digest as 64 lowercase hex digits; the object is then reset.
  std::string hex();

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_{};
  std::array<std::uint8_t, 64> buffer_{};
  std::uint64_t length_ = 0;
  std::size_t buffered_ = 0;
};

class Md5 {
 public:
  Md5();
  void update(const void* data, std::size_t size);
  void update(std::span<const std::uint8_t> bytes) { update(bytes.data(), bytes.size()); }
  /// Finishes and returns the digest as 32 lowercase hex digits; the object is then reset.
  std::string hex();

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 4> state_{};
  std::array<std::uint8_t, 64> buffer_{};
  std::uint64_t length_ = 0;
  std::size_t buffered_ = 0;
};

std::string sha256_hex(std::span<const std::uint8_t> bytes);
std::string md5_hex(std::span<const std::uint8_t> bytes);

struct FileDigests {
  std::string sha256;
  std::string md5;
  std::uint64_t size = 0;
};
/// Both digests of a file in one read; a missing file is a data error.
FileDigests digest_file(const std::string& path);

}  // namespace mbkit
