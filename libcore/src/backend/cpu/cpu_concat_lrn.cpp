// Channel concatenation (densenet, inception) and local response normalisation (the CIFAR
// alexnet) on the CPU.
//
// Concat is one reorder per input into its channel range of the output (a sub-memory view),
// and backward the reverse: the gradient's channel range reordered into each input's layout.
// This is what oneDNN's own concat does when the inputs' layouts differ, but it names that
// implementation "ref:any"; the reorders are recorded as the layer's own. The output keeps the
// inputs' channel-blocked layout where every input starts on a block boundary, else it is
// channels-last (a view at any channel offset).
#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {
namespace {

using format_tag = memory::format_tag;

/// The channel block (8, 16) of a 4-D layout blocked on channels alone, else 0.
int channel_block(const memory::desc& desc) {
  const dnnl_memory_desc_t& data = desc.data;
  if (data.format_kind != dnnl_blocked || data.ndims != 4) return 0;
  const dnnl_blocking_desc_t& blocking = data.format_desc.blocking;
  if (blocking.inner_nblks != 1 || blocking.inner_idxs[0] != 1) return 0;
  return static_cast<int>(blocking.inner_blks[0]);
}

class ConcatKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const nn::Dims out = node_.output;
    const memory::dims dims = {batch, out.c, out.h, out.w};
    output.allocate(memory::desc(dims, memory::data_type::f32, output_tag(inputs)), context_);
    Plan plan;
    memory::dim offset = 0;
    for (nn::Tensor* input : inputs) {
      const memory::desc& in = cpu(*input).desc();
      const memory::dims part = {batch, input->dims().c, out.h, out.w};
      const memory::desc view = output.desc().submemory_desc(part, {0, offset, 0, 0});
      plan.views.push_back(view);
      plan.into.emplace_back(context_, in, view);
      plan.back.emplace_back(context_, view, in);
      offset += input->dims().c;
    }
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    void* base = cpu(*args.output).data();
    for (std::size_t i = 0; i < args.inputs.size(); ++i) {
      const memory view(plan.views[i], context_.engine, base);
      plan.into[i].run(context_, cpu(*args.inputs[i]).mem(), view);
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    void* base = cpu(*args.output_grad).data();
    for (std::size_t i = 0; i < args.input_grads.size(); ++i) {
      if (args.input_grads[i] == nullptr) continue;
      const memory view(plan.views[i], context_.engine, base);
      plan.back[i].run(context_, view, cpu(*args.input_grads[i]).mem());
    }
  }

 private:
  /// The inputs' channel-blocked layout where they all have it and every input but the last
  /// fills whole blocks (a view then starts on a block), else channels-last.
  format_tag output_tag(std::span<nn::Tensor* const> inputs) const {
    const int block = channel_block(cpu(*inputs[0]).desc());
    bool aligned = block == 8 || block == 16;
    for (std::size_t i = 0; aligned && i < inputs.size(); ++i) {
      aligned = channel_block(cpu(*inputs[i]).desc()) == block &&
                (i + 1 == inputs.size() || inputs[i]->dims().c % block == 0);
    }
    if (!aligned) return format_tag::acdb;
    return block == 8 ? format_tag::aBcd8b : format_tag::aBcd16b;
  }

  struct Plan {
    std::vector<memory::desc> views;
    std::vector<Reorder> into, back;
  };
  std::map<int, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------

/// LRN across channels with oneDNN's primitives, in the input's layout.
class LrnKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc& source = cpu(*inputs[0]).desc();
    const auto alpha = static_cast<float>(node_.lrn_alpha);
    const auto beta = static_cast<float>(node_.lrn_beta);
    const auto k = static_cast<float>(node_.lrn_k);
    const dnnl::lrn_forward::primitive_desc forward_pd(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::lrn_across_channels, source,
         node_.lrn_size, alpha, beta, k},
        context_.engine);
    record("lrn forward", forward_pd);
    output.allocate(forward_pd.dst_desc(), context_);
    const dnnl::lrn_backward::primitive_desc backward_pd(
        {dnnl::algorithm::lrn_across_channels, source, output.desc(), node_.lrn_size, alpha, beta,
         k},
        context_.engine, forward_pd);
    record("lrn backward", backward_pd);
    Plan plan{dnnl::lrn_forward(forward_pd), dnnl::lrn_backward(backward_pd), {}};
    if (forward_pd.workspace_desc().get_size() > 0) {
      plan.workspace = memory(forward_pd.workspace_desc(), context_.engine);
    }
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
        {DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
        {DNNL_ARG_DIFF_DST, cpu(*args.output_grad).mem()},
        {DNNL_ARG_DIFF_SRC, cpu(*args.input_grads[0]).mem()}};
    if (plan.workspace) arguments[DNNL_ARG_WORKSPACE] = plan.workspace;
    execute(plan.backward, arguments);
  }

 private:
  struct Plan {
    dnnl::lrn_forward forward;
    dnnl::lrn_backward backward;
    memory workspace;
  };
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_concat_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ConcatKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_lrn_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<LrnKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
