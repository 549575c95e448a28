// 2-D convolution on oneDNN primitives, in the layouts oneDNN picks as fastest for the shape,
// with the direct algorithm (oneDNN's automatic choice takes Winograd for most 3x3 layers on
// AVX-512, which made resnet20's training step 1.20x slower on an AMD EPYC Zen 5: Winograd
// is faster only at 64 channels of 8x8 there), and never a reference implementation where
// another layout or algorithm has a fast one: the three primitives of a layer (forward, weight
// gradients, input gradients) each choose their own layouts, and the tensors they share are
// reordered between them. For example the AVX2 jit weight-gradient kernel wants a channel-blocked
// source, which the first layer's forward pass (one input channel, plain layout) does not use,
// and on SSE4.1 oneDNN's only fast backward kernels (gemm) want plain layouts throughout.
// Weights stay (out, in, kh, kw) in the flat buffer and are reordered to the primitive's layout
// at each forward pass; their gradients are reordered back.
#include <algorithm>

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {
namespace {

using algorithm = dnnl::algorithm;
using prop_kind = dnnl::prop_kind;
using format_tag = memory::format_tag;
using ForwardPd = dnnl::convolution_forward::primitive_desc;
using WeightsPd = dnnl::convolution_backward_weights::primitive_desc;
using DataPd = dnnl::convolution_backward_data::primitive_desc;

memory::desc any_like(const memory::desc& desc) {
  return memory::desc(desc.dims(), memory::data_type::f32, format_tag::any);
}

/// A tensor in the layout a primitive wants: the tensor itself where the layouts agree, else a
/// buffer and the reorder into it.
struct Relayout {
  memory buffer;
  Reorder into;

  Relayout() = default;
  Relayout(Context& context, const memory::desc& from, const memory::desc& to) {
    if (from == to) return;
    buffer = memory(to, context.engine);
    into = Reorder(context, from, to);
  }
  /// Reorders `from` if needed; the memory the primitive reads.
  memory operator()(const Context& context, const memory& from) const {
    if (!into) return from;
    into.run(context, from, buffer);
    return buffer;
  }
  /// The memory the primitive reads, reordered earlier.
  memory reordered(const memory& from) const { return into ? buffer : from; }
};

class ConvKernel final : public CpuKernel {
 public:
  ConvKernel(Context& context, const nn::Node& node)
      : CpuKernel(context, node),
        weights_user_(param_desc(node.params[0].shape)),
        weights_any_(any_like(weights_user_)),
        bias_desc_({node.units}, memory::data_type::f32, format_tag::a),
        strides_{node.stride_h, node.stride_w},
        padding_l_{node.pad_top, node.pad_left},
        padding_r_{node.pad_bottom, node.pad_right} {}

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc& in = cpu(*inputs[0]).desc();
    const nn::Dims out = node_.output;
    const memory::desc src_any = any_like(in);
    const memory::desc dst_any({batch, out.c, out.h, out.w}, memory::data_type::f32,
                               format_tag::any);
    Plan plan;
    // Forward: the fastest oneDNN has, in the layouts it prefers (the input reordered to them
    // where they differ from the previous layer's).
    plan.forward_pd = first_fast<ForwardPd>({
        [&] { return make_forward(algorithm::convolution_direct, src_any, dst_any); },
        [&] { return make_forward(algorithm::convolution_auto, src_any, dst_any); },
        [&] { return make_forward(algorithm::convolution_direct, in, dst_any); },
    });
    record("convolution forward", plan.forward_pd);
    plan.forward = dnnl::convolution_forward(plan.forward_pd);
    output.allocate(plan.forward_pd.dst_desc(), context_);
    const memory::desc& src = plan.forward_pd.src_desc();
    const memory::desc& dst = plan.forward_pd.dst_desc();
    plan.src = Relayout(context_, in, src);
    plan.weights = Relayout(context_, weights_user_, plan.forward_pd.weights_desc());

    // Weight gradients: on the forward pass's layouts where oneDNN has a fast kernel for them;
    // else on plain layouts (oneDNN's gemm kernel: on AVX2, mnist-cnn's first layer takes 7-12
    // ms a step there against 27-29 ms in the jit kernel, whose channel-blocked source pads its
    // one channel to 8); else in the layouts the primitive chooses itself. The input and the
    // output's gradient are reordered to the layouts chosen at each step.
    plan.weights_pd = first_fast<WeightsPd>({
        [&] { return make_weights(algorithm::convolution_direct, src, dst, plan.forward_pd); },
        [&] { return make_weights(algorithm::convolution_auto, src, dst, plan.forward_pd); },
        [&] {
          return make_weights(algorithm::convolution_direct, plain_like(in), plain_like(dst),
                              plan.forward_pd);
        },
        [&] { return make_weights(algorithm::convolution_direct, src_any, dst, plan.forward_pd); },
        [&] {
          return make_weights(algorithm::convolution_direct, src_any, dst_any, plan.forward_pd);
        },
    });
    record("convolution backward weights", plan.weights_pd);
    plan.backward_weights = dnnl::convolution_backward_weights(plan.weights_pd);
    if (!(plan.weights_pd.src_desc() == src)) {
      plan.weights_src = Relayout(context_, in, plan.weights_pd.src_desc());
    }
    plan.weights_grad_out = Relayout(context_, dst, plan.weights_pd.diff_dst_desc());
    if (!(plan.weights_pd.diff_weights_desc() == weights_user_)) {
      plan.weights_grad = memory(plan.weights_pd.diff_weights_desc(), context_.engine);
      plan.from_weights_grad =
          Reorder(context_, plan.weights_pd.diff_weights_desc(), weights_user_);
    }
    plans_[batch] = std::move(plan);
  }

  void do_prepare_backward(int batch, std::span<nn::Tensor* const> input_grads) override {
    // The input gradient's primitive, where the input needs one (the first layer's never does).
    Plan& plan = plans_.at(batch);
    if (input_grads[0] != nullptr && !plan.data) {
      plan.data = make_data_plan(plan, cpu(*input_grads[0]).desc());
    }
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const memory src = plan.src(context_, cpu(*args.inputs[0]).mem());
    const memory weights = plan.weights(context_, user_weights(args));
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, cpu(*args.output).mem()}};
    if (node_.bias) arguments[DNNL_ARG_BIAS] = bias_memory(args.params[1]);
    execute(plan.forward, arguments);
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const memory& input = cpu(*args.inputs[0]).mem();
    const memory& grad_out = cpu(*args.output_grad).mem();
    // The forward pass's source where this primitive has the same layout, else the input
    // reordered now.
    const memory src = plan.weights_pd.src_desc() == plan.forward_pd.src_desc()
                           ? plan.src.reordered(input)
                           : plan.weights_src(context_, input);
    const memory grad_for_weights = plan.weights_grad_out(context_, grad_out);
    memory weights_grad_user(weights_user_, context_.engine, args.param_grads[0]);
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_DIFF_DST, grad_for_weights},
        {DNNL_ARG_DIFF_WEIGHTS, plan.from_weights_grad ? plan.weights_grad : weights_grad_user}};
    if (node_.bias) arguments[DNNL_ARG_DIFF_BIAS] = bias_memory(args.param_grads[1]);
    execute(plan.backward_weights, arguments);
    if (plan.from_weights_grad) {
      plan.from_weights_grad.run(context_, plan.weights_grad, weights_grad_user);
    }

    if (args.input_grads[0] == nullptr) return;
    CpuTensor& grad_in = cpu(*args.input_grads[0]);
    if (!plan.data) plan.data = make_data_plan(plan, grad_in.desc());
    DataPlan& data = *plan.data;
    // The output's gradient as the weight-gradient primitive had it, where the layouts agree.
    const memory grad_for_data = data.pd.diff_dst_desc() == plan.weights_pd.diff_dst_desc()
                                     ? plan.weights_grad_out.reordered(grad_out)
                                     : data.grad_out(context_, grad_out);
    // The weights as the forward pass reordered them, where the layouts agree.
    const memory weights = data.pd.weights_desc() == plan.forward_pd.weights_desc()
                               ? plan.weights.reordered(user_weights(args))
                               : data.weights(context_, user_weights(args));
    execute(plan.backward_data,
            {{DNNL_ARG_DIFF_DST, grad_for_data},
             {DNNL_ARG_WEIGHTS, weights},
             {DNNL_ARG_DIFF_SRC, data.from_grad_in ? data.grad_in : grad_in.mem()}});
    if (data.from_grad_in) data.from_grad_in.run(context_, data.grad_in, grad_in.mem());
  }

 private:
  /// The input gradient: its primitive, the weights and output gradient in its layouts, and the
  /// gradient it writes reordered to the input's layout.
  struct DataPlan {
    DataPd pd;
    Relayout weights, grad_out;
    memory grad_in;
    Reorder from_grad_in;
  };

  struct Plan {
    ForwardPd forward_pd;
    WeightsPd weights_pd;
    dnnl::convolution_forward forward;
    dnnl::convolution_backward_weights backward_weights;
    dnnl::convolution_backward_data backward_data;
    Relayout src, weights, weights_src, weights_grad_out;
    memory weights_grad;
    Reorder from_weights_grad;
    std::optional<DataPlan> data;
  };

  ForwardPd make_forward(algorithm kind, const memory::desc& src, const memory::desc& dst) const {
    const auto desc =
        node_.bias
            ? dnnl::convolution_forward::desc(prop_kind::forward_training, kind, src, weights_any_,
                                              bias_desc_, dst, strides_, padding_l_, padding_r_)
            : dnnl::convolution_forward::desc(prop_kind::forward_training, kind, src, weights_any_,
                                              dst, strides_, padding_l_, padding_r_);
    return ForwardPd(desc, context_.engine);
  }

  WeightsPd make_weights(algorithm kind, const memory::desc& src, const memory::desc& dst,
                         const ForwardPd& hint) const {
    const auto desc =
        node_.bias ? dnnl::convolution_backward_weights::desc(kind, src, weights_any_, bias_desc_,
                                                              dst, strides_, padding_l_, padding_r_)
                   : dnnl::convolution_backward_weights::desc(kind, src, weights_any_, dst,
                                                              strides_, padding_l_, padding_r_);
    return WeightsPd(desc, context_.engine, hint);
  }

  DataPd make_data(algorithm kind, const memory::desc& src, const memory::desc& dst,
                   const ForwardPd& hint) const {
    const dnnl::convolution_backward_data::desc desc(kind, src, weights_any_, dst, strides_,
                                                     padding_l_, padding_r_);
    return DataPd(desc, context_.engine, hint);
  }

  DataPlan make_data_plan(Plan& plan, const memory::desc& in) {
    const memory::desc src_any = any_like(in);
    const memory::desc& dst = plan.forward_pd.dst_desc();
    const memory::desc dst_any = any_like(dst);
    DataPlan data;
    data.pd = first_fast<DataPd>({
        [&] { return make_data(algorithm::convolution_direct, src_any, dst, plan.forward_pd); },
        [&] { return make_data(algorithm::convolution_auto, src_any, dst, plan.forward_pd); },
        [&] { return make_data(algorithm::convolution_direct, src_any, dst_any, plan.forward_pd); },
    });
    record("convolution backward data", data.pd);
    plan.backward_data = dnnl::convolution_backward_data(data.pd);
    if (!(data.pd.weights_desc() == plan.forward_pd.weights_desc())) {
      data.weights = Relayout(context_, weights_user_, data.pd.weights_desc());
    }
    if (!(data.pd.diff_dst_desc() == plan.weights_pd.diff_dst_desc())) {
      data.grad_out = Relayout(context_, dst, data.pd.diff_dst_desc());
    }
    if (!(data.pd.diff_src_desc() == in)) {
      data.grad_in = memory(data.pd.diff_src_desc(), context_.engine);
      data.from_grad_in = Reorder(context_, data.pd.diff_src_desc(), in);
    }
    return data;
  }

  memory user_weights(const nn::KernelArgs& args) const {
    return memory(weights_user_, context_.engine, const_cast<float*>(args.params[0]));
  }

  memory bias_memory(const float* bias) const {
    return memory(bias_desc_, context_.engine, const_cast<float*>(bias));
  }

  memory::desc weights_user_, weights_any_, bias_desc_;
  memory::dims strides_, padding_l_, padding_r_;
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_conv_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ConvKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
