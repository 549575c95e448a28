// Channel concatenation (densenet, inception) and local response normalisation (the CIFAR
// alexnet) on the CPU.
//
// Concat is one reorder per input into its channel range of the output (a sub-memory view),
// and backward the reverse: the gradient's channel range reordered into each input's layout.
// This is what oneDNN's own concat does when the inputs' layouts differ, but it names that
// implementation "ref:any"; the reorders are recorded as the layer's own. The output keeps the
// inputs' channel-blocked layout where every input starts on a block boundary, else it is
// channels-last (a view at any channel offset).
#include <cmath>
#include <utility>
#include <vector>

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

/// LRN across channels, our own loops over the plain (N, C, H, W) layout (the input reordered
/// there and the output back, where it is channel-blocked). oneDNN 2.6 has JIT LRN kernels only
/// for a window of 5 channels; other windows (the CIFAR alexnet's 9) ran its reference kernel,
/// lrn_ref:any, at every instruction-set level.
///
/// Forward, with the window of channel c from c - (size - 1) / 2 over `size` channels (clipped
/// at the edges, as oneDNN's):
///   d[c] = k + alpha / size * sum over the window of x^2,   y[c] = x[c] * d[c]^-beta.
/// Backward: dx[c] = dy[c] * d[c]^-beta
///                   - 2 alpha beta / size * x[c] * sum over the c' whose window holds c of
///                     dy[c'] * y[c'] / d[c'].
class LrnKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc& source = cpu(*inputs[0]).desc();
    output.allocate(source, context_);
    Plan plan;
    const memory::desc plain = plain_like(source);
    plan.plain = source == plain;
    if (!plan.plain) {
      plan.to_plain = Reorder(context_, source, plain);
      plan.from_plain = Reorder(context_, plain, source);
      for (memory* buffer : {&plan.x, &plan.y, &plan.dy, &plan.dx}) {
        *buffer = memory(plain, context_.engine);
      }
    }
    plan.n = batch;
    plan.c = node_.output.c;
    plan.pixels = static_cast<memory::dim>(node_.output.h) * node_.output.w;
    plan.d.assign(static_cast<std::size_t>(plan.n * plan.c * plan.pixels), 0.0f);
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const CpuTensor& input = cpu(*args.inputs[0]);
    CpuTensor& output = cpu(*args.output);
    const float* x = input.data();
    float* y = output.data();
    if (!plan.plain) {
      plan.to_plain.run(context_, input.mem(), plan.x);
      x = static_cast<const float*>(plan.x.get_data_handle());
      y = static_cast<float*>(plan.y.get_data_handle());
    }
    forward_plain(plan, x, y);
    if (!plan.plain) plan.from_plain.run(context_, plan.y, output.mem());
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    Plan& plan = plans_.at(args.batch);
    const CpuTensor& input = cpu(*args.inputs[0]);
    const CpuTensor& output = cpu(*args.output);
    const CpuTensor& output_grad = cpu(*args.output_grad);
    CpuTensor& input_grad = cpu(*args.input_grads[0]);
    MBKIT_CHECK(output_grad.desc() == output.desc() && input_grad.desc() == input.desc(), "layer ",
                node_.name, ": LRN gradients in another layout than their values");
    const float* x = input.data();
    const float* y = output.data();
    const float* dy = output_grad.data();
    float* dx = input_grad.data();
    if (!plan.plain) {
      // x and y in plain layout are still there from the forward pass.
      plan.to_plain.run(context_, output_grad.mem(), plan.dy);
      x = static_cast<const float*>(plan.x.get_data_handle());
      y = static_cast<const float*>(plan.y.get_data_handle());
      dy = static_cast<const float*>(plan.dy.get_data_handle());
      dx = static_cast<float*>(plan.dx.get_data_handle());
    }
    backward_plain(plan, x, y, dy, dx);
    if (!plan.plain) plan.from_plain.run(context_, plan.dx, input_grad.mem());
  }

 private:
  struct Plan {
    bool plain = true;
    Reorder to_plain, from_plain;
    memory x, y, dy, dx;   // plain copies (channel-blocked tensors only)
    std::vector<float> d;  // the denominators' bases of the last forward pass
    memory::dim n = 0, c = 0, pixels = 0;
  };

  // The window of channel c: [first, last] clipped to [0, channels).
  std::pair<memory::dim, memory::dim> window(memory::dim c, memory::dim channels) const {
    const memory::dim half = (node_.lrn_size - 1) / 2;
    return {std::max<memory::dim>(c - half, 0),
            std::min<memory::dim>(c - half + node_.lrn_size - 1, channels - 1)};
  }

  // powers[p] = d[p]^-beta; beta = 0.75 (every model's) as 1 / (sqrt(d) * sqrt(sqrt(d))), which
  // vectorises where pow does not.
  static void negative_powers(const float* d, float beta, memory::dim count, float* powers) {
    if (beta == 0.75f) {
#pragma omp simd
      for (memory::dim p = 0; p < count; ++p) {
        const float root = std::sqrt(d[p]);
        powers[p] = 1.0f / (root * std::sqrt(root));
      }
      return;
    }
    for (memory::dim p = 0; p < count; ++p) powers[p] = std::pow(d[p], -beta);
  }

  void forward_plain(Plan& plan, const float* x, float* y) const {
    const auto channels = plan.c, pixels = plan.pixels;
    const auto scale = static_cast<float>(node_.lrn_alpha / node_.lrn_size);
    const auto k = static_cast<float>(node_.lrn_k);
    const auto beta = static_cast<float>(node_.lrn_beta);
    float* d = plan.d.data();
#pragma omp parallel for collapse(2) schedule(static)
    for (memory::dim image = 0; image < plan.n; ++image) {
      for (memory::dim c = 0; c < channels; ++c) {
        const auto [first, last] = window(c, channels);
        const memory::dim at = (image * channels + c) * pixels;
        float* out_d = d + at;
        for (memory::dim p = 0; p < pixels; ++p) out_d[p] = 0.0f;
        for (memory::dim other = first; other <= last; ++other) {
          const float* in = x + (image * channels + other) * pixels;
#pragma omp simd
          for (memory::dim p = 0; p < pixels; ++p) out_d[p] += in[p] * in[p];
        }
        const float* in = x + at;
        float* out = y + at;
#pragma omp simd
        for (memory::dim p = 0; p < pixels; ++p) out_d[p] = k + scale * out_d[p];
        negative_powers(out_d, beta, pixels, out);
#pragma omp simd
        for (memory::dim p = 0; p < pixels; ++p) out[p] *= in[p];
      }
    }
  }

  void backward_plain(const Plan& plan, const float* x, const float* y, const float* dy,
                      float* dx) const {
    const auto channels = plan.c, pixels = plan.pixels;
    const auto beta = static_cast<float>(node_.lrn_beta);
    const auto factor = static_cast<float>(2.0 * node_.lrn_alpha * node_.lrn_beta / node_.lrn_size);
    const float* d = plan.d.data();
    const memory::dim half = (node_.lrn_size - 1) / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (memory::dim image = 0; image < plan.n; ++image) {
      for (memory::dim c = 0; c < channels; ++c) {
        // The c' whose window [c' - half, c' - half + size - 1] holds c.
        const memory::dim first = std::max<memory::dim>(c + half - node_.lrn_size + 1, 0);
        const memory::dim last = std::min<memory::dim>(c + half, channels - 1);
        const memory::dim at = (image * channels + c) * pixels;
        float* out = dx + at;
        for (memory::dim p = 0; p < pixels; ++p) out[p] = 0.0f;
        for (memory::dim other = first; other <= last; ++other) {
          const memory::dim from = (image * channels + other) * pixels;
#pragma omp simd
          for (memory::dim p = 0; p < pixels; ++p) {
            out[p] += dy[from + p] * y[from + p] / d[from + p];
          }
        }
#pragma omp simd
        for (memory::dim p = 0; p < pixels; ++p) out[p] *= factor * x[at + p];
        // dx = dy * d^-beta - that: the powers go through the output's own row first.
        std::vector<float>& powers = scratch();
        powers.resize(static_cast<std::size_t>(pixels));
        negative_powers(d + at, beta, pixels, powers.data());
#pragma omp simd
        for (memory::dim p = 0; p < pixels; ++p) out[p] = dy[at + p] * powers[p] - out[p];
      }
    }
  }

  // A row of powers per thread (backward runs rows in parallel).
  static std::vector<float>& scratch() {
    thread_local std::vector<float> row;
    return row;
  }

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
