// Fused optimizer updates: one kernel per rule over the whole flat parameter buffer, reading each
// parameter, gradient and state value once. The arithmetic is the CPU optimizers'
// (optim/optimizer.cpp) operation for operation, with explicit round-to-nearest intrinsics so
// that nvcc cannot contract a multiply and an add into an FMA (the CPU build does not): the GPU's
// update is then the CPU's, bit for bit.
#include "kernels.hpp"
#include "mbkit/backend/cuda/check.hpp"
#include "mbkit/backend/cuda/launch.hpp"

namespace mbkit::backend::cuda {
namespace {

#define MBKIT_GRID_LOOP(i, count)                                                         \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (count); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

/// g + decay * p, or g alone without decay (the CPU leaves the term out then too).
__device__ float decayed(float g, float p, float decay) {
  return decay == 0.0f ? g : __fadd_rn(g, __fmul_rn(decay, p));
}

__global__ void sgd_kernel(OptimizerArgs a) {
  MBKIT_GRID_LOOP(i, a.count) {
    const float grad = decayed(a.grads[i], a.params[i], a.weight_decay);
    a.params[i] = __fsub_rn(a.params[i], __fmul_rn(a.lr, grad));
  }
}

__global__ void momentum_kernel(OptimizerArgs a) {
  MBKIT_GRID_LOOP(i, a.count) {
    const float grad = decayed(a.grads[i], a.params[i], a.weight_decay);
    const float acc = __fadd_rn(__fmul_rn(a.momentum, a.state0[i]), grad);
    a.state0[i] = acc;
    a.params[i] = __fsub_rn(a.params[i], __fmul_rn(a.lr, acc));
  }
}

__global__ void nesterov_kernel(OptimizerArgs a) {
  MBKIT_GRID_LOOP(i, a.count) {
    const float grad = decayed(a.grads[i], a.params[i], a.weight_decay);
    const float acc = __fadd_rn(__fmul_rn(a.momentum, a.state0[i]), grad);
    a.state0[i] = acc;
    const float step = __fadd_rn(grad, __fmul_rn(a.momentum, acc));
    a.params[i] = __fsub_rn(a.params[i], __fmul_rn(a.lr, step));
  }
}

// TF1's RMSProp: ms = d ms + (1 - d) g^2; mom = mu mom + lr g / sqrt(ms + eps); p -= mom. The
// CPU adds the weight decay term even when it is 0 (g + 0 * p): so does this.
__global__ void rmsprop_kernel(OptimizerArgs a) {
  MBKIT_GRID_LOOP(i, a.count) {
    const float grad = __fadd_rn(a.grads[i], __fmul_rn(a.weight_decay, a.params[i]));
    const float ms = __fadd_rn(__fmul_rn(a.beta2, a.state0[i]),
                               __fmul_rn(a.one_minus_beta2, __fmul_rn(grad, grad)));
    a.state0[i] = ms;
    const float root = __fsqrt_rn(__fadd_rn(ms, a.epsilon));
    const float mom =
        __fadd_rn(__fmul_rn(a.momentum, a.state1[i]), __fdiv_rn(__fmul_rn(a.lr, grad), root));
    a.state1[i] = mom;
    a.params[i] = __fsub_rn(a.params[i], mom);
  }
}

// TF1's Adam with the bias corrections folded into lr by the caller; epsilon outside the root.
__global__ void adam_kernel(OptimizerArgs a) {
  MBKIT_GRID_LOOP(i, a.count) {
    const float grad = __fadd_rn(a.grads[i], __fmul_rn(a.weight_decay, a.params[i]));
    const float m = __fadd_rn(__fmul_rn(a.beta1, a.state0[i]), __fmul_rn(a.one_minus_beta1, grad));
    const float v = __fadd_rn(__fmul_rn(a.beta2, a.state1[i]),
                              __fmul_rn(a.one_minus_beta2, __fmul_rn(grad, grad)));
    a.state0[i] = m;
    a.state1[i] = v;
    const float step = __fdiv_rn(__fmul_rn(a.lr, m), __fadd_rn(__fsqrt_rn(v), a.epsilon));
    a.params[i] = __fsub_rn(a.params[i], step);
  }
}

#undef MBKIT_GRID_LOOP

}  // namespace

void optimizer_step(const OptimizerArgs& args, cudaStream_t stream) {
  if (args.count <= 0) return;
  const int blocks = blocks_for(args.count);
  switch (args.rule) {
    case OptimizerArgs::Rule::kSgd:
      sgd_kernel<<<blocks, kThreads, 0, stream>>>(args);
      break;
    case OptimizerArgs::Rule::kMomentum:
      momentum_kernel<<<blocks, kThreads, 0, stream>>>(args);
      break;
    case OptimizerArgs::Rule::kNesterov:
      nesterov_kernel<<<blocks, kThreads, 0, stream>>>(args);
      break;
    case OptimizerArgs::Rule::kRmsProp:
      rmsprop_kernel<<<blocks, kThreads, 0, stream>>>(args);
      break;
    case OptimizerArgs::Rule::kAdam:
      adam_kernel<<<blocks, kThreads, 0, stream>>>(args);
      break;
  }
  MBKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace mbkit::backend::cuda
