// The seam between networks and the hardware they run on. A Backend turns each node of a Graph
// into a Kernel and owns the memory activations live in; the CPU backend (oneDNN) is
// mbkit/backend/cpu, a CUDA backend (cuDNN, cuBLAS) plugs in the same way, without changing
// graphs, models or the Network that runs them.
//
// Flat buffers (nn/buffer.hpp) are the backend's too: a Network's parameters, gradients and
// state and an optimizer's state arrays live in Buffers it makes, kernels get pointers into them,
// and the optimizer update is a backend operation over them. A host reaches them only through
// copy_to_host / copy_from_host, which count the bytes they move (a CPU training step moves
// none; a GPU one only what ps, async and checkpoints need).
//
// Activations are Tensors: a batch of samples of a node's Dims, in a memory layout the backend
// chooses (the CPU backend keeps convolutional activations in oneDNN's blocked formats from one
// layer to the next, reordering only where a layout must change). Gradients of an activation
// have the same layout as the activation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mbkit/nn/buffer.hpp"
#include "mbkit/nn/graph.hpp"
#include "mbkit/nn/precision.hpp"

namespace mbkit::nn {

/// A batch of activations. Only the backend that made it reads or writes its memory.
class Tensor {
 public:
  virtual ~Tensor() = default;
  int batch() const { return batch_; }
  Dims dims() const { return dims_; }

 protected:
  Tensor(int batch, Dims dims) : batch_(batch), dims_(dims) {}
  int batch_;
  Dims dims_;
};

/// Everything a kernel reads and writes in one forward or backward pass.
struct KernelArgs {
  int batch = 0;
  std::vector<Tensor*> inputs;
  Tensor* output = nullptr;
  /// Backward only: the gradient of the output, and where to write each input's gradient
  /// (overwritten; null where no gradient is needed, e.g. the network's input).
  Tensor* output_grad = nullptr;
  std::vector<Tensor*> input_grads;
  /// This node's parameters and state in the flat buffers, one pointer per ParamSpec.
  std::vector<const float*> params;
  /// Backward only: where to write each parameter's gradient (overwritten).
  std::vector<float*> param_grads;
  std::vector<float*> state;
  bool training = false;
  std::uint64_t seed = 0;  ///< per step and node: dropout masks
  // The loss node only.
  const std::int32_t* labels = nullptr;  ///< batch labels (host memory)
  double loss_sum = 0;                   ///< forward: sum over the batch of per-sample losses
  std::int64_t correct = 0;              ///< forward: samples whose top-1 class is the label
  double loss_scale = 1.0;               ///< backward: d loss / d (sum of per-sample losses)
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Called once for each batch size before that size is run: chooses the output's layout and
  /// allocates it, and builds whatever the kernel needs for that size (oneDNN primitives).
  virtual void prepare(int batch, std::span<Tensor* const> inputs, Tensor& output) = 0;
  /// Called after prepare() for the same batch size with the gradient tensors of the inputs
  /// (null where an input needs none): builds what backward() will need, so that nothing is
  /// left to build at the first step (and what was picked can be inspected before any runs).
  virtual void prepare_backward(int /*batch*/, std::span<Tensor* const> /*input_grads*/) {}
  virtual void forward(KernelArgs& args) = 0;
  virtual void backward(KernelArgs& args) = 0;

  // Step graphs (Backend::begin_capture): what a replayed recording cannot do by itself. A
  // kernel's recorded launches must be right for any later step: a value that changes every
  // step (a dropout seed) is read from device memory these hooks fill, not a launch parameter.
  /// The host work of forward() before a replay of its recording (the loss kernel checks the
  /// batch's labels and puts them where the recorded copy reads them; dropout its seed).
  virtual void before_replay(KernelArgs& /*args*/) {}
  /// After a replay has finished: what forward() reports (the loss kernel's loss_sum, correct).
  virtual void after_replay(KernelArgs& /*args*/) {}
};

/// A recording of queued work (a CUDA graph), replayed as one launch.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  /// Queues the recorded work again; false, queuing nothing, when memory it recorded has moved
  /// since (a grown workspace): the caller records it again.
  virtual bool replay() = 0;
};

