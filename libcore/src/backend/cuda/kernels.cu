// The CUDA backend's own kernels (declared in kernels.hpp): grid-stride loops, one thread per
// output element unless said otherwise.
#include <cuda_bf16.h>

#include "kernels.hpp"
#include "mbkit/backend/cuda/check.hpp"
#include "mbkit/backend/cuda/kernel_math.hpp"
#include "mbkit/backend/cuda/launch.hpp"

namespace mbkit::backend::cuda {
namespace {

#define MBKIT_GRID_LOOP(i, count)                                                         \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (count); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

__global__ void fill_kernel(float* data, std::int64_t count, float value) {
  MBKIT_GRID_LOOP(i, count) data[i] = value;
}

__global__ void accumulate_kernel(float* destination, const float* source, std::int64_t count) {
  MBKIT_GRID_LOOP(i, count) destination[i] = __fadd_rn(destination[i], source[i]);
}

__global__ void add_kernel(float* out, const float* a, const float* b, std::int64_t count) {
  MBKIT_GRID_LOOP(i, count) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void broadcast_rows_kernel(float* y, const float* bias, int rows, int columns) {
  MBKIT_GRID_LOOP(i, static_cast<std::int64_t>(rows) * columns) y[i] = bias[i % columns];
}

__global__ void column_sums_kernel(float* sums, const float* x, int rows, int columns) {
  MBKIT_GRID_LOOP(j, columns) {
    float sum = 0.0f;
    for (int i = 0; i < rows; ++i)
      sum = __fadd_rn(sum, x[static_cast<std::int64_t>(i) * columns + j]);
    sums[j] = sum;
  }
}

__global__ void pad_kernel(float* padded, const float* src, PadGeometry g) {
  const std::int64_t count =
      static_cast<std::int64_t>(g.batch) * g.channels * g.padded_h * g.padded_w;
  MBKIT_GRID_LOOP(i, count) {
    const int x = static_cast<int>(i % g.padded_w) - g.left;
    const int y = static_cast<int>((i / g.padded_w) % g.padded_h) - g.top;
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.padded_w) * g.padded_h);
    const bool inside = x >= 0 && x < g.w && y >= 0 && y < g.h;
    padded[i] = inside ? src[(plane * g.h + y) * g.w + x] : 0.0f;
  }
}

__global__ void crop_kernel(float* dst, const float* padded, PadGeometry g) {
  const std::int64_t count = static_cast<std::int64_t>(g.batch) * g.channels * g.h * g.w;
  MBKIT_GRID_LOOP(i, count) {
    const int x = static_cast<int>(i % g.w);
    const int y = static_cast<int>((i / g.w) % g.h);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.w) * g.h);
    dst[i] = padded[(plane * g.padded_h + y + g.top) * g.padded_w + x + g.left];
  }
}

__global__ void max_pool_forward_kernel(float* out, std::int32_t* argmax, const float* in,
                                        PoolGeometry g) {
  MBKIT_GRID_LOOP(i, g.outputs()) {
    int where = -1;
    out[i] = max_pool_at(i, in, g, where);
    argmax[i] = where;
  }
}

__global__ void max_pool_backward_kernel(float* dx, const float* dy, const std::int32_t* argmax,
                                         PoolGeometry g) {
  MBKIT_GRID_LOOP(i, g.inputs()) dx[i] = max_pool_grad_at(i, dy, argmax, g);
}

__global__ void avg_pool_forward_kernel(float* out, const float* in, PoolGeometry g) {
  MBKIT_GRID_LOOP(i, g.outputs()) out[i] = avg_pool_at(i, in, g);
}

__global__ void avg_pool_backward_kernel(float* dx, const float* dy, PoolGeometry g) {
  MBKIT_GRID_LOOP(i, g.inputs()) dx[i] = avg_pool_grad_at(i, dy, g);
}

