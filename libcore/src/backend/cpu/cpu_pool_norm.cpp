// Pooling (max, average, global average) and batch normalisation on oneDNN primitives, in the
// layout of their input.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

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

/// Where channel c of sample n, pixel (h, w) lies in a tensor of a oneDNN layout with at most
/// one inner block, on the channels (nchw, nhwc, nChw8c, nChw16c, nc): at
/// n * n_stride + (c / block) * c_stride + (c % block) + h * h_stride + w * w_stride.
struct ChannelLayout {
  std::int64_t n_stride = 0, c_stride = 0, h_stride = 0, w_stride = 0, block = 1;
  int h = 1, w = 1;

  /// Nothing (false) for a layout of another kind.
  bool from(const memory::desc& desc) {
    const dnnl_memory_desc_t& data = desc.data;
    if (data.format_kind != dnnl_blocked || data.offset0 != 0) return false;
    if (data.ndims != 2 && data.ndims != 4) return false;
    const dnnl_blocking_desc_t& blocking = data.format_desc.blocking;
    if (blocking.inner_nblks > 1) return false;
    if (blocking.inner_nblks == 1) {
      if (blocking.inner_idxs[0] != 1) return false;
      block = blocking.inner_blks[0];
    }
    n_stride = blocking.strides[0];
    c_stride = blocking.strides[1];
    if (data.ndims == 4) {
      h = static_cast<int>(data.dims[2]);
      w = static_cast<int>(data.dims[3]);
      h_stride = blocking.strides[2];
      w_stride = blocking.strides[3];
    }
    return true;
  }
};

/// Adds up one sample's pixels of a block of channels (a plain layout's single channel), minus
/// a shift per channel: their sum into sums[0 .. Block), the sum of their squares into
/// squares[0 .. Block), each channel's in one fixed order.
template <std::int64_t Block>
void sum_block(const float* x, const ChannelLayout& layout, std::int64_t block, const double* shift,
               double* sums, double* squares) {
  const std::int64_t lanes = Block > 0 ? Block : block;
  for (std::int64_t j = 0; j < lanes; ++j) sums[j] = squares[j] = 0.0;
  for (int h = 0; h < layout.h; ++h) {
    const float* row = x + h * layout.h_stride;
    for (int w = 0; w < layout.w; ++w) {
      const float* pixel = row + w * layout.w_stride;
      for (std::int64_t j = 0; j < lanes; ++j) {
        const double d = double{pixel[j]} - shift[j];
        sums[j] += d;
        squares[j] += d * d;
      }
    }
  }
}

/// The mean and (biased) variance of each channel of x over the batch and pixels, summed in
/// double as PyTorch's CPU batch norm does. oneDNN's training primitive sums in float, further
/// from the exact statistics than PyTorch (up to 2.1x the root-mean-square error of a batch-norm
/// layer's output at AVX2). One pass: sums and sums of squares of x - shift, the shift being
/// the channel's first entry, so that mean^2 never dwarfs the variance (the cancellation of
/// E[x^2] - E[x]^2): in double the variance is then exact to about 1e-15 relative. The threads
/// share out (sample, block of channels) pairs; each pair's sums land in `partial` and are added
/// up sample after sample: the same result for any thread count. mean and variance hold the
/// channels padded to whole blocks.
void channel_statistics(const float* x, const ChannelLayout& layout, int batch,
                        std::int64_t channels, std::vector<double>& partial, double* mean,
                        double* variance) {
  const std::int64_t block = layout.block;
  const std::int64_t outer = (channels + block - 1) / block;
  const std::int64_t padded = outer * block;  // blocked layouts pad the channels (with zeros)
  partial.resize(static_cast<std::size_t>(2 * batch * padded));
  double* shift = variance;  // the shifts until the end
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < block; ++j) shift[o * block + j] = x[o * layout.c_stride + j];
  }
  double* sums = partial.data();
  double* squares = sums + batch * padded;
