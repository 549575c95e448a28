// Internals of the CUDA backend shared by its kernels (not installed).
//
// Activations are dense NCHW fp32 in device memory ((N, features) for flat ones, the same bytes),
// so no layer ever changes a layout and flatten is a view. Every operation is queued on the
// backend's compute stream; cuDNN and cuBLAS are bound to it. Parameters, gradients and state
// arrive as pointers into the network's flat buffers, which must be device memory (the backend's
// own buffers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "kernels.hpp"
#include "mbkit/backend/cuda/check.hpp"
#include "mbkit/nn/backend.hpp"

namespace mbkit::backend::cuda {

/// A CUDA, cuDNN or cuBLAS handle released with its owner by `Destroy` (errors ignored: nothing
/// to do about them in teardown). Members of this type are released even when the owner's
/// constructor throws after making them, which raw handles released in a destructor are not.
template <class Handle, auto Destroy>
class Owned {
 public:
  Owned() = default;
  ~Owned() {
    if (handle_ != nullptr) Destroy(handle_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  /// Where the library's create call writes the new handle (the slot must be empty).
  Handle* out() { return &handle_; }
  Handle get() const { return handle_; }
  operator Handle() const { return handle_; }  // NOLINT: passed straight to the library calls

 private:
  Handle handle_ = nullptr;
};

using OwnedStream = Owned<cudaStream_t, &cudaStreamDestroy>;
using OwnedEvent = Owned<cudaEvent_t, &cudaEventDestroy>;

/// Device memory of a given size, freed with the owner.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A cuDNN tensor descriptor, 4-D NCHW (fp32 unless told: bf16 operands of --precision bf16).
class TensorDesc {
 public:
  TensorDesc();
  TensorDesc(int n, int c, int h, int w);
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(int n, int c, int h, int w, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

/// Everything the kernels of one backend share: the GPU, its streams, the library handles and
/// one workspace for cuDNN (grown on demand, never shrunk).
struct Context {
  explicit Context(int gpu);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int gpu = 0;
  std::string gpu_name;
  std::size_t gpu_memory = 0;  ///< bytes
  OwnedStream stream;          ///< compute
  OwnedStream copy_stream;     ///< host-to-device batches
  Owned<cudnnHandle_t, &cudnnDestroy> cudnn;
  Owned<cublasHandle_t, &cublasDestroy> cublas;
  int compute_major = 0, compute_minor = 0;  ///< the GPU's compute capability
  /// --precision of convolutions and dense products (set once, before any kernel is made).
  nn::Precision precision = nn::Precision::kFp32;

  /// Makes the GPU current on the calling thread (CUDA's current device is per thread, and a
  /// trainer may reach the backend from more than one: an exchange thread copying gradients).
  void activate() const;
  /// At least `bytes` of workspace (the previous contents are not kept).
  void* workspace(std::size_t bytes);
  void synchronize() const;
  /// Whether work queued on `stream` is being recorded (a step graph): nothing may wait for it.
  bool capturing() const;

  /// Bumped whenever the workspace moves: a step graph recorded before reads the old one.
  std::uint64_t workspace_generation = 0;

 private:
  DeviceMemory workspace_;
};

/// Page-locked host memory (asynchronous copies need it), freed with the owner.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory();
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  /// At least `bytes` (the previous contents are not kept).
  void reserve(std::size_t bytes);
  void* get() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class CudaTensor final : public nn::Tensor {
 public:
  CudaTensor(int batch, nn::Dims dims) : Tensor(batch, dims) {}

  std::int64_t count() const { return static_cast<std::int64_t>(batch()) * dims().size(); }
  std::size_t bytes() const { return static_cast<std::size_t>(count()) * sizeof(float); }
  float* data() const { return data_; }
  bool has_memory() const { return data_ != nullptr; }
  /// Memory of its own, batch x dims floats.
  void allocate();
  /// A view of another tensor's memory (flatten); set again at each forward pass.
  void alias(float* data) { data_ = data; }
  /// Back to memory of its own (allocated the first time), at the same address every call: the
  /// network's input under a step graph, which a recording reads there.
  void own() {
    if (memory_.get() == nullptr) memory_ = DeviceMemory(bytes());
    data_ = memory_.as<float>();
  }

 private:
  DeviceMemory memory_;
  float* data_ = nullptr;
};

CudaTensor& cuda(nn::Tensor& tensor);
const CudaTensor& cuda(const nn::Tensor& tensor);

/// Base of every CUDA kernel: failures name the layer; per-batch-size state is the subclass's.
class CudaKernel : public nn::Kernel {
 public:
  CudaKernel(Context& context, const nn::Node& node) : context_(context), node_(node) {}
  void prepare(int batch, std::span<nn::Tensor* const> inputs, nn::Tensor& output) final;
  void forward(nn::KernelArgs& args) final;
  void backward(nn::KernelArgs& args) final;

 protected:
  virtual void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CudaTensor& output) = 0;
  virtual void do_forward(nn::KernelArgs& args) = 0;
  virtual void do_backward(nn::KernelArgs& args) = 0;
  cudaStream_t stream() const { return context_.stream; }
  Context& context_;
  const nn::Node& node_;
};

/// The Context of a backend make_cuda_backend made (its GPU and compute stream, for NCCL), or
/// nullptr for any other backend.
Context* context_of(nn::Backend& backend);

std::unique_ptr<nn::Kernel> make_input_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_dense_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_conv_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_pool_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_batch_norm_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_lrn_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_activation_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_dropout_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_flatten_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_add_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_concat_kernel(Context& context, const nn::Node& node);
std::unique_ptr<nn::Kernel> make_loss_kernel(Context& context, const nn::Node& node);

}  // namespace mbkit::backend::cuda
