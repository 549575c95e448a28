// CUDA kernels of the layout-free layers: input, relu/sigmoid/tanh (cuDNN activations), dropout,
// flatten, residual add, and the softmax cross-entropy loss.
#include <cstring>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/launch.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cuda {
namespace {

void copy_device(float* to, const float* from, std::size_t bytes, cudaStream_t stream) {
  MBKIT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
}

/// The network's input: the backend's set_input points it at the device buffer each batch is
/// copied into (two, taken in turn, so that a copy overlaps the step before).
class InputKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int, std::span<nn::Tensor* const>, CudaTensor& output) override {
    output.alias(nullptr);  // until set_input
  }
  void do_forward(nn::KernelArgs&) override {}
  void do_backward(nn::KernelArgs&) override {}
};

// ---------------------------------------------------------------------------------------------

/// relu, sigmoid, tanh with cuDNN. NaNs propagate, as on the CPU.
class ActivationKernel final : public CudaKernel {
 public:
  ActivationKernel(Context& context, const nn::Node& node) : CudaKernel(context, node) {
    cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
    switch (node.op) {
      case nn::Op::kRelu:
        mode = CUDNN_ACTIVATION_RELU;
        break;
      case nn::Op::kSigmoid:
        mode = CUDNN_ACTIVATION_SIGMOID;
        break;
      case nn::Op::kTanh:
        mode = CUDNN_ACTIVATION_TANH;
        break;
      default:
        fail(cat("activation kernel for ", nn::op_name(node.op)));
    }
    MBKIT_CUDNN_CHECK(cudnnCreateActivationDescriptor(activation_.out()));
    MBKIT_CUDNN_CHECK(cudnnSetActivationDescriptor(activation_, mode, CUDNN_PROPAGATE_NAN, 0.0));
  }
  ActivationKernel(const ActivationKernel&) = delete;
  ActivationKernel& operator=(const ActivationKernel&) = delete;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CudaTensor& output) override {
    const nn::Dims dims = node_.output;
    descs_[batch] = std::make_unique<TensorDesc>(batch, dims.c, dims.h, dims.w);
    output.allocate();
  }

  void do_forward(nn::KernelArgs& args) override {
    const TensorDesc& desc = *descs_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    MBKIT_CUDNN_CHECK(cudnnActivationForward(context_.cudnn, activation_, &one, desc.get(),
                                             cuda(*args.inputs[0]).data(), &zero, desc.get(),
                                             cuda(*args.output).data()));
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    const TensorDesc& desc = *descs_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    MBKIT_CUDNN_CHECK(cudnnActivationBackward(
        context_.cudnn, activation_, &one, desc.get(), cuda(*args.output).data(), desc.get(),
        cuda(*args.output_grad).data(), desc.get(), cuda(*args.inputs[0]).data(), &zero, desc.get(),
        cuda(*args.input_grads[0]).data()));
  }

 private:
  Owned<cudnnActivationDescriptor_t, &cudnnDestroyActivationDescriptor> activation_;
  std::map<int, std::unique_ptr<TensorDesc>> descs_;
};

// ---------------------------------------------------------------------------------------------