/// One thread per block of kDropoutBlock elements, drawing its masks in order from
/// Rng(seed, block).
__global__ void dropout_forward_kernel(float* y, std::uint8_t* mask, const float* x,
                                       std::int64_t count, std::int64_t streams, std::uint64_t seed,
                                       const std::uint64_t* seed_at, std::uint64_t threshold,
                                       float scale) {
  const std::uint64_t step_seed = seed_at != nullptr ? *seed_at : seed;
  MBKIT_GRID_LOOP(block, streams) {
    DropoutStream rng(step_seed, static_cast<std::uint64_t>(block));
    const std::int64_t end = min(count, (block + 1) * kDropoutBlock);
    for (std::int64_t i = block * kDropoutBlock; i < end; ++i) {
      const bool keep = rng.next_u32() >= threshold;
      mask[i] = keep;
      y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
    }
  }
}

__global__ void dropout_backward_kernel(float* dx, const float* dy, const std::uint8_t* mask,
                                        std::int64_t count, float scale) {
  MBKIT_GRID_LOOP(i, count) dx[i] = mask[i] ? __fmul_rn(dy[i], scale) : 0.0f;
}

/// One thread per sample: the classes of this toolkit's models are few (10 to 1000).
__global__ void loss_forward_kernel(float* probabilities, double* losses, std::int32_t* hits,
                                    const float* logits, const std::int32_t* labels, int batch,
                                    int classes) {
  MBKIT_GRID_LOOP(n, batch) {
    bool hit = false;
    losses[n] = softmax_cross_entropy_row(logits + n * classes, classes, labels[n],
                                          probabilities + n * classes, hit);
    hits[n] = hit;
  }
}

/// One thread: the sums in sample order, as the CPU backend adds them.
__global__ void loss_totals_kernel(LossTotals* totals, const double* losses,
                                   const std::int32_t* hits, int batch) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double loss = 0.0;
  long long correct = 0;
  for (int n = 0; n < batch; ++n) {
    loss += losses[n];
    correct += hits[n];
  }
  totals->loss_sum = loss;
  totals->correct = correct;
}

__global__ void loss_backward_kernel(float* grad, const float* probabilities,
                                     const std::int32_t* labels, int batch, int classes,
                                     float scale) {
  MBKIT_GRID_LOOP(i, static_cast<std::int64_t>(batch) * classes) {
    const auto n = static_cast<int>(i / classes);
    const auto k = static_cast<int>(i % classes);
    const float g = __fmul_rn(probabilities[i], scale);
    grad[i] = k == labels[n] ? __fsub_rn(g, scale) : g;
  }
}

__global__ void to_bf16_kernel(std::uint16_t* to, const float* from, std::int64_t count) {
  MBKIT_GRID_LOOP(i, count) to[i] = __bfloat16_as_ushort(__float2bfloat16_rn(from[i]));
}

__global__ void from_bf16_kernel(float* to, const std::uint16_t* from, std::int64_t count) {
  MBKIT_GRID_LOOP(i, count) to[i] = __uint_as_float(static_cast<unsigned int>(from[i]) << 16);
}

#undef MBKIT_GRID_LOOP

}  // namespace

