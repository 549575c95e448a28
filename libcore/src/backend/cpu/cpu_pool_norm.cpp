// Pooling (max, average, global average) and batch normalisation on oneDNN primitives, in the
// layout of their input.
#include <algorithm>

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {
namespace {

using algorithm = dnnl::algorithm;
using prop_kind = dnnl::prop_kind;
using format_tag = memory::format_tag;
using flags = dnnl::normalization_flags;

class PoolKernel final : public CpuKernel {
 public:
  PoolKernel(Context& context, const nn::Node& node)
      : CpuKernel(context, node),
        // Average pooling divides by the pixels inside the image (TensorFlow's SAME pooling).
        algorithm_(node.op == nn::Op::kMaxPool ? algorithm::pooling_max
                                               : algorithm::pooling_avg_exclude_padding),
        strides_{node.stride_h, node.stride_w},
        kernel_{node.kernel_h, node.kernel_w},
        padding_l_{node.pad_top, node.pad_left},
        padding_r_{node.pad_bottom, node.pad_right} {}

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    const nn::Dims out = node_.output;
    const memory::desc dst_any({batch, out.c, out.h, out.w}, memory::data_type::f32,
                               format_tag::any);
    Plan plan;
    dnnl::pooling_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algorithm_, input.desc(), dst_any, strides_, kernel_,
         padding_l_, padding_r_},
        context_.engine);
    record("pooling forward", forward_pd);
    plan.forward = dnnl::pooling_forward(forward_pd);
    output.allocate(forward_pd.dst_desc(), context_);
    if (algorithm_ == algorithm::pooling_max) {
      plan.workspace = memory(forward_pd.workspace_desc(), context_.engine);
    }
    dnnl::pooling_backward::primitive_desc backward_pd(
        {algorithm_, input.desc(), output.desc(), strides_, kernel_, padding_l_, padding_r_},
        context_.engine, forward_pd);
    record("pooling backward", backward_pd);
    plan.backward = dnnl::pooling_backward(backward_pd);
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    std::unordered_map<int, memory> arguments = {{DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
                                                 {DNNL_ARG_DST, cpu(*args.output).mem()}};
    if (plan.workspace) arguments[DNNL_ARG_WORKSPACE] = plan.workspace;
    execute(plan.forward, arguments);
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    Plan& plan = plans_.at(args.batch);
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_DIFF_DST, cpu(*args.output_grad).mem()},
        {DNNL_ARG_DIFF_SRC, cpu(*args.input_grads[0]).mem()}};
    if (plan.workspace) arguments[DNNL_ARG_WORKSPACE] = plan.workspace;
    execute(plan.backward, arguments);
  }

 private:
  struct Plan {
    dnnl::pooling_forward forward;
    dnnl::pooling_backward backward;
    memory workspace;
  };
  algorithm algorithm_;
  memory::dims strides_, kernel_, padding_l_, padding_r_;
  std::map<int, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------

