// The key of the CUDA backend's convolution algorithm cache: everything cuDNN's choice of
// algorithm depends on, so that a layer shape benchmarked once (cudnnFind*, costly: it runs every
// algorithm) is looked up afterwards by every layer and network of the process with that shape.
// A pure host struct (no CUDA headers), so that the key and its hash are tested on machines
// without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mbkit::backend::cuda {

/// The three convolution passes, each with its own algorithm family in cuDNN.
enum class ConvPass : std::uint8_t { kForward, kBackwardData, kBackwardFilter };

struct ConvKey {
  ConvPass pass = ConvPass::kForward;
  int batch = 0;
  int in_channels = 0, in_h = 0, in_w = 0;  ///< the input as cuDNN sees it (padded if needed)
  int out_channels = 0;
  int kernel_h = 0, kernel_w = 0;
  int pad_h = 0, pad_w = 0;  ///< symmetric: cuDNN's descriptor has one pad per dimension
  int stride_h = 1, stride_w = 1;
  int dilation_h = 1, dilation_w = 1;
  /// cuDNN math type (CUDNN_FMA_MATH for fp32 results comparable with the CPU) and data type,
  /// as their enum values: a later tf32/bf16 run must not reuse an fp32 choice.
  int math_type = 0;
  int data_type = 0;
  /// --precision (an nn::Precision's value): a choice measured at one precision is never reused
  /// at another, even where the math and data types alone would not tell them apart.
  int precision = 0;

  bool operator==(const ConvKey&) const = default;

  /// "fwd n128 c16x32x32 k32 3x3 pad1x1 stride1x1 dil1x1 math2 type0 fp32", for logs and
  /// messages.
  std::string text() const {
    static const char* const kPass[] = {"fwd", "bwd-data", "bwd-filter"};
    static const char* const kPrecision[] = {"fp32", "tf32", "bf16", "precision?"};
    auto s = [](int value) { return std::to_string(value); };
    return std::string(kPass[static_cast<int>(pass)]) + " n" + s(batch) + " c" + s(in_channels) +
           "x" + s(in_h) + "x" + s(in_w) + " k" + s(out_channels) + " " + s(kernel_h) + "x" +
           s(kernel_w) + " pad" + s(pad_h) + "x" + s(pad_w) + " stride" + s(stride_h) + "x" +
           s(stride_w) + " dil" + s(dilation_h) + "x" + s(dilation_w) + " math" + s(math_type) +
           " type" + s(data_type) + " " +
           kPrecision[precision >= 0 && precision < 3 ? precision : 3];
  }
};

struct ConvKeyHash {
  /// Every field mixed in (SplitMix64's finaliser after each), so that keys differing in any
  /// one field land in different buckets.
  std::size_t operator()(const ConvKey& key) const noexcept {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL;
    auto mix = [&h](std::int64_t value) {
      h ^= static_cast<std::uint64_t>(value) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
      h ^= h >> 31;
    };
    mix(static_cast<int>(key.pass));
    for (int value :
         {key.batch, key.in_channels, key.in_h, key.in_w, key.out_channels, key.kernel_h,
          key.kernel_w, key.pad_h, key.pad_w, key.stride_h, key.stride_w, key.dilation_h,
          key.dilation_w, key.math_type, key.data_type, key.precision}) {
      mix(value);
    }
    return static_cast<std::size_t>(h);
  }
};

/// How an asymmetrically padded convolution (TensorFlow's SAME with an odd total, e.g. a 3x3
/// stride-2 layer on an even input: 0 rows above, 1 below) runs on cuDNN, whose descriptor pads
/// both sides alike: the input is copied into a buffer with the extra rows and columns of zeros
/// on the side that has more padding, and cuDNN pads the rest symmetrically.
struct PaddingPlan {
  int pad_h = 0, pad_w = 0;  ///< cuDNN's symmetric padding
  int extra_top = 0, extra_bottom = 0, extra_left = 0, extra_right = 0;  ///< copied in
  bool copies() const { return extra_top + extra_bottom + extra_left + extra_right > 0; }
};

inline PaddingPlan plan_padding(int top, int bottom, int left, int right) {
  PaddingPlan plan;
  plan.pad_h = top < bottom ? top : bottom;
  plan.pad_w = left < right ? left : right;
  plan.extra_top = top - plan.pad_h;
  plan.extra_bottom = bottom - plan.pad_h;
  plan.extra_left = left - plan.pad_w;
  plan.extra_right = right - plan.pad_w;
  return plan;
}

}  // namespace mbkit::backend::cuda
