// 2-D convolution on oneDNN primitives, in the layouts oneDNN picks as fastest for the shape
// (Winograd for 3x3 kernels where it is faster).
// Weights stay (out, in, kh, kw) in the flat buffer and are reordered to the primitive's layout
// at each forward pass; their gradients are reordered back.
#include <algorithm>
#include <string_view>

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {
namespace {

using algorithm = dnnl::algorithm;
using prop_kind = dnnl::prop_kind;
using format_tag = memory::format_tag;

/// Winograd where oneDNN has a fast implementation for the shape, else the direct algorithm,
/// and never a reference (ref:any) implementation: for some shapes and thread counts the
/// automatic choice falls back to one, which is slower by orders of magnitude.
bool is_reference(const dnnl::primitive_desc_base& pd) {
  return std::string_view(pd.impl_info_str()).starts_with("ref");
}

template <class Make>
auto fastest(Make make) {
  auto pd = make(algorithm::convolution_auto);
  if (is_reference(pd)) pd = make(algorithm::convolution_direct);
  return pd;
}

class ConvKernel final : public CpuKernel {
 public:
  ConvKernel(Context& context, const nn::Node& node)
      : CpuKernel(context, node),
        weights_user_(param_desc(node.params[0].shape)),
        strides_{node.stride_h, node.stride_w},
        padding_l_{node.pad_top, node.pad_left},
        padding_r_{node.pad_bottom, node.pad_right} {}

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    const nn::Dims out = node_.output;
    const memory::dims src_dims = input.desc().dims();
    const memory::desc src_any(src_dims, memory::data_type::f32, format_tag::any);
    const memory::desc dst_any({batch, out.c, out.h, out.w}, memory::data_type::f32,
                               format_tag::any);
    const memory::desc weights_any(weights_user_.dims(), memory::data_type::f32, format_tag::any);
    const memory::desc bias_md({out.c}, memory::data_type::f32, format_tag::a);

    Plan plan;
    auto make_forward = [&](const memory::desc& source) {
      return fastest([&](algorithm kind) {
        const auto desc = node_.bias ? dnnl::convolution_forward::desc(
                                           prop_kind::forward_training, kind, source, weights_any,
                                           bias_md, dst_any, strides_, padding_l_, padding_r_)
                                     : dnnl::convolution_forward::desc(
                                           prop_kind::forward_training, kind, source, weights_any,
                                           dst_any, strides_, padding_l_, padding_r_);
        return dnnl::convolution_forward::primitive_desc(desc, context_.engine);
      });
    };
    auto make_backward_weights = [&](const dnnl::convolution_forward::primitive_desc& forward) {
      return fastest([&](algorithm kind) {
        const memory::desc& src = forward.src_desc();
        const memory::desc& dst = forward.dst_desc();
        const auto desc =
            node_.bias ? dnnl::convolution_backward_weights::desc(
                             kind, src, weights_any, bias_md, dst, strides_, padding_l_, padding_r_)
                       : dnnl::convolution_backward_weights::desc(kind, src, weights_any, dst,
                                                                  strides_, padding_l_, padding_r_);
        return dnnl::convolution_backward_weights::primitive_desc(desc, context_.engine, forward);
      });
    };
    plan.forward_pd = make_forward(src_any);
    auto weights_pd = make_backward_weights(plan.forward_pd);
    if (is_reference(weights_pd)) {
      // The layout oneDNN prefers for the forward pass (e.g. 3 input channels padded to a
      // block of 16) can leave only a reference kernel for the weight gradients: keep the
      // input's own layout instead.
      plan.forward_pd = make_forward(input.desc());
      weights_pd = make_backward_weights(plan.forward_pd);
    }
    plan.forward = dnnl::convolution_forward(plan.forward_pd);
    output.allocate(plan.forward_pd.dst_desc(), context_);

    // The source in the primitive's layout (usually already so, from the previous layer).
    if (!(plan.forward_pd.src_desc() == input.desc())) {
      plan.src = memory(plan.forward_pd.src_desc(), context_.engine);
      plan.to_src = Reorder(context_, input.desc(), plan.forward_pd.src_desc());
    }
    if (!(plan.forward_pd.weights_desc() == weights_user_)) {
      plan.weights = memory(plan.forward_pd.weights_desc(), context_.engine);
      plan.to_weights = Reorder(context_, weights_user_, plan.forward_pd.weights_desc());
    }
    const memory::desc& dst = plan.forward_pd.dst_desc();

    // Backward by weights: gradients into the primitive's preferred layout, then reordered.
    plan.backward_weights = dnnl::convolution_backward_weights(weights_pd);
    if (!(weights_pd.diff_weights_desc() == weights_user_)) {
      plan.weights_grad = memory(weights_pd.diff_weights_desc(), context_.engine);
      plan.from_weights_grad = Reorder(context_, weights_pd.diff_weights_desc(), weights_user_);
    }
    // Backward by data: written in the input's layout (reordered if the primitive wants
    // another).
    const auto data_pd = fastest([&](algorithm kind) {
      const dnnl::convolution_backward_data::desc desc(kind, src_any, weights_any, dst, strides_,
                                                       padding_l_, padding_r_);
      return dnnl::convolution_backward_data::primitive_desc(desc, context_.engine,
                                                             plan.forward_pd);
    });
    plan.backward_data = dnnl::convolution_backward_data(data_pd);
    if (!(data_pd.weights_desc() == plan.forward_pd.weights_desc())) {
      plan.data_weights = memory(data_pd.weights_desc(), context_.engine);
      plan.to_data_weights = Reorder(context_, weights_user_, data_pd.weights_desc());
    }
    if (!(data_pd.diff_src_desc() == input.desc())) {
      plan.src_grad = memory(data_pd.diff_src_desc(), context_.engine);
      plan.from_src_grad = Reorder(context_, data_pd.diff_src_desc(), input.desc());
    }
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& input = cpu(*args.inputs[0]);
    memory src = input.mem();
    if (plan.to_src) {
      plan.to_src.run(context_, input.mem(), plan.src);
      src = plan.src;
    }
    memory weights = user_weights(args);
    if (plan.to_weights) {
      plan.to_weights.run(context_, weights, plan.weights);
      weights = plan.weights;
    }
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, cpu(*args.output).mem()}};
    if (node_.bias) arguments[DNNL_ARG_BIAS] = bias_memory(args.params[1]);
    execute(plan.forward, arguments);
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& grad_out = cpu(*args.output_grad);
    memory src = plan.to_src ? plan.src : cpu(*args.inputs[0]).mem();  // as in forward
    memory weights_grad_user(weights_user_, context_.engine, args.param_grads[0]);
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_DIFF_DST, grad_out.mem()},
        {DNNL_ARG_DIFF_WEIGHTS, plan.from_weights_grad ? plan.weights_grad : weights_grad_user}};
    if (node_.bias) arguments[DNNL_ARG_DIFF_BIAS] = bias_memory(args.param_grads[1]);
    execute(plan.backward_weights, arguments);
    if (plan.from_weights_grad) {
      plan.from_weights_grad.run(context_, plan.weights_grad, weights_grad_user);
    }

    if (args.input_grads[0] == nullptr) return;
    CpuTensor& grad_in = cpu(*args.input_grads[0]);
    memory weights = plan.to_weights ? plan.weights : user_weights(args);
    if (plan.to_data_weights) {
      plan.to_data_weights.run(context_, user_weights(args), plan.data_weights);
      weights = plan.data_weights;
    }
    execute(plan.backward_data,
            {{DNNL_ARG_DIFF_DST, grad_out.mem()},
             {DNNL_ARG_WEIGHTS, weights},
             {DNNL_ARG_DIFF_SRC, plan.from_src_grad ? plan.src_grad : grad_in.mem()}});
    if (plan.from_src_grad) plan.from_src_grad.run(context_, plan.src_grad, grad_in.mem());
  }

 private:
  struct Plan {
    dnnl::convolution_forward::primitive_desc forward_pd;
    dnnl::convolution_forward forward;
    dnnl::convolution_backward_weights backward_weights;
    dnnl::convolution_backward_data backward_data;
    memory src, weights, weights_grad, data_weights, src_grad;
    Reorder to_src, to_weights, from_weights_grad, to_data_weights, from_src_grad;
  };

  memory user_weights(const nn::KernelArgs& args) const {
    return memory(weights_user_, context_.engine, const_cast<float*>(args.params[0]));
  }

  memory bias_memory(const float* bias) const {
    return memory({{node_.units}, memory::data_type::f32, format_tag::a}, context_.engine,
                  const_cast<float*>(bias));
  }

  memory::desc weights_user_;
  memory::dims strides_, padding_l_, padding_r_;
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_conv_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ConvKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
