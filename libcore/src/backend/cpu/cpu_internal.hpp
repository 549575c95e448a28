// Internals of the CPU backend shared by its kernels (not installed).
//
// Activations are oneDNN memories. Convolution, pooling, batch norm and eltwise layers keep the
// blocked layouts oneDNN picks (nChw16c on AVX-512) from one layer to the next; a layout is
// changed (reordered) only where a consumer needs another one: dense layers and the loss read
// plain (N, features) rows. Parameters stay in their canonical layout in the flat buffer;
// convolution weights are reordered into the blocked layout at each forward pass (cheap next to
// the activations) and their gradients back.
//
// Every primitive is built through Context::record, which keeps oneDNN's implementation name;
// where oneDNN offers a reference implementation for a layout, the kernel asks again with
// others (first_fast) and reorders to them.
//
// A relu right after a batch norm or a residual add that nothing else reads runs inside it
// (oneDNN's fuse_norm_relu; the add's own loop): the producer writes the relu's output, and its
// backward pass masks the relu's gradient, which saves passes over the activation each way (the
// same bits). The producer's own output is then written only when something reads it
// (CpuTensor::refresh).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/backend.hpp"

namespace mbkit::backend::cpu {

using dnnl::memory;

/// The engine and stream every kernel of one backend shares, and what they built.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  /// Every primitive built so far, in the order built.
  std::vector<PrimitiveImpl> built;
  /// The layer whose kernel is preparing or running (null outside), and its batch: primitives
  /// built meanwhile, reorders included, are recorded as its.
  const nn::Node* layer = nullptr;
  int batch = 0;

  /// Records the implementation of `pd` for the current layer; warns (once per layer and
  /// primitive) when it is a reference one.
  void record(std::string_view primitive, const dnnl::primitive_desc_base& pd);
};

bool is_reference(const dnnl::primitive_desc_base& pd);

/// The first of `candidates` (functions that make a primitive descriptor with another algorithm
/// or other memory formats, preferred first) that oneDNN implements with other than a reference
/// implementation; candidates it does not implement at all are skipped. When every one is a
/// reference, the first that exists is returned (and record() warns about it).
template <class PrimitiveDesc>
PrimitiveDesc first_fast(std::initializer_list<std::function<PrimitiveDesc()>> candidates) {
  std::optional<PrimitiveDesc> fallback;
  std::optional<dnnl::error> failure;
  for (const auto& make : candidates) {
    try {
      PrimitiveDesc pd = make();
      if (!is_reference(pd)) return pd;
      if (!fallback) fallback = std::move(pd);
    } catch (const dnnl::error& error) {
      if (error.status != dnnl_unimplemented) throw;
      if (!failure) failure = error;
    }
  }
  if (fallback) return *std::move(fallback);
  throw *failure;
}

class CpuTensor final : public nn::Tensor {
 public:
  CpuTensor(int batch, nn::Dims dims) : Tensor(batch, dims) {}

  bool has_layout() const { return static_cast<bool>(memory_); }
  const memory::desc& desc() const { return desc_; }
  memory& mem() { return memory_; }
  const memory& mem() const { return memory_; }
  float* data() const { return static_cast<float*>(memory_.get_data_handle()); }
  /// Number of floats in memory, layout padding included.
  std::size_t floats() const { return desc_.get_size() / sizeof(float); }

  /// Gives the tensor a layout and memory of its own.
  void allocate(const memory::desc& desc, const Context& context);
  /// Gives the tensor a layout over memory it does not own (set later with set_handle).
  void alias(const memory::desc& desc, const Context& context, void* handle);
  void set_handle(void* handle) { memory_.set_data_handle(handle); }

  /// For an output its kernel writes only on demand (a batch norm fused with its relu): what
  /// brings its memory up to date before it is read.
  void set_refresh(std::function<void()> refresh) { refresh_ = std::move(refresh); }
  void refresh() const {
    if (refresh_) refresh_();
  }

