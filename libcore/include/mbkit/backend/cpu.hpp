// The CPU backend: oneDNN primitives for convolution, pooling, batch norm and eltwise layers,
// oneDNN's sgemm for dense layers, and OpenMP loops for the rest, all on the same threads.
#pragma once

#include <memory>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend {

/// `threads` = 0 uses every core the process may run on.
std::unique_ptr<nn::Backend> make_cpu_backend(int threads);

}  // namespace mbkit::backend
