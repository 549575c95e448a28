// The CPU backend: oneDNN primitives for convolution, pooling, batch norm and eltwise layers,
// oneDNN's sgemm for dense layers, and OpenMP loops for the rest, all on the same threads.
//
// oneDNN has, for most primitives, jit kernels for each instruction set (SSE4.1, AVX2,
// AVX-512, ...) and a portable reference implementation ("ref:any") that is 10 to 1000 times
// slower. Which one it picks depends on the CPU and on the memory formats asked for, so the
// backend asks again with other formats or algorithms whenever it is offered a reference one,
// and records what it built: implementations() lists it (tests/backend checks every zoo model
// at every instruction set level), and a reference implementation left is warned about.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend {

/// `threads` = 0 uses every core the process may run on. With `fuse_layers`, a relu right after
/// a batch norm or a residual add that nothing else reads runs inside that layer's kernel (passes
/// over the activation fewer each way, the same bits); false keeps one kernel per layer (tests
/// compare the two).
std::unique_ptr<nn::Backend> make_cpu_backend(int threads, bool fuse_layers = true);

/// A primitive the CPU backend built for a layer, and oneDNN's implementation of it on this CPU
/// ("jit:avx2", "brg:avx512_core", "x64:gemm:jit", "ref:any").
struct PrimitiveImpl {
  std::string layer;      ///< the node's name ("conv1")
  std::string primitive;  ///< "convolution backward weights", "reorder", ...
  int batch = 0;          ///< the batch size it was built for
  std::string impl;       ///< oneDNN's impl_info_str()
  bool reference = false;
};

/// Whether oneDNN's name of an implementation is one of its reference ones ("ref:any", ...).
bool is_reference_impl(std::string_view impl);

/// Every primitive `backend` (made by make_cpu_backend) has built so far, in the order built.
std::vector<PrimitiveImpl> implementations(const nn::Backend& backend);

}  // namespace mbkit::backend
