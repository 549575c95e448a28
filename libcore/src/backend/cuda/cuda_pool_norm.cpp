// Pooling (max, average, global average) on mbkit's own kernels, batch normalisation and local
// response normalisation on cuDNN. Pooling is not cuDNN's because its descriptor pads both sides
// alike, and TensorFlow's SAME pooling of the AMB models pads one row more below than above
// (cifar10-cnn's 3x3 stride-2 pools): the kernels take the CPU backend's rules for any padding, and
// their backward passes gather rather than scatter, so they are deterministic.
#include "cuda_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cuda {
namespace {

class PoolKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CudaTensor& output) override {
    const nn::Dims in = inputs[0]->dims();
    const nn::Dims out = node_.output;
    Plan plan;
    plan.geometry = {batch,          in.c,           in.h,           in.w,
                     out.h,          out.w,          node_.kernel_h, node_.kernel_w,
                     node_.stride_h, node_.stride_w, node_.pad_top,  node_.pad_left};
    if (node_.op == nn::Op::kMaxPool) {
      plan.argmax =
          DeviceMemory(static_cast<std::size_t>(batch) * out.size() * sizeof(std::int32_t));
    }
    output.allocate();
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const float* x = cuda(*args.inputs[0]).data();
    float* y = cuda(*args.output).data();
    if (node_.op == nn::Op::kMaxPool) {
      max_pool_forward(y, plan.argmax.as<std::int32_t>(), x, plan.geometry, stream());
    } else {
      avg_pool_forward(y, x, plan.geometry, stream());
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    Plan& plan = plans_.at(args.batch);
    const float* dy = cuda(*args.output_grad).data();
    float* dx = cuda(*args.input_grads[0]).data();
    if (node_.op == nn::Op::kMaxPool) {
      max_pool_backward(dx, dy, plan.argmax.as<std::int32_t>(), plan.geometry, stream());
    } else {
      avg_pool_backward(dx, dy, plan.geometry, stream());
    }
  }

 private:
  struct Plan {
    PoolGeometry geometry;
    DeviceMemory argmax;  ///< max pooling: the winner of each window
  };
  std::map<int, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------

/// Batch normalisation per channel (cuDNN's spatial mode; flat inputs are (N, C, 1, 1)). Training
/// normalises with the batch's statistics and updates the running ones in the state buffer as
/// the CPU backend does: running = (1 - momentum) running + momentum batch, the variance unbiased
/// (cuDNN's exponential average factor is that momentum). Evaluation uses the running ones.
/// cuDNN always applies a scale: a node without one (Node::scale false) gets a constant 1 per
/// channel, and its scale gradient goes to a scratch buffer nobody reads.
class BatchNormKernel final : public CudaKernel {
 public:
  BatchNormKernel(Context& context, const nn::Node& node)
      : CudaKernel(context, node), channels_(1, node.output.c, 1, 1) {
    if (node.epsilon < CUDNN_BN_MIN_EPSILON) {
      fail(cat("batch norm epsilon ", node.epsilon, " is below cuDNN's minimum ",
               CUDNN_BN_MIN_EPSILON));
    }
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CudaTensor& output) override {
    const nn::Dims dims = node_.output;
    auto plan = std::make_unique<Plan>();
    plan->x.set(batch, dims.c, dims.h, dims.w);
    const auto channels = static_cast<std::size_t>(dims.c);
    plan->saved = DeviceMemory(2 * channels * sizeof(float));  // mean, 1 / sqrt(var + eps)
    if (!node_.scale && ones_.bytes() == 0) {
      ones_ = DeviceMemory(channels * sizeof(float));
      fill(ones_.as<float>(), dims.c, 1.0f, stream());
      unused_scale_grad_ = DeviceMemory(channels * sizeof(float));
    }
    output.allocate();
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = *plans_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    const float* x = cuda(*args.inputs[0]).data();
    float* y = cuda(*args.output).data();
    if (!args.training) {
      MBKIT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, plan.x.get(), x, plan.x.get(), y,
          channels_.get(), scale(args), shift(args), args.state[0], args.state[1], node_.epsilon));
      return;
    }
    MBKIT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, plan.x.get(), x, plan.x.get(), y,
        channels_.get(), scale(args), shift(args), node_.momentum, args.state[0], args.state[1],
        node_.epsilon, saved_mean(plan), saved_inverse_deviation(plan)));
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = *plans_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    // The parameter gradients are always needed; the input's may not be (cuDNN still writes it).
    float* dx = nullptr;
    if (args.input_grads[0] != nullptr) {
      dx = cuda(*args.input_grads[0]).data();
    } else {
      if (plan.scratch_grad.bytes() == 0)
        plan.scratch_grad = DeviceMemory(cuda(*args.output).bytes());
      dx = plan.scratch_grad.as<float>();
    }
    MBKIT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, plan.x.get(),
        cuda(*args.inputs[0]).data(), plan.x.get(), cuda(*args.output_grad).data(), plan.x.get(),
        dx, channels_.get(), scale(args),
        node_.scale ? args.param_grads[0] : unused_scale_grad_.as<float>(),
        args.param_grads[node_.scale ? 1 : 0], node_.epsilon, saved_mean(plan),
        saved_inverse_deviation(plan)));
  }

 private:
  struct Plan {
    TensorDesc x;  ///< input, output and their gradients alike
    DeviceMemory saved, scratch_grad;
  };

  const float* scale(const nn::KernelArgs& args) const {
    return node_.scale ? args.params[0] : ones_.as<float>();
  }
  const float* shift(const nn::KernelArgs& args) const { return args.params[node_.scale ? 1 : 0]; }
  float* saved_mean(Plan& plan) const { return plan.saved.as<float>(); }
  float* saved_inverse_deviation(Plan& plan) const {
    return plan.saved.as<float>() + node_.output.c;
  }

  TensorDesc channels_;                    ///< (1, C, 1, 1): scale, shift, means and variances
  DeviceMemory ones_, unused_scale_grad_;  ///< without a learned scale: 1s, and its gradient
  std::map<int, std::unique_ptr<Plan>> plans_;
};

