// bf16 (bfloat16: the upper 16 bits of an fp32, 8 exponent and 7 mantissa bits) as the CUDA
// backend's --precision bf16 stores operands: the host's reference of the conversion, tested
// against known bit patterns without a GPU and used to check the device's cast kernel on one.
#pragma once

#include <bit>
#include <cstdint>

namespace mbkit::backend::cuda {

/// `value` rounded to the nearest bf16, ties to even (IEEE's default rounding, that of CUDA's
/// __float2bfloat16_rn): the 16 bits dropped are compared with half a unit of the kept last bit.
/// Subnormals round like any other value; the largest values round up to infinity. A NaN stays
/// a NaN (quiet, its sign kept): rounding its payload could carry it into an infinity.
constexpr std::uint16_t bf16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t half_less_one_or_half = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + half_less_one_or_half) >> 16);
}

/// The fp32 a bf16 stands for (exact: every bf16 is an fp32).
constexpr float bf16_value(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// Whether bf16 bits are a NaN (exponent all ones, mantissa not zero).
constexpr bool bf16_is_nan(std::uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
}

}  // namespace mbkit::backend::cuda