#pragma omp parallel for collapse(2) schedule(static)
  for (int n = 0; n < batch; ++n) {
    for (std::int64_t o = 0; o < outer; ++o) {
      const float* start = x + n * layout.n_stride + o * layout.c_stride;
      const std::int64_t at = n * padded + o * block;
      if (block == 16) {
        sum_block<16>(start, layout, block, shift + o * block, sums + at, squares + at);
      } else if (block == 8) {
        sum_block<8>(start, layout, block, shift + o * block, sums + at, squares + at);
      } else {
        sum_block<0>(start, layout, block, shift + o * block, sums + at, squares + at);
      }
    }
  }
  const double count = static_cast<double>(batch) * layout.h * layout.w;
  for (std::int64_t c = 0; c < padded; ++c) {
    double sum = 0.0, sum_squares = 0.0;
    for (int n = 0; n < batch; ++n) {
      sum += sums[n * padded + c];
      sum_squares += squares[n * padded + c];
    }
    const double shifted_mean = sum / count;
    mean[c] = shift[c] + shifted_mean;
    variance[c] = std::max(0.0, sum_squares / count - shifted_mean * shifted_mean);
  }
}

/// Batch normalisation over N (and H, W) per channel, with a learned shift and, unless the node
/// says otherwise (Node::scale), a learned scale. Training
/// normalises with the batch's statistics and updates the running ones as PyTorch does
/// (running = (1 - momentum) running + momentum batch, the variance unbiased); evaluation uses
/// the running statistics.
class BatchNormKernel final : public CpuKernel, public ReluFusable {
 public:
  BatchNormKernel(Context& context, const nn::Node& node)
      : CpuKernel(context, node),
        channel_desc_({node.output.c}, memory::data_type::f32, format_tag::a) {}

