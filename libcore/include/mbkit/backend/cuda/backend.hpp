// The CUDA backend (libmbkit-cuda only; the core reaches it through the plugin, see
// mbkit/plugin/cuda_plugin.hpp): cuDNN convolution, batch norm and activations, cuBLAS dense
// layers, and mbkit's own kernels for pooling, dropout, residual adds, the loss and the
// optimizers, all on one GPU's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend::cuda {

/// A backend on GPU `gpu` (an index among the visible devices, already checked), computing
/// convolutions and dense products at `precision`.
std::unique_ptr<nn::Backend> make_cuda_backend(int gpu,
                                               nn::Precision precision = nn::Precision::kFp32);

/// Tests: `count` floats rounded to bf16 by the backend's cast kernel on GPU `gpu`, into `bits`
/// (host memory both), to be checked against the host's bf16_bits (mbkit/backend/cuda/bf16.hpp).
void round_to_bf16_on_gpu(int gpu, const float* values, std::uint16_t* bits, std::size_t count);

}  // namespace mbkit::backend::cuda