void fill(float* data, std::int64_t count, float value, cudaStream_t stream) {
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, value);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void accumulate(float* destination, const float* source, std::int64_t count, cudaStream_t stream) {
  accumulate_kernel<<<blocks_for(count), kThreads, 0, stream>>>(destination, source, count);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void add(float* out, const float* a, const float* b, std::int64_t count, cudaStream_t stream) {
  add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, a, b, count);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void broadcast_rows(float* y, const float* bias, int rows, int columns, cudaStream_t stream) {
  broadcast_rows_kernel<<<blocks_for(static_cast<std::int64_t>(rows) * columns), kThreads, 0,
                          stream>>>(y, bias, rows, columns);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void column_sums(float* sums, const float* x, int rows, int columns, cudaStream_t stream) {
  column_sums_kernel<<<blocks_for(columns), kThreads, 0, stream>>>(sums, x, rows, columns);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void pad_copy(float* padded, const float* src, const PadGeometry& g, cudaStream_t stream) {
  const std::int64_t count =
      static_cast<std::int64_t>(g.batch) * g.channels * g.padded_h * g.padded_w;
  pad_kernel<<<blocks_for(count), kThreads, 0, stream>>>(padded, src, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void crop_copy(float* dst, const float* padded, const PadGeometry& g, cudaStream_t stream) {
  const std::int64_t count = static_cast<std::int64_t>(g.batch) * g.channels * g.h * g.w;
  crop_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, padded, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void max_pool_forward(float* y, std::int32_t* argmax, const float* x, const PoolGeometry& g,
                      cudaStream_t stream) {
  max_pool_forward_kernel<<<blocks_for(g.outputs()), kThreads, 0, stream>>>(y, argmax, x, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void max_pool_backward(float* dx, const float* dy, const std::int32_t* argmax,
                       const PoolGeometry& g, cudaStream_t stream) {
  max_pool_backward_kernel<<<blocks_for(g.inputs()), kThreads, 0, stream>>>(dx, dy, argmax, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void avg_pool_forward(float* y, const float* x, const PoolGeometry& g, cudaStream_t stream) {
  avg_pool_forward_kernel<<<blocks_for(g.outputs()), kThreads, 0, stream>>>(y, x, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void avg_pool_backward(float* dx, const float* dy, const PoolGeometry& g, cudaStream_t stream) {
  avg_pool_backward_kernel<<<blocks_for(g.inputs()), kThreads, 0, stream>>>(dx, dy, g);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void dropout_forward(float* y, std::uint8_t* mask, const float* x, std::int64_t count,
                     std::uint64_t seed, std::uint64_t threshold, float scale,
                     cudaStream_t stream) {
  const std::int64_t streams = dropout_streams(count);
  dropout_forward_kernel<<<blocks_for(streams), kThreads, 0, stream>>>(
      y, mask, x, count, streams, seed, nullptr, threshold, scale);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void dropout_forward_seed_at(float* y, std::uint8_t* mask, const float* x, std::int64_t count,
                             const std::uint64_t* seed, std::uint64_t threshold, float scale,
                             cudaStream_t stream) {
  const std::int64_t streams = dropout_streams(count);
  dropout_forward_kernel<<<blocks_for(streams), kThreads, 0, stream>>>(
      y, mask, x, count, streams, 0, seed, threshold, scale);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void dropout_backward(float* dx, const float* dy, const std::uint8_t* mask, std::int64_t count,
                      float scale, cudaStream_t stream) {
  dropout_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dx, dy, mask, count, scale);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void softmax_cross_entropy_forward(float* probabilities, double* losses, std::int32_t* hits,
                                   LossTotals* totals, const float* logits,
                                   const std::int32_t* labels, int batch, int classes,
                                   cudaStream_t stream) {
  loss_forward_kernel<<<blocks_for(batch, 64), 64, 0, stream>>>(probabilities, losses, hits, logits,
                                                                labels, batch, classes);
  MBKIT_CUDA_CHECK_LAUNCH();
  loss_totals_kernel<<<1, 1, 0, stream>>>(totals, losses, hits, batch);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void softmax_cross_entropy_backward(float* grad, const float* probabilities,
                                    const std::int32_t* labels, int batch, int classes, float scale,
                                    cudaStream_t stream) {
  loss_backward_kernel<<<blocks_for(static_cast<std::int64_t>(batch) * classes), kThreads, 0,
                         stream>>>(grad, probabilities, labels, batch, classes, scale);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void to_bf16(std::uint16_t* to, const float* from, std::int64_t count, cudaStream_t stream) {
  to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(to, from, count);
  MBKIT_CUDA_CHECK_LAUNCH();
}

void from_bf16(float* to, const std::uint16_t* from, std::int64_t count, cudaStream_t stream) {
  from_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(to, from, count);
  MBKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace mbkit::backend::cuda