  void fuse_relu() override { relu_fused_ = true; }
  bool set_relu_output(int batch, CpuTensor& relu_output) override {
    Plan& plan = plans_.at(batch);
    if (!plan.fused) return false;
    plan.relu_output = &relu_output;
    return true;
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    const auto epsilon = static_cast<float>(node_.epsilon);
    const flags scale_shift = node_.scale ? flags::use_scale | flags::use_shift : flags::use_shift;
    Plan plan;
    // Training normalises with the batch statistics this kernel computes (channel_statistics),
    // handed to the primitive as given ones; the backward pass is the training one (the
    // statistics depend on the input), built on the training primitive's description.
    dnnl::batch_normalization_forward::primitive_desc training_pd(
        {prop_kind::forward_training, input.desc(), epsilon, scale_shift}, context_.engine);
    dnnl::batch_normalization_forward::primitive_desc inference_pd(
        {prop_kind::forward_inference, input.desc(), epsilon,
         scale_shift | flags::use_global_stats},
        context_.engine);
    record("batch norm forward (inference)", inference_pd);
    plan.inference = dnnl::batch_normalization_forward(inference_pd);
    // Fused with its relu: normalises with given statistics too, and writes the relu's output
    // and its mask (the workspace), which the backward pass applies to the relu's gradient.
    // Only on channel-blocked layouts without padding channels, and where oneDNN has jit
    // kernels for both passes: on others (densenet's 28, 40, ... channels padded to blocks,
    // nhwc) its fused backward pass gave other bits, and at SSE4.1 it has only bnorm_ref:any.
    using ForwardPd = dnnl::batch_normalization_forward::primitive_desc;
    using BackwardPd = dnnl::batch_normalization_backward::primitive_desc;
    std::optional<ForwardPd> fused_pd;
    std::optional<BackwardPd> fused_backward_pd;
    ChannelLayout blocks;
    if (relu_fused_ && blocks.from(input.desc()) && blocks.block > 1 &&
        node_.output.c % blocks.block == 0) {
      const flags fused = scale_shift | flags::fuse_norm_relu;
      ForwardPd forward(
          {prop_kind::forward_training, input.desc(), epsilon, fused | flags::use_global_stats},
          context_.engine);
      BackwardPd backward({prop_kind::backward, input.desc(), input.desc(), epsilon, fused},
                          context_.engine, forward);
      // oneDNN names its reference batch norm "bnorm_ref:any", which is_reference misses.
      const auto jit = [](const dnnl::primitive_desc_base& pd) {
        return std::string_view(pd.impl_info_str()).find("jit") != std::string_view::npos;
      };
      if (jit(forward) && jit(backward)) {
        fused_pd = std::move(forward);
        fused_backward_pd = std::move(backward);
      }
    }
    const bool fuse = fused_pd.has_value();
    if (fuse) {
      record("batch norm and relu forward", *fused_pd);
      plan.fused = dnnl::batch_normalization_forward(*fused_pd);
      plan.workspace = memory(fused_pd->workspace_desc(), context_.engine);
    }
    if (!plan.layout.from(input.desc())) {
      // Another layout: the statistics are computed on a plain copy.
      plan.layout.from(plain_like(input.desc()));
      plan.to_plain = Reorder(context_, input.desc(), plain_like(input.desc()));
      plan.plain = memory(plain_like(input.desc()), context_.engine);
    }
    output.allocate(training_pd.dst_desc(), context_);
    const BackwardPd backward_pd =
        fuse ? *fused_backward_pd
             : BackwardPd({prop_kind::backward, input.desc(), input.desc(), epsilon, scale_shift},
                          context_.engine, training_pd);
    record(fuse ? "batch norm and relu backward" : "batch norm backward", backward_pd);
    plan.backward = dnnl::batch_normalization_backward(backward_pd);
    plan.mean = memory(training_pd.mean_desc(), context_.engine);
    plan.variance = memory(training_pd.variance_desc(), context_.engine);
    // Pixels per channel in the batch, for the unbiased running variance.
    const nn::Dims dims = node_.output;
    plan.count = static_cast<double>(batch) * dims.h * dims.w;
    const auto padded = static_cast<std::size_t>((dims.c + plan.layout.block - 1) /
                                                 plan.layout.block * plan.layout.block);
    plan.batch_mean.resize(padded);
    plan.batch_variance.resize(padded);
    plans_[batch] = std::move(plan);
    if (fuse) output.set_refresh([this, batch] { write_output(plans_.at(batch)); });
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    memory running_mean = channel(args.state[0]);
    memory running_var = channel(args.state[1]);
    std::unordered_map<int, memory> arguments = {{DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
                                                 {DNNL_ARG_DST, cpu(*args.output).mem()},
                                                 {DNNL_ARG_SHIFT, channel(shift(args.params))}};
    if (node_.scale) arguments[DNNL_ARG_SCALE] = channel(args.params[0]);
    if (!args.training) {
      arguments[DNNL_ARG_MEAN] = running_mean;
      arguments[DNNL_ARG_VARIANCE] = running_var;
      normalise(plan, arguments);
      return;
    }
    const float* x = cpu(*args.inputs[0]).data();
    if (plan.to_plain) {
      plan.to_plain.run(context_, cpu(*args.inputs[0]).mem(), plan.plain);
      x = static_cast<const float*>(plan.plain.get_data_handle());
    }
    const int channels = node_.output.c;
    channel_statistics(x, plan.layout, args.batch, channels, plan.partial_sums,
                       plan.batch_mean.data(), plan.batch_variance.data());
    auto* mean = static_cast<float*>(plan.mean.get_data_handle());
    auto* variance = static_cast<float*>(plan.variance.get_data_handle());
    const double momentum = node_.momentum;
    const double unbiased = plan.count > 1 ? plan.count / (plan.count - 1) : 1.0;
    for (int c = 0; c < channels; ++c) {
      const auto i = static_cast<std::size_t>(c);
      mean[c] = static_cast<float>(plan.batch_mean[i]);
      variance[c] = static_cast<float>(plan.batch_variance[i]);
      args.state[0][c] =
          static_cast<float>((1.0 - momentum) * args.state[0][c] + momentum * plan.batch_mean[i]);
      args.state[1][c] = static_cast<float>((1.0 - momentum) * args.state[1][c] +
                                            momentum * plan.batch_variance[i] * unbiased);
    }
    arguments[DNNL_ARG_MEAN] = plan.mean;
    arguments[DNNL_ARG_VARIANCE] = plan.variance;
    normalise(plan, arguments);
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    // The parameter gradients are always needed; the input's may not be (then it goes to a
    // scratch buffer the primitive still has to write).
    nn::Tensor* grad_in = args.input_grads[0];
    if (grad_in == nullptr && !plan.scratch_grad) {
      plan.scratch_grad = memory(cpu(*args.inputs[0]).desc(), context_.engine);
    }
    std::unordered_map<int, memory> arguments = {
        {DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()},
        {DNNL_ARG_MEAN, plan.mean},
        {DNNL_ARG_VARIANCE, plan.variance},
        {DNNL_ARG_DIFF_DST, cpu(*args.output_grad).mem()},
        {DNNL_ARG_SHIFT, channel(shift(args.params))},
        {DNNL_ARG_DIFF_SRC, grad_in != nullptr ? cpu(*grad_in).mem() : plan.scratch_grad},
        {DNNL_ARG_DIFF_SHIFT, channel(shift(args.param_grads))}};
    if (node_.scale) {
      arguments[DNNL_ARG_SCALE] = channel(args.params[0]);
      arguments[DNNL_ARG_DIFF_SCALE] = channel(args.param_grads[0]);
    }
    // Fused: the output's gradient is the relu's (FusedReluKernel), masked here.
    if (plan.relu_output != nullptr) arguments[DNNL_ARG_WORKSPACE] = plan.workspace;
    execute(plan.backward, arguments);
  }

 private:
  struct Plan {
    dnnl::batch_normalization_forward inference;  ///< normalises with given statistics
    dnnl::batch_normalization_backward backward;
    memory mean, variance, scratch_grad;
    ChannelLayout layout;  ///< of the input, or of its plain copy
    Reorder to_plain;      ///< into `plain`, where the input's layout is not a ChannelLayout
    memory plain;
    std::vector<double> batch_mean, batch_variance;  ///< padded to whole blocks of channels
    std::vector<double> partial_sums;                ///< per sample (channel_statistics)
    double count = 0;
    // Fused with the relu: the primitive writing the relu's output and the mask, and what the
    // last forward pass normalised with, for writing this layer's own output when it is read.
    dnnl::batch_normalization_forward fused;
    memory workspace;
    CpuTensor* relu_output = nullptr;
    std::unordered_map<int, memory> last_arguments;
    std::map<int, memory> kept;  ///< copies of the per-channel arguments
    bool output_stale = false;
  };

  /// Normalises with the statistics in `arguments`: into this layer's output, or, fused, into
  /// the relu's (this layer's own output is then written when read).
  void normalise(Plan& plan, std::unordered_map<int, memory>& arguments) {
    if (plan.relu_output == nullptr) {
      execute(plan.inference, arguments);
      return;
    }
    plan.last_arguments = arguments;
    // Copies: the parameters and statistics may change before the output is read (an
    // optimizer step, a checkpoint loaded).
    for (const int which : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) {
      const auto given = arguments.find(which);
      if (given == arguments.end()) continue;
      memory& kept = plan.kept[which];
      if (!kept) kept = memory(channel_desc_, context_.engine);
      std::copy_n(static_cast<const float*>(given->second.get_data_handle()), node_.output.c,
                  static_cast<float*>(kept.get_data_handle()));
      plan.last_arguments[which] = kept;
    }
    plan.output_stale = true;
    arguments[DNNL_ARG_DST] = plan.relu_output->mem();
    arguments[DNNL_ARG_WORKSPACE] = plan.workspace;
    execute(plan.fused, arguments);
  }

  /// Writes the output the last forward pass left to be written (the same bits as unfused).
  void write_output(Plan& plan) {
    if (!plan.output_stale) return;
    execute(plan.inference, plan.last_arguments);
    context_.stream.wait();
    plan.output_stale = false;
  }

  /// The shift (beta) among a node's parameters or their gradients: after the scale, if any.
  template <typename Pointer>
  Pointer shift(const std::vector<Pointer>& params) const {
    return params[node_.scale ? 1 : 0];
  }

  memory channel(const float* values) const {
    return memory(channel_desc_, context_.engine, const_cast<float*>(values));
  }

  memory::desc channel_desc_;
  std::map<int, Plan> plans_;
  bool relu_fused_ = false;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_pool_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<PoolKernel>(context, node);
}

std::unique_ptr<nn::Kernel> make_batch_norm_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<BatchNormKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