/// Device time of a backend's queued work, for the virtual clock: on a GPU a step's work is the
/// device's, and the host's CPU time (launching kernels, then waiting) says little about it.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  /// Marks the start in the device's queue.
  virtual void start() = 0;
  /// Waits for the work queued since start(); its device seconds.
  virtual double seconds() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu: oneDNN 2.6.3, 2 threads".
  virtual std::string description() const = 0;
  virtual int threads() const = 0;
  /// Readies the calling thread to run this backend's work, where the backend was made on
  /// another thread (--emulate's worker threads): the CPU backend gives it the backend's thread
  /// count, which OpenMP keeps per thread.
  virtual void use_from_this_thread() {}
  /// Whether this backend has a kernel for `op`: a Network refuses a graph with an op its
  /// backend lacks before building anything, and backend parity tests skip what is not there.
  virtual bool supports(Op op) const = 0;

  virtual std::unique_ptr<Kernel> make_kernel(const Graph& graph, int node) = 0;
  /// An empty tensor for a node's output; its producer's prepare() gives it a layout and memory.
  virtual std::unique_ptr<Tensor> make_tensor(int batch, Dims dims) = 0;
  /// A tensor of the same shape and layout (a gradient, or a scratch for summing gradients).
  virtual std::unique_ptr<Tensor> make_tensor_like(const Tensor& like) = 0;
  /// Points the network's input tensor at a batch of images in host memory (N, C, H, W floats),
  /// or copies them to the device. The memory must stay valid until the batch is done.
  virtual void set_input(Tensor& input, const float* images) = 0;
  /// Copies a tensor to host memory in (N, C, H, W) order.
  virtual void read(const Tensor& tensor, float* host) const = 0;
  /// Fills a tensor from host memory in (N, C, H, W) order (tests, gradient checks).
  virtual void write(Tensor& tensor, const float* host) = 0;
  /// destination += source (same layout): gradients of an activation used twice.
  virtual void accumulate(Tensor& destination, const Tensor& source) = 0;
  /// Waits for queued work (a no-op on the CPU).
  virtual void synchronize() {}
  /// A timer of the device's queue, or nullptr where the work runs on the host's CPU (the
  /// virtual clock then reads the worker's CPU time).
  virtual std::unique_ptr<DeviceTimer> make_device_timer() { return nullptr; }

  // Flat buffers.
  /// `floats` zeros in backend memory.
  virtual std::unique_ptr<Buffer> make_buffer(std::size_t floats) = 0;
  /// Whether a Buffer's data() is host memory (the CPU): HostViews are then views, not copies.
  virtual bool host_accessible() const = 0;
  /// host = source[offset, offset + host.size()): counted in copied().to_host, also on the CPU.
  void copy_to_host(const Buffer& source, std::size_t offset, std::span<float> host);
  /// destination[offset, offset + host.size()) = host: counted in copied().from_host.
  void copy_from_host(std::span<const float> host, Buffer& destination, std::size_t offset);
  /// Bytes copied each way by copy_to_host / copy_from_host (and so by HostViews) so far.
  CopyCounts copied() const { return {to_host_bytes_.load(), from_host_bytes_.load()}; }
  /// destination[to, to + count) = source[from, from + count), in backend memory (no host copy).
  virtual void copy(const Buffer& source, std::size_t from, Buffer& destination, std::size_t to,
                    std::size_t count) = 0;
  /// buffer[offset, offset + count) = value.
  virtual void fill(Buffer& buffer, std::size_t offset, std::size_t count, float value) = 0;
  /// destination[0, count) += source[0, count): micro-batch gradients summed.
  virtual void add(Buffer& destination, const Buffer& source, std::size_t count) = 0;
  /// One optimizer update (its pointers are into this backend's buffers).
  virtual void optimizer_step(const OptimizerUpdate& update) = 0;
  /// What convolutions and dense products compute in (--precision); fp32 unless the backend
  /// was made for another.
  virtual Precision precision() const { return Precision::kFp32; }

  // Step graphs: a training step's queued work recorded once and replayed (CUDA graphs), so
  // that a step costs one launch instead of hundreds. Network::train uses them.
  /// Whether begin_capture() can record (false on the CPU, which queues nothing).
  virtual bool can_capture() const { return false; }
  /// From now on, work queued on this backend is recorded instead of run, until end_capture().
  /// Nothing that waits for the device or allocates may happen meanwhile.
  virtual void begin_capture();
  /// The recording since begin_capture(), ready to replay; null with the reason in *why_not when
  /// it failed (nothing recorded has run: the caller runs the work again without recording).
  virtual std::unique_ptr<StepGraph> end_capture(std::string* why_not);
  /// As set_input, but the input tensor keeps one address for every batch (a recording reads
  /// it there): the batch is copied in on the backend's queue.
  virtual void set_input_fixed(Tensor& input, const float* images) { set_input(input, images); }

 protected:
  /// The copies themselves; ranges are checked and bytes counted by the public functions.
  virtual void read_buffer(const Buffer& source, std::size_t offset, std::span<float> host) = 0;
  virtual void write_buffer(std::span<const float> host, Buffer& destination,
                            std::size_t offset) = 0;

 private:
  std::atomic<std::uint64_t> to_host_bytes_{0};
  std::atomic<std::uint64_t> from_host_bytes_{0};
};

// Backends are made by name in mbkit/backend/factory.hpp.

}  // namespace mbkit::nn
