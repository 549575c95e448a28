// The CUDA backend (libmbkit-cuda only; the core reaches it through the plugin, see
// mbkit/backend/cuda_plugin.hpp): cuDNN convolution, batch norm and activations, cuBLAS dense
// layers, and mbkit's own kernels for pooling, dropout, residual adds, the loss and the
// optimizers, all on one GPU's stream.
#pragma once

#include <memory>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend::cuda {

/// A backend on GPU `gpu` (an index among the visible devices, already checked).
std::unique_ptr<nn::Backend> make_cuda_backend(int gpu);

}  // namespace mbkit::backend::cuda