 private:
  memory::desc desc_;
  memory memory_;
  std::function<void()> refresh_;
};

CpuTensor& cpu(nn::Tensor& tensor);
const CpuTensor& cpu(const nn::Tensor& tensor);

/// The plain (N, C, H, W) layout of `tensor`'s dims: "ab" for 2-D, "abcd" for 4-D descriptors.
memory::desc plain_like(const memory::desc& desc);
/// (N, C, H, W) plain, or (N, C) when `flat2d`.
memory::desc plain_desc(int batch, nn::Dims dims, bool flat2d);
/// The descriptor of a flat parameter: a canonical-layout view of the given shape.
memory::desc param_desc(const std::vector<std::int64_t>& shape);

/// A reorder between two fixed descriptors, built once.
class Reorder {
 public:
  Reorder() = default;
  /// Builds the reorder (recorded as the current layer's).
  Reorder(Context& context, const memory::desc& from, const memory::desc& to);
  explicit operator bool() const { return static_cast<bool>(primitive_); }
  void run(const Context& context, const memory& from, const memory& to) const;

 private:
  dnnl::reorder primitive_;
};

/// Base of every CPU kernel: turns oneDNN exceptions into one-line mbkit errors naming the
/// layer, and keeps per-batch-size state (oneDNN primitives are built once per shape).
class CpuKernel : public nn::Kernel {
 public:
  CpuKernel(Context& context, const nn::Node& node) : context_(context), node_(node) {}
  void prepare(int batch, std::span<nn::Tensor* const> inputs, nn::Tensor& output) final;
  void prepare_backward(int batch, std::span<nn::Tensor* const> input_grads) final;
  void forward(nn::KernelArgs& args) final;
  void backward(nn::KernelArgs& args) final;

 protected:
  virtual void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) = 0;
  virtual void do_prepare_backward(int /*batch*/, std::span<nn::Tensor* const> /*input_grads*/) {}
  virtual void do_forward(nn::KernelArgs& args) = 0;
  virtual void do_backward(nn::KernelArgs& args) = 0;
  void execute(const dnnl::primitive& primitive, const std::unordered_map<int, memory>& args);
  /// Records the implementation of a primitive this kernel built (see Context::record).
  void record(std::string_view primitive, const dnnl::primitive_desc_base& pd) {
    context_.record(primitive, pd);
  }
  Context& context_;
  const nn::Node& node_;
};

/// A kernel that can compute the relu that alone reads its output (batch norm, add).
class ReluFusable {
 public:
  /// From now on the relu runs inside this kernel where it can (called before any prepare).
  virtual void fuse_relu() = 0;
  /// Where the relu's output goes at `batch` (the relu's prepare, after this kernel's); false
  /// where this kernel does not fuse at that batch size's layout: the relu runs on its own.
  virtual bool set_relu_output(int batch, CpuTensor& relu_output) = 0;

 protected:
  ~ReluFusable() = default;
};

std::unique_ptr<nn::Kernel> make_input_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_dense_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_conv_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_pool_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_batch_norm_kernel(Context& context, const nn::Node& node);
/// The relu `node` run inside `producer`, the kernel of its input (which it alone reads): a
/// ReluFusable one (make_batch_norm_kernel's, make_add_kernel's).
std::unique_ptr<nn::Kernel> make_relu_in(Context& context, const nn::Node& node,
                                         nn::Kernel& producer);
std::unique_ptr<nn::Kernel> make_eltwise_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_dropout_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_flatten_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_add_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_loss_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_concat_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_lrn_kernel(Context& context, const nn::Node& node);

// Flat-buffer operations on host memory (cpu_buffers.cpp).
void optimizer_step(const nn::OptimizerUpdate& update);
void add_floats(float* destination, const float* source, std::size_t count);
void copy_floats(const float* source, float* destination, std::size_t count);

}  // namespace mbkit::backend::cpu
