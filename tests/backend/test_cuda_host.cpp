// What of the CUDA backend is host arithmetic, tested without a GPU: the convolution algorithm
// cache's key and hash, the padding plan for asymmetric convolutions, launch geometry, and the
// bf16 rounding the device's cast kernel is checked against.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

#include "mbkit/backend/cuda/bf16.hpp"
#include "mbkit/backend/cuda/conv_key.hpp"
#include "mbkit/backend/cuda/launch.hpp"
#include "mbkit/nn/precision.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::backend::cuda {
namespace {

ConvKey resnet_layer() {
  ConvKey key;
  key.pass = ConvPass::kForward;
  key.batch = 128;
  key.in_channels = 16;
  key.in_h = key.in_w = 32;
  key.out_channels = 16;
  key.kernel_h = key.kernel_w = 3;
  key.pad_h = key.pad_w = 1;
  key.math_type = 2;
  return key;
}

/// Each field of the key changed on its own: a different key, and (for these) a different hash.
std::vector<std::function<void(ConvKey&)>> one_field_changes() {
  return {
      [](ConvKey& k) { k.pass = ConvPass::kBackwardData; },
      [](ConvKey& k) { k.pass = ConvPass::kBackwardFilter; },
      [](ConvKey& k) { k.batch = 64; },
      [](ConvKey& k) { k.in_channels = 32; },
      [](ConvKey& k) { k.in_h = 33; },
      [](ConvKey& k) { k.in_w = 33; },
      [](ConvKey& k) { k.out_channels = 32; },
      [](ConvKey& k) { k.kernel_h = 1; },
      [](ConvKey& k) { k.kernel_w = 1; },
      [](ConvKey& k) { k.pad_h = 0; },
      [](ConvKey& k) { k.pad_w = 0; },
      [](ConvKey& k) { k.stride_h = 2; },
      [](ConvKey& k) { k.stride_w = 2; },
      [](ConvKey& k) { k.dilation_h = 2; },
      [](ConvKey& k) { k.dilation_w = 2; },
      [](ConvKey& k) { k.math_type = 0; },
      [](ConvKey& k) { k.data_type = 9; },
      [](ConvKey& k) { k.precision = static_cast<int>(nn::Precision::kBf16); },
  };
}

TEST(CudaConvKey, EveryFieldTellsKeysApart) {
  const ConvKey base = resnet_layer();
  const ConvKeyHash hash;
  std::set<std::size_t> hashes{hash(base)};
  for (const auto& change : one_field_changes()) {
    ConvKey other = base;
    change(other);
    EXPECT_FALSE(other == base) << other.text();
    EXPECT_NE(other.text(), base.text());
    hashes.insert(hash(other));
  }
  EXPECT_EQ(hashes.size(), one_field_changes().size() + 1);
}

TEST(CudaConvKey, SwappedDimensionsAreDifferentKeys) {
  // A hash that summed or xor-ed the fields alone would give these the same bucket.
  ConvKey a = resnet_layer(), b = resnet_layer();
  a.in_h = 8;
  a.in_w = 16;
  b.in_h = 16;
  b.in_w = 8;
  EXPECT_FALSE(a == b);
  EXPECT_NE(ConvKeyHash{}(a), ConvKeyHash{}(b));
}

TEST(CudaConvKey, EqualKeysShareOneCacheEntry) {
  std::unordered_map<ConvKey, int, ConvKeyHash> cache;
  cache[resnet_layer()] = 3;
  ConvKey same = resnet_layer();
  EXPECT_EQ(ConvKeyHash{}(same), ConvKeyHash{}(resnet_layer()));
  ASSERT_EQ(cache.count(same), 1u);
  EXPECT_EQ(cache[same], 3);
  same.pass = ConvPass::kBackwardFilter;
  EXPECT_EQ(cache.count(same), 0u);
}

TEST(CudaConvKey, TextNamesThePassAndShape) {
  EXPECT_EQ(resnet_layer().text(),
            "fwd n128 c16x32x32 k16 3x3 pad1x1 stride1x1 dil1x1 math2 type0 fp32");
}

// A layer measured at one precision is measured again at another: TF32 and bf16 algorithms are
// other kernels (and an fp32 run must never pick up a tensor-core choice), even where a math
// and data type alone would coincide.
TEST(CudaConvKey, EachPrecisionHasItsOwnCacheEntry) {
  std::unordered_map<ConvKey, int, ConvKeyHash> cache;
  for (nn::Precision p : {nn::Precision::kFp32, nn::Precision::kTf32, nn::Precision::kBf16}) {
    ConvKey key = resnet_layer();
    key.precision = static_cast<int>(p);
    EXPECT_EQ(cache.count(key), 0u) << key.text();
    cache[key] = static_cast<int>(p);
    EXPECT_NE(key.text().find(nn::precision_name(p)), std::string::npos) << key.text();
  }
  EXPECT_EQ(cache.size(), 3u);
}

std::uint16_t bf16_of_bits(std::uint32_t bits) {
  return bf16_bits(std::bit_cast<float>(bits));
}

// Known patterns: the 16 bits dropped below, at and above half a unit of the last bit kept.
TEST(CudaBf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-1.5f), 0xbfc0);
  EXPECT_EQ(bf16_of_bits(0x3f807fff), 0x3f80);  // just below half: down
  EXPECT_EQ(bf16_of_bits(0x3f808000), 0x3f80);  // a tie, 0x3f80 even: down
  EXPECT_EQ(bf16_of_bits(0x3f808001), 0x3f81);  // just above half: up
  EXPECT_EQ(bf16_of_bits(0x3f818000), 0x3f82);  // a tie, 0x3f81 odd: up to even
  EXPECT_EQ(bf16_of_bits(0xbf818000), 0xbf82);  // negative ties alike
  EXPECT_EQ(bf16_bits(3.14159265f), 0x4049);    // 0x40490fdb
  EXPECT_EQ(bf16_bits(0.1f), 0x3dcd);           // 0x3dcccccd: up
  EXPECT_EQ(bf16_of_bits(0x3fffffff), 0x4000);  // the carry reaches the exponent
}

