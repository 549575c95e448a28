// The CUDA backend's own kernels (kernels.cu, optimizers.cu), as host functions that launch them
// on a stream. Every tensor is dense NCHW fp32 in device memory; counts are elements. Each
// launcher checks its launch (MBKIT_CUDA_CHECK_LAUNCH); none synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mbkit/backend/cuda/kernel_math.hpp"

namespace mbkit::backend::cuda {

// Elementwise.
void fill(float* data, std::int64_t count, float value, cudaStream_t stream);
/// destination += source
void accumulate(float* destination, const float* source, std::int64_t count, cudaStream_t stream);
/// out = a + b
void add(float* out, const float* a, const float* b, std::int64_t count, cudaStream_t stream);

// Dense layers.
/// Every row of y (rows x columns) = bias.
void broadcast_rows(float* y, const float* bias, int rows, int columns, cudaStream_t stream);
/// sums[j] = sum over rows i, in row order, of x[i][j] (deterministic, as the CPU backend adds).
void column_sums(float* sums, const float* x, int rows, int columns, cudaStream_t stream);

// Convolution with asymmetric padding (see PaddingPlan and PadGeometry).
/// padded = src placed at (top, left), zeros around it.
void pad_copy(float* padded, const float* src, const PadGeometry& geometry, cudaStream_t stream);
/// dst = the unpadded window of padded.
void crop_copy(float* dst, const float* padded, const PadGeometry& geometry, cudaStream_t stream);

// Pooling (mbkit/backend/cuda/kernel_math.hpp gives the rules). Backward passes gather (each
// input pixel sums the windows it is in): deterministic.
/// argmax: per output, the winning input pixel's index in its (h, w) plane.
void max_pool_forward(float* y, std::int32_t* argmax, const float* x, const PoolGeometry& geometry,
                      cudaStream_t stream);
void max_pool_backward(float* dx, const float* dy, const std::int32_t* argmax,
                       const PoolGeometry& geometry, cudaStream_t stream);
void avg_pool_forward(float* y, const float* x, const PoolGeometry& geometry, cudaStream_t stream);
void avg_pool_backward(float* dx, const float* dy, const PoolGeometry& geometry,
                       cudaStream_t stream);

// Dropout: masks from Rng(seed, block) over blocks of kDropoutBlock elements, bit for bit the
// CPU backend's (util/random: xoshiro256** seeded through SplitMix64).
/// mask[i] = keep; y[i] = keep ? x[i] * scale : 0. threshold: rate * 2^32.
void dropout_forward(float* y, std::uint8_t* mask, const float* x, std::int64_t count,
                     std::uint64_t seed, std::uint64_t threshold, float scale, cudaStream_t stream);
/// As dropout_forward, the seed read from device memory when the kernel runs: a step graph
/// replays the launch with each step's seed.
void dropout_forward_seed_at(float* y, std::uint8_t* mask, const float* x, std::int64_t count,
                             const std::uint64_t* seed, std::uint64_t threshold, float scale,
                             cudaStream_t stream);
void dropout_backward(float* dx, const float* dy, const std::uint8_t* mask, std::int64_t count,
                      float scale, cudaStream_t stream);

// Softmax cross-entropy over (batch, classes) rows.
struct LossTotals {
  double loss_sum = 0;    ///< sum of -log p[label], added in sample order
  long long correct = 0;  ///< samples whose first largest logit is the label's
};
/// probabilities = softmax(logits); totals (device memory) = the batch's sums.
void softmax_cross_entropy_forward(float* probabilities, double* losses, std::int32_t* hits,
                                   LossTotals* totals, const float* logits,
                                   const std::int32_t* labels, int batch, int classes,
                                   cudaStream_t stream);
/// grad = scale * (probabilities - onehot(label))
void softmax_cross_entropy_backward(float* grad, const float* probabilities,
                                    const std::int32_t* labels, int batch, int classes, float scale,
                                    cudaStream_t stream);

// Mixed precision (--precision bf16): bf16 values as their 16 bits (mbkit/backend/cuda/bf16.hpp).
/// to[i] = from[i] rounded to the nearest bf16, ties to even (bf16_bits on the host).
void to_bf16(std::uint16_t* to, const float* from, std::int64_t count, cudaStream_t stream);
/// to[i] = the fp32 value of from[i] (exact).
void from_bf16(float* to, const std::uint16_t* from, std::int64_t count, cudaStream_t stream);

// Fused optimizer updates over flat buffers (optimizers.cu), the rules of optim/optimizer.hpp
// with the CPU's roundings: no fused multiply-adds, IEEE division and square root, so that a GPU
// update equals the CPU's bit for bit.
struct OptimizerArgs {
  enum class Rule { kSgd, kMomentum, kNesterov, kRmsProp, kAdam };
  Rule rule = Rule::kSgd;
  std::int64_t count = 0;
  float* params = nullptr;
  const float* grads = nullptr;
  float* state0 = nullptr;  ///< momentum: a; rmsprop: ms; adam: m
  float* state1 = nullptr;  ///< rmsprop: mom; adam: v
  float lr = 0;             ///< adam: with both bias corrections folded in
  float weight_decay = 0;
  float momentum = 0;  ///< momentum's m, rmsprop's mu
  float beta1 = 0, one_minus_beta1 = 0;
  float beta2 = 0, one_minus_beta2 = 0;  ///< adam; rmsprop's decay and 1 - decay
  float epsilon = 0;
};
void optimizer_step(const OptimizerArgs& args, cudaStream_t stream);

}  // namespace mbkit::backend::cuda
