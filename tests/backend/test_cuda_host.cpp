// What of the CUDA backend is host arithmetic, tested without a GPU: the convolution algorithm
// cache's key and hash, the padding plan for asymmetric convolutions, and launch geometry.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

#include "mbkit/backend/cuda/conv_key.hpp"
#include "mbkit/backend/cuda/launch.hpp"

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
            "fwd n128 c16x32x32 k16 3x3 pad1x1 stride1x1 dil1x1 math2 type0");
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