TEST(CudaBf16, ZerosSubnormalsInfinitiesAndNans) {
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_of_bits(0x00000001), 0x0000);  // the smallest subnormal: below half
  EXPECT_EQ(bf16_of_bits(0x00008000), 0x0000);  // a tie to even zero
  EXPECT_EQ(bf16_of_bits(0x00018000), 0x0002);  // a tie to even 2
  EXPECT_EQ(bf16_of_bits(0x007fffff), 0x0080);  // the largest subnormal up to the smallest normal
  EXPECT_EQ(bf16_of_bits(0x7f7f7fff), 0x7f7f);  // large, below half
  EXPECT_EQ(bf16_of_bits(0x7f7fffff), 0x7f80);  // FLT_MAX: up to infinity
  EXPECT_EQ(bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(bf16_bits(-INFINITY), 0xff80);
  // A NaN whose payload is only in the dropped bits must not round into an infinity.
  for (std::uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xffbfffffu, 0x7fffffffu}) {
    EXPECT_TRUE(bf16_is_nan(bf16_of_bits(nan))) << std::hex << nan;
    EXPECT_TRUE(std::isnan(bf16_value(bf16_of_bits(nan))));
  }
  EXPECT_EQ(bf16_of_bits(0xff800001u) & 0x8000, 0x8000);  // the sign kept
}

TEST(CudaBf16, EveryBf16IsExactAndRoundingErrIsAtMostHalfAUnit) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    if (bf16_is_nan(b)) continue;
    ASSERT_EQ(bf16_bits(bf16_value(b)), b) << std::hex << bits;
  }
  // 8 significant bits: |x - bf16(x)| <= 2^-8 |x| (unit roundoff), and it is the nearest.
  Rng rng(3);
  for (int i = 0; i < 10000; ++i) {
    const auto x = static_cast<float>(rng.normal() * std::exp2(static_cast<double>(i % 40) - 20));
    const std::uint16_t b = bf16_bits(x);
    const double error = std::fabs(double{bf16_value(b)} - x);
    ASSERT_LE(error, std::ldexp(std::fabs(double{x}), -8)) << x;
    const auto up = static_cast<std::uint16_t>(b + 1), down = static_cast<std::uint16_t>(b - 1);
    ASSERT_LE(error, std::fabs(double{bf16_value(up)} - x)) << x;
    ASSERT_LE(error, std::fabs(double{bf16_value(down)} - x)) << x;
  }
}

TEST(CudaPadding, SymmetricPaddingIsCuDnnsOwn) {
  const PaddingPlan plan = plan_padding(1, 1, 2, 2);
  EXPECT_EQ(plan.pad_h, 1);
  EXPECT_EQ(plan.pad_w, 2);
  EXPECT_FALSE(plan.copies());
}

TEST(CudaPadding, TheExtraRowGoesWhereThereIsMorePadding) {
  // TensorFlow SAME, 3x3 stride 2 on 32x32: 0 above and left, 1 below and right.
  const PaddingPlan same = plan_padding(0, 1, 0, 1);
  EXPECT_EQ(same.pad_h, 0);
  EXPECT_EQ(same.pad_w, 0);
  EXPECT_EQ(same.extra_top, 0);
  EXPECT_EQ(same.extra_bottom, 1);
  EXPECT_EQ(same.extra_left, 0);
  EXPECT_EQ(same.extra_right, 1);
  EXPECT_TRUE(same.copies());
  // 2 above, 3 below: cuDNN pads 2 on each side, one more row is copied in below.
  const PaddingPlan wide = plan_padding(3, 2, 1, 1);
  EXPECT_EQ(wide.pad_h, 2);
  EXPECT_EQ(wide.extra_top, 1);
  EXPECT_EQ(wide.extra_bottom, 0);
  EXPECT_EQ(wide.pad_w, 1);
  EXPECT_EQ(wide.extra_left + wide.extra_right, 0);
}

TEST(CudaLaunch, BlocksCoverEveryElementAndStayWithinTheGridLimit) {
  EXPECT_EQ(blocks_for(0), 1);  // a launch of zero blocks is an error; the loop runs no element
  EXPECT_EQ(blocks_for(1), 1);
  EXPECT_EQ(blocks_for(kThreads), 1);
  EXPECT_EQ(blocks_for(kThreads + 1), 2);
  EXPECT_EQ(blocks_for(1000, 64), 16);
  EXPECT_EQ(blocks_for(std::int64_t{1} << 40), kMaxBlocks);  // the grid-stride loop does the rest
  for (std::int64_t count : {1, 255, 256, 257, 100000, 16777217}) {
    const std::int64_t covered = std::int64_t{blocks_for(count)} * kThreads;
    EXPECT_GE(covered, count < kMaxBlocks * kThreads ? count : kMaxBlocks * kThreads);
    EXPECT_LT(covered - count, kThreads);
  }
}

TEST(CudaLaunch, DropoutStreamsAreTheCpuBackendsBlocks) {
  EXPECT_EQ(kDropoutBlock, 4096);
  EXPECT_EQ(dropout_streams(1), 1);
  EXPECT_EQ(dropout_streams(4096), 1);
  EXPECT_EQ(dropout_streams(4097), 2);
  EXPECT_EQ(dropout_streams(128 * 1000), 32);
}

}  // namespace
}  // namespace mbkit::backend::cuda
