// The per-element arithmetic of the CUDA backend's pooling, dropout and loss kernels, as functions
// a GPU thread and the host both run: the kernels (libcore/src/backend/cuda/kernels.cu) loop over
// elements calling them, and tests/backend/test_cuda_host.cpp runs them on the host against the
// CPU backend, so the index arithmetic and the random masks are checked without a GPU.
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define MBKIT_HOST_DEVICE __host__ __device__
#else
#define MBKIT_HOST_DEVICE
#endif

namespace mbkit::backend::cuda {

/// Pooling of (batch, channels, in_h, in_w) into (batch, channels, out_h, out_w): output (oy, ox)
/// reads input rows [oy * stride_h - pad_top, + kernel_h) and the columns alike, those outside
/// the image left out (padding never wins a max and is not counted in an average: the CPU
/// backend's rules, oneDNN's pooling_max and pooling_avg_exclude_padding).
struct PoolGeometry {
  int batch = 0, channels = 0;
  int in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;

  MBKIT_HOST_DEVICE std::int64_t outputs() const {
    return static_cast<std::int64_t>(batch) * channels * out_h * out_w;
  }
  MBKIT_HOST_DEVICE std::int64_t inputs() const {
    return static_cast<std::int64_t>(batch) * channels * in_h * in_w;
  }
};

/// A copy of (batch, channels, h, w) inside a zero-padded (padded_h, padded_w) one.
struct PadGeometry {
  int batch = 0, channels = 0;
  int h = 0, w = 0;                ///< the unpadded tensor
  int padded_h = 0, padded_w = 0;  ///< the padded one
  int top = 0, left = 0;           ///< where the unpadded tensor starts in it
};

/// The outputs along one dimension whose windows hold input position y: [first, last], empty
/// when first > last.
MBKIT_HOST_DEVICE inline void windows_over(int y, int pad, int kernel, int stride, int outputs,
                                           int& first, int& last) {
  const int shifted = y + pad;  // position in the padded input
  first = shifted - kernel + 1 <= 0 ? 0 : (shifted - kernel + stride) / stride;
  last = shifted / stride;
  if (last > outputs - 1) last = outputs - 1;
}

/// The output windows that hold input element `i` of a pool, for the gradients' gathers: its
/// pixel, the first output of its plane, and the windows' rows [oy0, oy1] and columns [ox0, ox1].
struct CoveringWindows {
  int x = 0, y = 0;
  std::int64_t base = 0;
  int oy0 = 0, oy1 = 0, ox0 = 0, ox1 = 0;
};

MBKIT_HOST_DEVICE inline CoveringWindows covering_windows(std::int64_t i, const PoolGeometry& g) {
  CoveringWindows w;
  w.x = static_cast<int>(i % g.in_w);
  w.y = static_cast<int>((i / g.in_w) % g.in_h);
  const std::int64_t plane = i / (static_cast<std::int64_t>(g.in_w) * g.in_h);
  w.base = plane * g.out_h * g.out_w;
  windows_over(w.y, g.pad_top, g.kernel_h, g.stride_h, g.out_h, w.oy0, w.oy1);
  windows_over(w.x, g.pad_left, g.kernel_w, g.stride_w, g.out_w, w.ox0, w.ox1);
  return w;
}

/// Pixels of window (oy, ox) inside the image.
MBKIT_HOST_DEVICE inline int window_pixels(int oy, int ox, const PoolGeometry& g) {
  const int y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
  const int y_begin = y0 > 0 ? y0 : 0, x_begin = x0 > 0 ? x0 : 0;
  const int y_end = y0 + g.kernel_h < g.in_h ? y0 + g.kernel_h : g.in_h;
  const int x_end = x0 + g.kernel_w < g.in_w ? x0 + g.kernel_w : g.in_w;
  return (y_end > y_begin ? y_end - y_begin : 0) * (x_end > x_begin ? x_end - x_begin : 0);
}

/// Output `i` of a max pool, and in `where` the winner's index in its (h, w) plane: the first
/// largest value in row-major window order.
MBKIT_HOST_DEVICE inline float max_pool_at(std::int64_t i, const float* in, const PoolGeometry& g,
                                           int& where) {
  const int ox = static_cast<int>(i % g.out_w);
  const int oy = static_cast<int>((i / g.out_w) % g.out_h);
  const std::int64_t plane = i / (static_cast<std::int64_t>(g.out_w) * g.out_h);
  const float* x = in + plane * g.in_h * g.in_w;
  const int y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
  float best = 0.0f;
  where = -1;
  for (int y = y0 < 0 ? 0 : y0; y < y0 + g.kernel_h && y < g.in_h; ++y) {
    for (int xx = x0 < 0 ? 0 : x0; xx < x0 + g.kernel_w && xx < g.in_w; ++xx) {
      const float value = x[y * g.in_w + xx];
      if (where < 0 || value > best) {
        best = value;
        where = y * g.in_w + xx;
      }
    }
  }
  return best;
}

/// Input `i`'s gradient of a max pool: the output gradients of the windows it won, added in
/// window order (a gather: no atomics, deterministic).
MBKIT_HOST_DEVICE inline float max_pool_grad_at(std::int64_t i, const float* dy,
                                                const std::int32_t* argmax, const PoolGeometry& g) {
  const CoveringWindows w = covering_windows(i, g);
  const int self = w.y * g.in_w + w.x;
  float sum = 0.0f;
  for (int oy = w.oy0; oy <= w.oy1; ++oy) {
    for (int ox = w.ox0; ox <= w.ox1; ++ox) {
      const std::int64_t o = w.base + oy * g.out_w + ox;
      if (argmax[o] == self) sum += dy[o];
    }
  }
  return sum;
}

/// Output `i` of an average pool.
MBKIT_HOST_DEVICE inline float avg_pool_at(std::int64_t i, const float* in, const PoolGeometry& g) {
  const int ox = static_cast<int>(i % g.out_w);
  const int oy = static_cast<int>((i / g.out_w) % g.out_h);
  const std::int64_t plane = i / (static_cast<std::int64_t>(g.out_w) * g.out_h);
  const float* x = in + plane * g.in_h * g.in_w;
  const int y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
  float sum = 0.0f;
  for (int y = y0 < 0 ? 0 : y0; y < y0 + g.kernel_h && y < g.in_h; ++y) {
    for (int xx = x0 < 0 ? 0 : x0; xx < x0 + g.kernel_w && xx < g.in_w; ++xx) {
      sum += x[y * g.in_w + xx];
    }
  }
  const int pixels = window_pixels(oy, ox, g);
  return pixels > 0 ? sum / static_cast<float>(pixels) : 0.0f;
}

/// Input `i`'s gradient of an average pool: each window's output gradient over its pixels.
MBKIT_HOST_DEVICE inline float avg_pool_grad_at(std::int64_t i, const float* dy,
                                                const PoolGeometry& g) {
  const CoveringWindows w = covering_windows(i, g);
  float sum = 0.0f;
  for (int oy = w.oy0; oy <= w.oy1; ++oy) {
    for (int ox = w.ox0; ox <= w.ox1; ++ox) {
      sum += dy[w.base + oy * g.out_w + ox] / static_cast<float>(window_pixels(oy, ox, g));
    }
  }
  return sum;
}

/// Softmax cross-entropy of one row of `classes` logits: the probabilities into p, and the
/// sample's loss -log p[label] returned; `hit` says whether the first largest logit is the
/// label's (the CPU backend takes the top class from the logits too). Shifted by the largest
/// logit, so exp never overflows.
MBKIT_HOST_DEVICE inline double softmax_cross_entropy_row(const float* z, int classes, int label,
                                                          float* p, bool& hit) {
  int best = 0;
  for (int k = 1; k < classes; ++k) best = z[k] > z[best] ? k : best;
  const float top = z[best];
  float sum = 0.0f;
  for (int k = 0; k < classes; ++k) sum += expf(z[k] - top);
  const float log_sum = logf(sum);
  for (int k = 0; k < classes; ++k) p[k] = expf(z[k] - top - log_sum);
  hit = best == label;
  return -static_cast<double>(z[label] - top - log_sum);
}

/// The random numbers of mbkit::Rng(seed, stream) (util/random: xoshiro256** seeded through
/// SplitMix64), step for step, for a GPU thread: dropout draws the CPU backend's masks.
class DropoutStream {
 public:
  MBKIT_HOST_DEVICE DropoutStream(std::uint64_t seed, std::uint64_t stream) {
    std::uint64_t mixer = stream;
    std::uint64_t state = seed ^ splitmix64(mixer);
    for (auto& word : s_) word = splitmix64(state);
  }

  MBKIT_HOST_DEVICE std::uint32_t next_u32() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return static_cast<std::uint32_t>(result >> 32);
  }

 private:
  MBKIT_HOST_DEVICE static std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  MBKIT_HOST_DEVICE static std::uint64_t rotl(std::uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4];
};

}  // namespace mbkit::backend::cuda