/// Batch normalisation over N (and H, W) per channel, with learned scale and shift. Training
/// normalises with the batch's statistics and updates the running ones as PyTorch does
/// (running = (1 - momentum) running + momentum batch, the variance unbiased); evaluation uses
/// the running statistics.
class BatchNormKernel final : public CpuKernel {
 public:
  BatchNormKernel(Context& context, const nn::Node& node)
      : CpuKernel(context, node),
        channel_desc_({node.output.c}, memory::data_type::f32, format_tag::a) {}

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    const auto epsilon = static_cast<float>(node_.epsilon);
    const flags scale_shift = flags::use_scale | flags::use_shift;
    Plan plan;
    dnnl::batch_normalization_forward::primitive_desc training_pd(
        {prop_kind::forward_training, input.desc(), epsilon, scale_shift}, context_.engine);
    record("batch norm forward (training)", training_pd);
    plan.training = dnnl::batch_normalization_forward(training_pd);
    dnnl::batch_normalization_forward::primitive_desc inference_pd(
        {prop_kind::forward_inference, input.desc(), epsilon,
         scale_shift | flags::use_global_stats},
        context_.engine);
    record("batch norm forward (inference)", inference_pd);
    plan.inference = dnnl::batch_normalization_forward(inference_pd);
    output.allocate(training_pd.dst_desc(), context_);
    dnnl::batch_normalization_backward::primitive_desc backward_pd(
        {prop_kind::backward, input.desc(), input.desc(), epsilon, scale_shift}, context_.engine,
        training_pd);
    record("batch norm backward", backward_pd);
    plan.backward = dnnl::batch_normalization_backward(backward_pd);
    plan.mean = memory(training_pd.mean_desc(), context_.engine);
    plan.variance = memory(training_pd.variance_desc(), context_.engine);
    // Pixels per channel in the batch, for the unbiased running variance.
    const nn::Dims dims = node_.output;
    plan.count = static_cast<double>(batch) * dims.h * dims.w;
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    memory running_mean = channel(args.state[0]);
    memory running_var = channel(args.state[1]);
    std::unordered_map<int, memory> arguments = {{DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
                                                 {DNNL_ARG_DST, cpu(*args.output).mem()},
                                                 {DNNL_ARG_SCALE, channel(args.params[0])},
                                                 {DNNL_ARG_SHIFT, channel(args.params[1])}};
    if (!args.training) {
      arguments[DNNL_ARG_MEAN] = running_mean;
      arguments[DNNL_ARG_VARIANCE] = running_var;
      execute(plan.inference, arguments);
      return;
    }
    arguments[DNNL_ARG_MEAN] = plan.mean;
    arguments[DNNL_ARG_VARIANCE] = plan.variance;
    execute(plan.training, arguments);
    const auto* mean = static_cast<const float*>(plan.mean.get_data_handle());
    const auto* variance = static_cast<const float*>(plan.variance.get_data_handle());
    const auto momentum = static_cast<float>(node_.momentum);
    const auto unbiased = static_cast<float>(plan.count > 1 ? plan.count / (plan.count - 1) : 1.0);
    for (int c = 0; c < node_.output.c; ++c) {
      args.state[0][c] = (1.0f - momentum) * args.state[0][c] + momentum * mean[c];
      args.state[1][c] = (1.0f - momentum) * args.state[1][c] + momentum * variance[c] * unbiased;
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    // The parameter gradients are always needed; the input's may not be (then it goes to a
    // scratch buffer the primitive still has to write).
    nn::Tensor* grad_in = args.input_grads[0];
    if (grad_in == nullptr && !plan.scratch_grad) {
      plan.scratch_grad = memory(cpu(*args.inputs[0]).desc(), context_.engine);
    }
    execute(plan.backward,
            {{DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
             {DNNL_ARG_MEAN, plan.mean},
             {DNNL_ARG_VARIANCE, plan.variance},
             {DNNL_ARG_DIFF_DST, cpu(*args.output_grad).mem()},
             {DNNL_ARG_SCALE, channel(args.params[0])},
             {DNNL_ARG_SHIFT, channel(args.params[1])},
             {DNNL_ARG_DIFF_SRC, grad_in != nullptr ? cpu(*grad_in).mem() : plan.scratch_grad},
             {DNNL_ARG_DIFF_SCALE, channel(args.param_grads[0])},
             {DNNL_ARG_DIFF_SHIFT, channel(args.param_grads[1])}});
  }

 private:
  struct Plan {
    dnnl::batch_normalization_forward training, inference;
    dnnl::batch_normalization_backward backward;
    memory mean, variance, scratch_grad;
    double count = 0;
  };

  memory channel(const float* values) const {
    return memory(channel_desc_, context_.engine, const_cast<float*>(values));
  }

  memory::desc channel_desc_;
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_pool_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<PoolKernel>(context, node);
}

std::unique_ptr<nn::Kernel> make_batch_norm_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<BatchNormKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
