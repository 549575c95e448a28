#include "mbkit/comm/compression.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::comm {
namespace {

constexpr std::uint32_t kPlus = 1, kMinus = 2;  // 2bit codes; 0 is zero

}  // namespace

std::string CompressionSpec::text() const {
  switch (kind) {
    case Compression::kTwoBit:
      return cat("2bit:", threshold);
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
    case Compression::kNone:
      break;
  }
  return "none";
}

std::size_t CompressionSpec::encoded_bytes(std::size_t values) const {
  switch (kind) {
    case Compression::kTwoBit:
      return (values + 15) / 16 * sizeof(std::uint32_t);
    case Compression::kFp16:
    case Compression::kBf16:
      return values * sizeof(std::uint16_t);
    case Compression::kNone:
      break;
  }
  return values * sizeof(float);
}

CompressionSpec parse_compression(const std::string& text) {
  CompressionSpec spec;
  // An empty text is a mistake of quoting (--compress "$UNSET"), not a choice: refuse it.
  if (text.empty()) usage_error("--compress: empty; give 2bit:THRESHOLD, fp16, bf16 or none");
  if (text == "none") return spec;
  if (text == "fp16" || text == "bf16") {
    spec.kind = text == "fp16" ? Compression::kFp16 : Compression::kBf16;
    return spec;
  }
  if (text.starts_with("2bit:")) {
    const double threshold = parse_double(text.substr(5), "--compress 2bit threshold");
    if (!(threshold > 0) || !std::isfinite(static_cast<float>(threshold))) {
      usage_error(cat("--compress ", text, ": the threshold must be a positive number"));
    }
    spec.kind = Compression::kTwoBit;
    spec.threshold = static_cast<float>(threshold);
    return spec;
  }
  usage_error(cat("--compress: '", text, "' is not 2bit:THRESHOLD, fp16, bf16 or none"));
}

std::uint16_t to_fp16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN kept quiet
    return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520
  if (magnitude < 0x38800000u) {               // below 2^-14: a subnormal half, in units of 2^-24
    if (magnitude < 0x33000000u) return sign;  // below 2^-25 (a tie at 2^-25 goes to even 0)
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14 to 24
    std::uint32_t q = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 to 15) and round off 13 bits; a carry into the exponent
  // is the right result.
  const std::uint32_t rebiased = magnitude - (112u << 23);
  std::uint32_t q = rebiased >> 13;
  const std::uint32_t rest = rebiased & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (q & 1u) != 0)) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

float from_fp16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t to_bf16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float from_bf16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

void encode(const CompressionSpec& spec, std::span<const float> values, std::span<float> residual,
            std::span<std::uint8_t> out) {
  MBKIT_CHECK(out.size() == spec.encoded_bytes(values.size()), "encoding ", values.size(),
              " values into ", out.size(), " bytes");
  switch (spec.kind) {
    case Compression::kTwoBit: {
      MBKIT_CHECK(residual.size() == values.size(), "a residual of ", residual.size(),
                  " values for ", values.size());
      const float t = spec.threshold;
      for (std::size_t k = 0; k * 16 < values.size(); ++k) {
        std::uint32_t word = 0;
        const std::size_t end = std::min(values.size(), k * 16 + 16);
        for (std::size_t i = k * 16; i < end; ++i) {
          float& r = residual[i];
          r += values[i];
          std::uint32_t code = 0;
          if (r >= t) {
            code = kPlus;
            r -= t;
          } else if (r <= -t) {
            code = kMinus;
            r += t;
          }
          word |= code << (2 * (i - k * 16));
        }
        std::memcpy(out.data() + k * sizeof word, &word, sizeof word);
      }
      return;
    }
    case Compression::kFp16:
    case Compression::kBf16: {
      const bool half = spec.kind == Compression::kFp16;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t bits = half ? to_fp16(values[i]) : to_bf16(values[i]);
        std::memcpy(out.data() + i * sizeof bits, &bits, sizeof bits);
      }
      return;
    }
    case Compression::kNone:
      break;
  }
  std::memcpy(out.data(), values.data(), values.size_bytes());
}

void add_decoded(const CompressionSpec& spec, std::span<const std::uint8_t> in,
                 std::span<float> sum) {
  MBKIT_CHECK(in.size() == spec.encoded_bytes(sum.size()), "decoding ", in.size(), " bytes into ",
              sum.size(), " values");
  switch (spec.kind) {
    case Compression::kTwoBit: {
      const float t = spec.threshold;
      for (std::size_t k = 0; k * 16 < sum.size(); ++k) {
        std::uint32_t word = 0;
        std::memcpy(&word, in.data() + k * sizeof word, sizeof word);
        if (word == 0) continue;  // sparse gradients: most words are all zeros
        const std::size_t end = std::min(sum.size(), k * 16 + 16);
        for (std::size_t i = k * 16; i < end; ++i, word >>= 2) {
          const std::uint32_t code = word & 3u;
          if (code == kPlus) sum[i] += t;
          if (code == kMinus) sum[i] -= t;
        }
      }
      return;
    }
    case Compression::kFp16:
    case Compression::kBf16: {
      const bool half = spec.kind == Compression::kFp16;
      for (std::size_t i = 0; i < sum.size(); ++i) {
        std::uint16_t bits = 0;
        std::memcpy(&bits, in.data() + i * sizeof bits, sizeof bits);
        sum[i] += half ? from_fp16(bits) : from_bf16(bits);
      }
      return;
    }
    case Compression::kNone:
      break;
  }
  for (std::size_t i = 0; i < sum.size(); ++i) {
    float value = 0;
    std::memcpy(&value, in.data() + i * sizeof value, sizeof value);
    sum[i] += value;
  }
}

}  // namespace mbkit::comm
