// Gradient compression on the wire (--compress), as MXNet's KVStore gradient compression and
// fp16/bf16 communication:
//
//   2bit:T  each value plus the worker's residual r is sent as +T when >= T, -T when <= -T,
//           else 0, and r keeps what was not sent (value + r - sent): error feedback, so no
//           gradient is lost, only delayed. 2 bits a value, 16 values per 32-bit word: value
//           16k + j is bits 2j..2j+1 of word k, 01 for +T, 10 for -T, 00 for 0.
//   fp16    IEEE binary16, rounded to nearest even (overflow to infinity).
//   bf16    the upper half of the float, rounded to nearest even.
//
// Receivers decode in a fixed order (worker by worker) and add in float, so every rank that
// decodes the same messages holds the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mbkit::comm {

enum class Compression { kNone, kTwoBit, kFp16, kBf16 };

struct CompressionSpec {
  Compression kind = Compression::kNone;
  float threshold = 0;  ///< 2bit: T
  bool enabled() const { return kind != Compression::kNone; }
  /// "none", "2bit:0.5", "fp16" or "bf16", as --compress takes it.
  std::string text() const;
  /// Bytes of `values` floats encoded.
  std::size_t encoded_bytes(std::size_t values) const;
};

/// --compress: 2bit:THRESHOLD (a positive finite number), fp16, bf16 or none; a usage error
/// naming the flag otherwise.
CompressionSpec parse_compression(const std::string& text);

/// Encodes `values` into `out` (encoded_bytes(values.size()) bytes). 2bit adds `values` to
/// `residual` (same size) and leaves there what it did not send; the others ignore it.
void encode(const CompressionSpec& spec, std::span<const float> values, std::span<float> residual,
            std::span<std::uint8_t> out);

/// Adds the values `in` encodes to `sum` (sum.size() values).
void add_decoded(const CompressionSpec& spec, std::span<const std::uint8_t> in,
                 std::span<float> sum);

std::uint16_t to_fp16(float value);
float from_fp16(std::uint16_t bits);
std::uint16_t to_bf16(float value);
float from_bf16(std::uint16_t bits);

}  // namespace mbkit::comm