/// Inverted dropout with the CPU backend's masks (see dropout_forward in kernels.hpp): kept units
/// are scaled by 1 / (1 - rate) in training, evaluation is the identity.
/// Under a step graph the seed, which changes every step, is not a launch parameter (a replay
/// would draw the recorded step's masks): the recorded launch reads it from device memory, where
/// a recorded copy brings it from pinned memory that before_replay fills with the step's seed.
class DropoutKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void before_replay(nn::KernelArgs& args) override {
    if (args.training && node_.rate != 0.0)
      seeds_.at(args.batch).host.as<std::uint64_t>()[0] = args.seed;
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CudaTensor& output) override {
    output.allocate();
    masks_[batch] = DeviceMemory(static_cast<std::size_t>(output.count()));
    Seed& seed = seeds_[batch];  // in place: pinned memory does not move
    seed.host.reserve(sizeof(std::uint64_t));
    seed.device = DeviceMemory(sizeof(std::uint64_t));
  }

  void do_forward(nn::KernelArgs& args) override {
    const CudaTensor& input = cuda(*args.inputs[0]);
    CudaTensor& output = cuda(*args.output);
    if (!args.training || node_.rate == 0.0) {
      copy_device(output.data(), input.data(), output.bytes(), stream());
      return;
    }
    const auto threshold = static_cast<std::uint64_t>(node_.rate * 4294967296.0);
    if (context_.capturing()) {
      Seed& seed = seeds_.at(args.batch);
      before_replay(args);  // this step's seed, for the replay that follows the recording
      MBKIT_CUDA_CHECK(cudaMemcpyAsync(seed.device.get(), seed.host.get(), sizeof(std::uint64_t),
                                       cudaMemcpyHostToDevice, stream()));
      dropout_forward_seed_at(output.data(), masks_.at(args.batch).as<std::uint8_t>(), input.data(),
                              output.count(), seed.device.as<std::uint64_t>(), threshold, scale(),
                              stream());
      return;
    }
    dropout_forward(output.data(), masks_.at(args.batch).as<std::uint8_t>(), input.data(),
                    output.count(), args.seed, threshold, scale(), stream());
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    const CudaTensor& grad_out = cuda(*args.output_grad);
    CudaTensor& grad_in = cuda(*args.input_grads[0]);
    if (node_.rate == 0.0) {
      copy_device(grad_in.data(), grad_out.data(), grad_in.bytes(), stream());
      return;
    }
    dropout_backward(grad_in.data(), grad_out.data(), masks_.at(args.batch).as<std::uint8_t>(),
                     grad_in.count(), scale(), stream());
  }

 private:
  float scale() const { return static_cast<float>(1.0 / (1.0 - node_.rate)); }
  struct Seed {
    PinnedMemory host;    ///< the step's seed, written by the host before a replay
    DeviceMemory device;  ///< where the recorded launch reads it
  };
  std::map<int, DeviceMemory> masks_;
  std::map<int, Seed> seeds_;
};

// ---------------------------------------------------------------------------------------------

/// NCHW rows are already (N, C*H*W) in C, H, W order: the output is a view of the input.
class FlattenKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int, std::span<nn::Tensor* const> inputs, CudaTensor& output) override {
    output.alias(cuda(*inputs[0]).data());
  }

  void do_forward(nn::KernelArgs& args) override {
    cuda(*args.output).alias(cuda(*args.inputs[0]).data());
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    CudaTensor& grad_in = cuda(*args.input_grads[0]);
    copy_device(grad_in.data(), cuda(*args.output_grad).data(), grad_in.bytes(), stream());
  }
};

// ---------------------------------------------------------------------------------------------

/// Residual add: out = a + b; both inputs' gradients are the output's.
class AddKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int, std::span<nn::Tensor* const>, CudaTensor& output) override {
    output.allocate();
  }

  void do_forward(nn::KernelArgs& args) override {
    CudaTensor& output = cuda(*args.output);
    add(output.data(), cuda(*args.inputs[0]).data(), cuda(*args.inputs[1]).data(), output.count(),
        stream());
  }

  void do_backward(nn::KernelArgs& args) override {
    const CudaTensor& grad_out = cuda(*args.output_grad);
    for (nn::Tensor* grad : args.input_grads) {
      if (grad != nullptr)
        copy_device(cuda(*grad).data(), grad_out.data(), grad_out.bytes(), stream());
    }
  }
};

// ---------------------------------------------------------------------------------------------

/// Channel concatenation in NCHW: each sample's block of input k lands after the blocks of the
/// inputs before it, one strided 2-D copy per input (rows = samples); backward the reverse.
class ConcatKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int, std::span<nn::Tensor* const>, CudaTensor& output) override {
    output.allocate();
  }

  void do_forward(nn::KernelArgs& args) override {
    const CudaTensor& output = cuda(*args.output);
    const std::size_t row = sample_bytes(output);
    std::size_t offset = 0;
    for (nn::Tensor* input : args.inputs) {
      const CudaTensor& in = cuda(*input);
      const std::size_t width = sample_bytes(in);
      MBKIT_CUDA_CHECK(cudaMemcpy2DAsync(
          reinterpret_cast<char*>(output.data()) + offset, row, in.data(), width, width,
          static_cast<std::size_t>(output.batch()), cudaMemcpyDeviceToDevice, stream()));
      offset += width;
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    const CudaTensor& grad_out = cuda(*args.output_grad);
    const std::size_t row = sample_bytes(grad_out);
    std::size_t offset = 0;
    for (std::size_t k = 0; k < args.inputs.size(); ++k) {
      const std::size_t width = sample_bytes(cuda(*args.inputs[k]));
      if (args.input_grads[k] != nullptr) {
        MBKIT_CUDA_CHECK(cudaMemcpy2DAsync(cuda(*args.input_grads[k]).data(), width,
                                           reinterpret_cast<const char*>(grad_out.data()) + offset,
                                           row, width, static_cast<std::size_t>(grad_out.batch()),
                                           cudaMemcpyDeviceToDevice, stream()));
      }
      offset += width;
    }
  }

 private:
  static std::size_t sample_bytes(const CudaTensor& tensor) {
    return static_cast<std::size_t>(tensor.dims().size()) * sizeof(float);
  }
};

