// --compress's codecs against values worked out by hand: MXNet's 2-bit quantisation with its
// residual over steps and the packing of 16 values a word, fp16 and bf16 rounding to nearest
// even (ties, subnormals, overflow), and the bad option texts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mbkit/comm/compression.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::comm {
namespace {

std::vector<std::uint32_t> words_of(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

TEST(TwoBit, QuantisesWithTheThresholdAndKeepsTheResidual) {
  const CompressionSpec spec = parse_compression("2bit:0.5");
  ASSERT_EQ(spec.kind, Compression::kTwoBit);
  EXPECT_EQ(spec.threshold, 0.5f);
  // 17 values: two words, the second holding one value.
  std::vector<float> g = {0.7f, -0.2f, -0.5f, 0.5f, 0.25f, -1.75f, 0.f,  0.f,  0.f,
                          0.f,  0.f,   0.f,   0.f,  0.f,   0.f,    0.6f, -0.9f};
  std::vector<float> residual(g.size(), 0.f);
  std::vector<std::uint8_t> out(spec.encoded_bytes(g.size()));
  ASSERT_EQ(out.size(), 8u);
  encode(spec, g, residual, out);
  // Codes, value j at bits 2j: +T (01) for 0.7, 0.5 and 0.6; -T (10) for -0.5, -1.75, -0.9.
  const std::uint32_t first = (1u << 0) | (2u << 4) | (1u << 6) | (2u << 10) | (1u << 30);
  EXPECT_EQ(words_of(out), (std::vector<std::uint32_t>{first, 2u}));
  // The residual keeps value - sent: 0.7 - 0.5, -0.2, 0, 0, 0.25, -1.75 + 0.5, ...
  EXPECT_NEAR(residual[0], 0.2, 1e-6);
  EXPECT_NEAR(residual[1], -0.2, 1e-6);
  EXPECT_EQ(residual[2], 0.f);
  EXPECT_EQ(residual[3], 0.f);
  EXPECT_NEAR(residual[4], 0.25, 1e-6);
  EXPECT_NEAR(residual[5], -1.25, 1e-6);
  EXPECT_NEAR(residual[15], 0.1, 1e-6);
  EXPECT_NEAR(residual[16], -0.4, 1e-6);
  std::vector<float> sum(g.size(), 0.f);
  add_decoded(spec, out, sum);
  EXPECT_EQ(sum, (std::vector<float>{0.5f, 0, -0.5f, 0.5f, 0, -0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     0.5f, -0.5f}));

  // Error feedback: the next step sends what the residual has gathered. 0.2 + 0.35 and
  // 0.25 + 0.25 reach 0.5; -1.25 + 0 sends -0.5 again.
  std::vector<float> g2(g.size(), 0.f);
  g2[0] = 0.35f;
  g2[4] = 0.25f;
  encode(spec, g2, residual, out);
  std::fill(sum.begin(), sum.end(), 0.f);
  add_decoded(spec, out, sum);
  EXPECT_EQ(sum[0], 0.5f);
  EXPECT_EQ(sum[1], 0.f);  // -0.2 stays below the threshold
  EXPECT_EQ(sum[4], 0.5f);
  EXPECT_EQ(sum[5], -0.5f);
  EXPECT_NEAR(residual[0], 0.05, 1e-6);
  EXPECT_NEAR(residual[5], -0.75, 1e-6);
}

TEST(TwoBit, DecodingAddsToWhatIsThere) {
  const CompressionSpec spec = parse_compression("2bit:0.25");
  std::vector<float> a = {1.f, -1.f, 0.f}, ra(3, 0.f), b = {1.f, 1.f, 0.1f}, rb(3, 0.f);
  std::vector<std::uint8_t> ea(spec.encoded_bytes(3)), eb(spec.encoded_bytes(3));
  encode(spec, a, ra, ea);
  encode(spec, b, rb, eb);
  std::vector<float> sum(3, 0.f);
  add_decoded(spec, ea, sum);
  add_decoded(spec, eb, sum);
  EXPECT_EQ(sum, (std::vector<float>{0.5f, 0.f, 0.f}));
}

TEST(HalfPrecision, Fp16RoundsToNearestEven) {
  EXPECT_EQ(to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(to_fp16(65520.0f), 0x7c00);  // rounds past the largest half: infinity
  EXPECT_EQ(to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(to_fp16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  // 1 + 2^-11 is half-way between 1 and 1 + 2^-10: to even (1); 1 + 3 2^-11 goes up.
  EXPECT_EQ(to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(to_fp16(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(to_fp16(0x1p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(to_fp16(0x1p-25f), 0x0000);    // a tie: to even
  EXPECT_EQ(to_fp16(0x1.8p-24f), 0x0002);  // 1.5 units: to even 2
  EXPECT_EQ(to_fp16(-0.0f), 0x8000);
  for (const std::uint16_t bits : {0x3c00, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xc000, 0x8000}) {
    EXPECT_EQ(to_fp16(from_fp16(bits)), bits);
  }
  EXPECT_EQ(from_fp16(0x3555), 0.333251953125f);
}

TEST(HalfPrecision, Bf16KeepsTheUpperHalfRoundedToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f), 0x3f80);      // a tie: to even
  EXPECT_EQ(to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // a tie: to even, upwards
  EXPECT_EQ(to_bf16(1.0f + 0x1p-7f + 0x1p-9f), 0x3f81);
  EXPECT_EQ(from_bf16(0x3f81), 1.0f + 0x1p-7f);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfPrecision, EncodeAndDecodeAddTheRoundedValues) {
  for (const char* text : {"fp16", "bf16"}) {
    const CompressionSpec spec = parse_compression(text);
    const std::vector<float> g = {1.0f, 0.1f, -3.0f};
    std::vector<float> unused;
    std::vector<std::uint8_t> out(spec.encoded_bytes(g.size()));
    EXPECT_EQ(out.size(), 6u);
    encode(spec, g, unused, out);
    std::vector<float> sum = {1.0f, 0.f, 0.f};
    add_decoded(spec, out, sum);
    const float tenth =
        spec.kind == Compression::kFp16 ? from_fp16(to_fp16(0.1f)) : from_bf16(to_bf16(0.1f));
    EXPECT_EQ(sum, (std::vector<float>{2.0f, tenth, -3.0f})) << text;
    EXPECT_NE(tenth, 0.1f);
  }
}

TEST(CompressOption, BadTextsNameTheFlag) {
  EXPECT_FALSE(parse_compression("none").enabled());
  EXPECT_EQ(parse_compression("2bit:0.5").text(), "2bit:0.5");
  EXPECT_MBKIT_ERROR(parse_compression("4bit"), ExitCode::kUsage, "--compress: '4bit'");
  EXPECT_MBKIT_ERROR(parse_compression(""), ExitCode::kUsage, "--compress: empty");
  EXPECT_MBKIT_ERROR(parse_compression("2bit:-1"), ExitCode::kUsage, "must be a positive");
  EXPECT_MBKIT_ERROR(parse_compression("2bit:"), ExitCode::kUsage, "--compress");
  EXPECT_MBKIT_ERROR(parse_compression("2bit:1e99"), ExitCode::kUsage, "must be a positive");
}

}  // namespace
}  // namespace mbkit::comm
