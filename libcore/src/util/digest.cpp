#include "mbkit/util/digest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "mbkit/util/check.hpp"

namespace mbkit {
namespace {

constexpr std::uint32_t rotr(std::uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}
constexpr std::uint32_t rotl(std::uint32_t x, int n) {
  return (x << n) | (x >> (32 - n));
}

constexpr std::array<std::uint32_t, 64> kSha256K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::array<std::uint32_t, 8> kSha256Initial = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// MD5 per-round shift amounts and constants floor(abs(sin(i + 1)) * 2^32).
constexpr std::array<int, 64> kMd5Shift = {
    7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 5,  9,  14, 20, 5,  9,
    14, 20, 5,  9,  14, 20, 5,  9,  14, 20, 4,  11, 16, 23, 4,  11, 16, 23, 4,  11, 16, 23,
    4,  11, 16, 23, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21};
constexpr std::array<std::uint32_t, 64> kMd5K = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};

constexpr std::array<std::uint32_t, 4> kMd5Initial = {0x67452301, 0xefcdab89, 0x98badcfe,
                                                      0x10325476};

// Shared Merkle-Damgard buffering: feeds whole 64-byte blocks to `compress`.
template <class Compress>
void absorb(const std::uint8_t* data, std::size_t size, std::array<std::uint8_t, 64>& buffer,
            std::size_t& buffered, std::uint64_t& length, Compress compress) {
  length += size;
  if (buffered > 0) {
    const std::size_t take = std::min(size, 64 - buffered);
    std::memcpy(buffer.data() + buffered, data, take);
    buffered += take;
    data += take;
    size -= take;
    if (buffered < 64) return;
    compress(buffer.data());
    buffered = 0;
  }
  while (size >= 64) {
    compress(data);
    data += 64;
    size -= 64;
  }
  std::memcpy(buffer.data(), data, size);
  buffered = size;
}

// Appends the Merkle-Damgard padding shared by SHA-256 and MD5: 0x80, zeros up to 56 bytes
// modulo 64, then the message length in bits (big-endian for SHA-256, little-endian for MD5).
template <class Hash>
void append_padding(Hash& hash, std::uint64_t byte_length, bool big_endian_length) {
  const std::uint64_t bits = byte_length * 8;
  std::uint8_t padding[72] = {0x80};
  const std::size_t used = byte_length % 64;
  const std::size_t pad_bytes = used < 56 ? 56 - used : 120 - used;
  for (int i = 0; i < 8; ++i) {
    const int shift = big_endian_length ? 56 - 8 * i : 8 * i;
    padding[pad_bytes + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bits >> shift);
  }
  hash.update(padding, pad_bytes + 8);
}

}  // namespace

Sha256::Sha256() : state_(kSha256Initial) {}

void Sha256::compress(const std::uint8_t* block) {
  std::array<std::uint32_t, 64> w{};
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{block[4 * i]} << 24) | (std::uint32_t{block[4 * i + 1]} << 16) |
           (std::uint32_t{block[4 * i + 2]} << 8) | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state_;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + s1 + choose + kSha256K[i] + w[i];
    const std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const std::array<std::uint32_t, 8> add = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i) state_[i] += add[i];
}

void Sha256::update(const void* data, std::size_t size) {
  absorb(static_cast<const std::uint8_t*>(data), size, buffer_, buffered_, length_,
         [this](const std::uint8_t* block) { compress(block); });
}

std::string Sha256::hex() {
  append_padding(*this, length_, true);
  std::uint8_t digest[32];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j)
      digest[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * j));
  }
  *this = Sha256();
  return to_hex(digest, sizeof digest);
}

Md5::Md5() : state_(kMd5Initial) {}

void Md5::compress(const std::uint8_t* block) {
  std::uint32_t m[16];
  for (int i = 0; i < 16; ++i) {
    m[i] = std::uint32_t{block[4 * i]} | (std::uint32_t{block[4 * i + 1]} << 8) |
           (std::uint32_t{block[4 * i + 2]} << 16) | (std::uint32_t{block[4 * i + 3]} << 24);
  }
  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  for (int i = 0; i < 64; ++i) {
    std::uint32_t f = 0;
    int g = 0;
    if (i < 16) {
      f = (b & c) | (~b & d);
      g = i;
    } else if (i < 32) {
      f = (d & b) | (~d & c);
      g = (5 * i + 1) % 16;
    } else if (i < 48) {
      f = b ^ c ^ d;
      g = (3 * i + 5) % 16;
    } else {
      f = c ^ (b | ~d);
      g = (7 * i) % 16;
    }
    const std::uint32_t rotated = rotl(a + f + kMd5K[i] + m[g], kMd5Shift[i]);
    a = d;
    d = c;
    c = b;
    b = b + rotated;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
}

void Md5::update(const void* data, std::size_t size) {
  absorb(static_cast<const std::uint8_t*>(data), size, buffer_, buffered_, length_,
         [this](const std::uint8_t* block) { compress(block); });
}

std::string Md5::hex() {
  append_padding(*this, length_, false);
  std::uint8_t digest[16];
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (8 * j));
  }
  *this = Md5();
  return to_hex(digest, sizeof digest);
}

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  Sha256 sha;
  sha.update(bytes);
  return sha.hex();
}

std::string md5_hex(std::span<const std::uint8_t> bytes) {
  Md5 md5;
  md5.update(bytes);
  return md5.hex();
}

FileDigests digest_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) data_error(cat(path, ": ", std::strerror(errno)));
  Sha256 sha;
  Md5 md5;
  FileDigests result;
  std::vector<std::uint8_t> chunk(1 << 20);
  while (true) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      data_error(cat(path, ": read failed: ", std::strerror(err)));
    }
    if (got == 0) break;
    sha.update(chunk.data(), static_cast<std::size_t>(got));
    md5.update(chunk.data(), static_cast<std::size_t>(got));
    result.size += static_cast<std::uint64_t>(got);
  }
  ::close(fd);
  result.sha256 = sha.hex();
  result.md5 = md5.hex();
  return result;
}

}  // namespace mbkit