// ---------------------------------------------------------------------------------------------

/// Local response normalisation across channels on cuDNN: its window (floor((n - 1) / 2)
/// channels before the centre, the rest after) and its alpha / n are oneDNN's, the CPU
/// backend's (Node::lrn_alpha). cuDNN takes sizes 1 to 16, k >= 1e-5 and beta >= 0.01; the
/// models' LRN (9, 0.75, 1) is well inside.
class LrnKernel final : public CudaKernel {
 public:
  LrnKernel(Context& context, const nn::Node& node)
      : CudaKernel(context, node), descriptor_(create_descriptor()) {
    if (node.lrn_size < CUDNN_LRN_MIN_N || node.lrn_size > CUDNN_LRN_MAX_N ||
        node.lrn_k < CUDNN_LRN_MIN_K || node.lrn_beta < CUDNN_LRN_MIN_BETA) {
      fail(cat("LRN size ", node.lrn_size, ", k ", node.lrn_k, " and beta ", node.lrn_beta,
               " are outside cuDNN's range (size ", CUDNN_LRN_MIN_N, " to ", CUDNN_LRN_MAX_N,
               ", k >= ", CUDNN_LRN_MIN_K, ", beta >= ", CUDNN_LRN_MIN_BETA, ")"));
    }
    MBKIT_CUDNN_CHECK(cudnnSetLRNDescriptor(descriptor_.get(), static_cast<unsigned>(node.lrn_size),
                                            node.lrn_alpha, node.lrn_beta, node.lrn_k));
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CudaTensor& output) override {
    const nn::Dims dims = node_.output;
    plans_[batch] = std::make_unique<TensorDesc>(batch, dims.c, dims.h, dims.w);
    output.allocate();
  }

  void do_forward(nn::KernelArgs& args) override {
    const TensorDesc& x = *plans_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    MBKIT_CUDNN_CHECK(cudnnLRNCrossChannelForward(
        context_.cudnn, descriptor_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x.get(),
        cuda(*args.inputs[0]).data(), &zero, x.get(), cuda(*args.output).data()));
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    const TensorDesc& x = *plans_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    MBKIT_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
        context_.cudnn, descriptor_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x.get(),
        cuda(*args.output).data(), x.get(), cuda(*args.output_grad).data(), x.get(),
        cuda(*args.inputs[0]).data(), &zero, x.get(), cuda(*args.input_grads[0]).data()));
  }

 private:
  struct DestroyDescriptor {
    void operator()(cudnnLRNDescriptor_t descriptor) const {
      cudnnDestroyLRNDescriptor(descriptor);
    }
  };
  using Descriptor = std::unique_ptr<cudnnLRNStruct, DestroyDescriptor>;

  static Descriptor create_descriptor() {
    cudnnLRNDescriptor_t descriptor = nullptr;
    MBKIT_CUDNN_CHECK(cudnnCreateLRNDescriptor(&descriptor));
    return Descriptor(descriptor);
  }

  Descriptor descriptor_;
  std::map<int, std::unique_ptr<TensorDesc>> plans_;  ///< input, output and their gradients
};

}  // namespace

std::unique_ptr<nn::Kernel> make_pool_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<PoolKernel>(context, node);
}

std::unique_ptr<nn::Kernel> make_batch_norm_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<BatchNormKernel>(context, node);
}

std::unique_ptr<nn::Kernel> make_lrn_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<LrnKernel>(context, node);
}

}  // namespace mbkit::backend::cuda