// ---------------------------------------------------------------------------------------------

/// Softmax cross-entropy on (N, classes) logits: the output holds the probabilities; forward
/// reports the summed loss and the top-1 hits (the one synchronisation of a training step: the
/// Network hands them back at once); backward writes loss_scale * (p - onehot(label)).
/// Labels go in and totals come out through pinned memory of each batch size's own, at fixed
/// addresses: a step graph records those copies, before_replay puts the next batch's labels
/// there, and after_replay reads the totals the replay left.
class LossKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void before_replay(nn::KernelArgs& args) override { stage_labels(args); }

  void after_replay(nn::KernelArgs& args) override { read_totals(args); }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CudaTensor& output) override {
    output.allocate();
    Plan& plan = plans_[batch];  // in place: pinned memory does not move
    const auto n = static_cast<std::size_t>(batch);
    plan.labels = DeviceMemory(n * sizeof(std::int32_t));
    plan.losses = DeviceMemory(n * sizeof(double));
    plan.hits = DeviceMemory(n * sizeof(std::int32_t));
    plan.totals = DeviceMemory(sizeof(LossTotals));
    plan.host_labels.reserve(n * sizeof(std::int32_t));
    plan.host_totals.reserve(sizeof(LossTotals));
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const int batch = args.batch;
    stage_labels(args);
    const std::size_t label_bytes = static_cast<std::size_t>(batch) * sizeof(std::int32_t);
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(plan.labels.get(), plan.host_labels.get(), label_bytes,
                                     cudaMemcpyHostToDevice, stream()));
    softmax_cross_entropy_forward(cuda(*args.output).data(), plan.losses.as<double>(),
                                  plan.hits.as<std::int32_t>(), plan.totals.as<LossTotals>(),
                                  cuda(*args.inputs[0]).data(), plan.labels.as<std::int32_t>(),
                                  batch, node_.output.c, stream());
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(plan.host_totals.get(), plan.totals.get(), sizeof(LossTotals),
                                     cudaMemcpyDeviceToHost, stream()));
    // Recording a step graph: the totals are known after its replay (after_replay).
    if (context_.capturing()) return;
    context_.synchronize();
    read_totals(args);
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    // The labels the forward pass copied (backward follows the forward of the same batch).
    softmax_cross_entropy_backward(cuda(*args.input_grads[0]).data(), cuda(*args.output).data(),
                                   plans_.at(args.batch).labels.as<std::int32_t>(), args.batch,
                                   node_.output.c, static_cast<float>(args.loss_scale), stream());
  }

 private:
  /// Checks the batch's labels and puts them in the pinned memory the label copy reads.
  void stage_labels(nn::KernelArgs& args) {
    const int classes = node_.output.c;
    for (int i = 0; i < args.batch; ++i) {
      const std::int32_t label = args.labels[i];
      if (label < 0 || label >= classes) {
        data_error(cat("label ", label, " is outside [0, ", classes, ") for the model's output"));
      }
    }
    std::memcpy(plans_.at(args.batch).host_labels.get(), args.labels,
                static_cast<std::size_t>(args.batch) * sizeof(std::int32_t));
  }

  /// The totals the last forward pass copied out (once it has finished).
  void read_totals(nn::KernelArgs& args) {
    LossTotals totals;
    std::memcpy(&totals, plans_.at(args.batch).host_totals.get(), sizeof totals);
    args.loss_sum = totals.loss_sum;
    args.correct = totals.correct;
  }

  struct Plan {
    DeviceMemory labels, losses, hits, totals;
    PinnedMemory host_labels, host_totals;
  };
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_input_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<InputKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_activation_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ActivationKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_dropout_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<DropoutKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_flatten_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<FlattenKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_add_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<AddKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_concat_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ConcatKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_loss_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<LossKernel>(context, node);
}

}  // namespace mbkit::backend::cuda
