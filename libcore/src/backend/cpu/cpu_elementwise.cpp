// CPU kernels of the layout-agnostic layers: input, relu/sigmoid/tanh (oneDNN eltwise),
// dropout, flatten, residual add, and the softmax cross-entropy loss.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::backend::cpu {
namespace {

using algorithm = dnnl::algorithm;
using prop_kind = dnnl::prop_kind;

void copy_floats(float* to, const float* from, std::size_t count) {
  std::memcpy(to, from, count * sizeof(float));
}

// ---------------------------------------------------------------------------------------------

/// The network's input: a plain (N, C, H, W) view of the batch the loader prepared.
class InputKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const>, CpuTensor& output) override {
    output.alias(plain_desc(batch, node_.output, false), context_, nullptr);
  }
  void do_forward(nn::KernelArgs&) override {}
  void do_backward(nn::KernelArgs&) override {}
};

// ---------------------------------------------------------------------------------------------

/// relu, sigmoid, tanh with oneDNN eltwise primitives, in whatever layout the input has. The
/// backward passes use the forward output (the *_use_dst_for_bwd algorithms).
class EltwiseKernel final : public CpuKernel {
 public:
  EltwiseKernel(Context& context, const nn::Node& node) : CpuKernel(context, node) {
    switch (node.op) {
      case nn::Op::kRelu:
        algorithm_ = algorithm::eltwise_relu_use_dst_for_bwd;
        break;
      case nn::Op::kSigmoid:
        algorithm_ = algorithm::eltwise_logistic_use_dst_for_bwd;
        break;
      case nn::Op::kTanh:
        algorithm_ = algorithm::eltwise_tanh_use_dst_for_bwd;
        break;
      default:
        fail(cat("eltwise kernel for ", nn::op_name(node.op)));
    }
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc& source = cpu(*inputs[0]).desc();
    dnnl::eltwise_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algorithm_, source, 0.f, 0.f}, context_.engine);
    output.allocate(forward_pd.dst_desc(), context_);
    dnnl::eltwise_backward::primitive_desc backward_pd(
        {algorithm_, output.desc(), output.desc(), 0.f, 0.f}, context_.engine, forward_pd);
    record(cat(nn::op_name(node_.op), " forward"), forward_pd);
    record(cat(nn::op_name(node_.op), " backward"), backward_pd);
    plans_[batch] = {dnnl::eltwise_forward(forward_pd), dnnl::eltwise_backward(backward_pd)};
  }

  void do_forward(nn::KernelArgs& args) override {
    execute(plans_.at(args.batch).forward,
            {{DNNL_ARG_SRC, cpu(*args.inputs[0]).mem()}, {DNNL_ARG_DST, cpu(*args.output).mem()}});
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    execute(plans_.at(args.batch).backward, {{DNNL_ARG_DST, cpu(*args.output).mem()},
                                             {DNNL_ARG_DIFF_DST, cpu(*args.output_grad).mem()},
                                             {DNNL_ARG_DIFF_SRC, cpu(*args.input_grads[0]).mem()}});
  }

 private:
  struct Plan {
    dnnl::eltwise_forward forward;
    dnnl::eltwise_backward backward;
  };
  algorithm algorithm_;
  std::map<int, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------

/// Inverted dropout: kept units are scaled by 1 / (1 - rate) in training, so evaluation is the
/// identity. Masks come from the step's seed in fixed blocks of elements, so they are the same
/// whatever the number of threads.
class DropoutKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    output.allocate(cpu(*inputs[0]).desc(), context_);
    masks_[batch].assign(output.floats(), 0);
  }

  void do_forward(nn::KernelArgs& args) override {
    const CpuTensor& input = cpu(*args.inputs[0]);
    CpuTensor& output = cpu(*args.output);
    if (!args.training || node_.rate == 0.0) {
      copy_floats(output.data(), input.data(), output.floats());
      return;
    }
    auto& mask = masks_.at(args.batch);
    const float* in = input.data();
    float* out = output.data();
    const auto scale = static_cast<float>(1.0 / (1.0 - node_.rate));
    const auto threshold = static_cast<std::uint64_t>(node_.rate * 4294967296.0);
    const auto count = static_cast<std::ptrdiff_t>(mask.size());
    constexpr std::ptrdiff_t kBlock = 4096;
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t block = 0; block < (count + kBlock - 1) / kBlock; ++block) {
      Rng rng(args.seed, static_cast<std::uint64_t>(block));
      const std::ptrdiff_t end = std::min(count, (block + 1) * kBlock);
      for (std::ptrdiff_t i = block * kBlock; i < end; ++i) {
        const bool keep = rng.next_u32() >= threshold;
        mask[static_cast<std::size_t>(i)] = keep;
        out[i] = keep ? in[i] * scale : 0.0f;
      }
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    const float* grad_out = cpu(*args.output_grad).data();
    float* grad_in = cpu(*args.input_grads[0]).data();
    const auto& mask = masks_.at(args.batch);
    const auto count = static_cast<std::ptrdiff_t>(mask.size());
    if (node_.rate == 0.0) {
      copy_floats(grad_in, grad_out, mask.size());
      return;
    }
    const auto scale = static_cast<float>(1.0 / (1.0 - node_.rate));
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) {
      grad_in[i] = mask[static_cast<std::size_t>(i)] ? grad_out[i] * scale : 0.0f;
    }
  }

 private:
  std::map<int, std::vector<std::uint8_t>> masks_;
};

// ---------------------------------------------------------------------------------------------

/// (N, C, H, W) in any layout -> plain (N, C*H*W) rows in C, H, W order (PyTorch's flatten).
/// A plain input is not copied: the output is a view of it.
class FlattenKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    const memory::desc rows = plain_desc(batch, node_.output, true);
    Plan plan;
    plan.view = input.desc() == plain_like(input.desc());
    if (plan.view) {
      output.alias(rows, context_, nullptr);
    } else {
      output.allocate(rows, context_);
      const memory::desc plain = plain_like(input.desc());
      plan.output_as_plain = memory(plain, context_.engine, output.data());
      plan.to_rows = Reorder(context_, input.desc(), plain);
      plan.grad_as_plain = plain;
      plan.from_rows = Reorder(context_, plain, input.desc());
    }
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& input = cpu(*args.inputs[0]);
    if (plan.view) {
      cpu(*args.output).set_handle(input.data());
    } else {
      plan.to_rows.run(context_, input.mem(), plan.output_as_plain);
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    Plan& plan = plans_.at(args.batch);
    CpuTensor& grad_out = cpu(*args.output_grad);
    CpuTensor& grad_in = cpu(*args.input_grads[0]);
    if (plan.view) {
      copy_floats(grad_in.data(), grad_out.data(), grad_in.floats());
    } else {
      memory grad_plain(plan.grad_as_plain, context_.engine, grad_out.data());
      plan.from_rows.run(context_, grad_plain, grad_in.mem());
    }
  }

 private:
  struct Plan {
    bool view = false;
    memory output_as_plain;
    memory::desc grad_as_plain;
    Reorder to_rows, from_rows;
  };
  std::map<int, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------

/// Residual add: out = a + b in a's layout (b is reordered first if its layout differs). With
/// its relu fused (ReluFusable), the add writes relu(a + b) into the relu's output as oneDNN's
/// relu does (max(s, 0): +0 for s <= 0), and its backward pass masks the relu's gradient as
/// oneDNN's relu backward does (g * (y > 0 ? 1 : 0)); its own output is written when read.
class AddKernel final : public CpuKernel, public ReluFusable {
 public:
  using CpuKernel::CpuKernel;

  void fuse_relu() override { relu_fused_ = true; }
  bool set_relu_output(int batch, CpuTensor& relu_output) override {
    if (!relu_fused_) return false;
    plans_.at(batch).relu_output = &relu_output;
    return true;
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc& a = cpu(*inputs[0]).desc();
    const memory::desc& b = cpu(*inputs[1]).desc();
    output.allocate(a, context_);
    Plan plan;
    if (!(a == b)) {
      plan.b_in_a_layout = memory(a, context_.engine);
      plan.b_to_a = Reorder(context_, b, a);
      plan.a_to_b = Reorder(context_, a, b);
    }
    plans_[batch] = std::move(plan);
    if (relu_fused_) output.set_refresh([this, batch] { write_sum(plans_.at(batch)); });
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& a = cpu(*args.inputs[0]);
    CpuTensor& b = cpu(*args.inputs[1]);
    const float* b_data = b.data();
    if (plan.b_to_a) {
      plan.b_to_a.run(context_, b.mem(), plan.b_in_a_layout);
      b_data = static_cast<const float*>(plan.b_in_a_layout.get_data_handle());
    }
    CpuTensor& output = cpu(*args.output);
    const float* a_data = a.data();
    const auto count = static_cast<std::ptrdiff_t>(output.floats());
    if (plan.relu_output == nullptr) {
      float* out = output.data();
#pragma omp parallel for simd schedule(static)
      for (std::ptrdiff_t i = 0; i < count; ++i) out[i] = a_data[i] + b_data[i];
      return;
    }
    float* out = plan.relu_output->data();
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) {
      const float sum = a_data[i] + b_data[i];
      out[i] = sum > 0.0f ? sum : 0.0f;
    }
    plan.sum = {&output, a_data, b_data};
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& grad_out = cpu(*args.output_grad);
    nn::Tensor* grad_a = args.input_grads[0];
    nn::Tensor* grad_b = args.input_grads[1];
    if (plan.relu_output != nullptr) {
      // grad_out is the relu's output gradient (FusedReluKernel): masked here, into a's
      // gradient, or b's where they share a's layout, or a scratch in a's layout.
      float* masked = grad_a != nullptr ? cpu(*grad_a).data()
                      : !plan.a_to_b    ? (grad_b != nullptr ? cpu(*grad_b).data() : nullptr)
                                        : static_cast<float*>(plan.b_in_a_layout.get_data_handle());
      if (masked == nullptr) return;
      float* also =
          grad_a != nullptr && grad_b != nullptr && !plan.a_to_b ? cpu(*grad_b).data() : nullptr;
      const auto count = static_cast<std::ptrdiff_t>(grad_out.floats());
      mask_gradient(grad_out.data(), plan.relu_output->data(), masked, also, count);
      if (grad_b != nullptr && plan.a_to_b) {
        const memory from = grad_a != nullptr ? cpu(*grad_a).mem() : plan.b_in_a_layout;
        plan.a_to_b.run(context_, from, cpu(*grad_b).mem());
      }
      return;
    }
    if (grad_a != nullptr) copy_floats(cpu(*grad_a).data(), grad_out.data(), grad_out.floats());
    if (grad_b != nullptr) {
      if (plan.a_to_b) {
        plan.a_to_b.run(context_, grad_out.mem(), cpu(*grad_b).mem());
      } else {
        copy_floats(cpu(*grad_b).data(), grad_out.data(), grad_out.floats());
      }
    }
  }

 private:
  /// The sum the last fused forward pass left unwritten: where, and its terms.
  struct Sum {
    CpuTensor* output = nullptr;
    const float* a = nullptr;
    const float* b = nullptr;
  };
  struct Plan {
    memory b_in_a_layout;
    Reorder b_to_a, a_to_b;
    CpuTensor* relu_output = nullptr;  ///< fused: where the relu's output goes
    Sum sum;
  };

  /// out (and `also`, where not null) = g masked where the relu's output y is not positive, as
  /// oneDNN's relu backward computes it: g times 1 or 0 by a compare mask (a masked negative g
  /// gives -0). Vector compares: written `y > 0 ? 1 : 0` the compiler branched, mispredicted on
  /// half the units, about 5 ns an element.
  static void mask_gradient(const float* g, const float* y, float* out, float* also,
                            std::ptrdiff_t count) {
    constexpr std::ptrdiff_t kChunk = 4096;  // per thread's turn, a multiple of 4
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t start = 0; start < count; start += kChunk) {
      const std::ptrdiff_t end = std::min(count, start + kChunk);
      std::ptrdiff_t i = start;
#ifdef __SSE2__
      const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
      for (; i + 4 <= end; i += 4) {
        const __m128 keep = _mm_and_ps(_mm_cmpnle_ps(_mm_loadu_ps(y + i), zero), one);
        const __m128 value = _mm_mul_ps(_mm_loadu_ps(g + i), keep);
        _mm_storeu_ps(out + i, value);
        if (also != nullptr) _mm_storeu_ps(also + i, value);
      }
#endif
      for (; i < end; ++i) {
        const float value = g[i] * (!(y[i] <= 0.0f) ? 1.0f : 0.0f);
        out[i] = value;
        if (also != nullptr) also[i] = value;
      }
    }
  }

  /// Writes this layer's own output, a + b, where the last forward pass left it unwritten.
  static void write_sum(Plan& plan) {
    if (plan.sum.output == nullptr) return;
    float* out = plan.sum.output->data();
    const auto count = static_cast<std::ptrdiff_t>(plan.sum.output->floats());
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) out[i] = plan.sum.a[i] + plan.sum.b[i];
    plan.sum = {};
  }

  std::map<int, Plan> plans_;
  bool relu_fused_ = false;
};

/// A relu its producer computes (ReluFusable: a batch norm, an add): nothing to do forward;
/// backward, the input's gradient is the output's (the producer masks it), so it is made the
/// same memory. At batch sizes the producer does not fuse, the relu's own eltwise kernel runs.
class FusedReluKernel final : public CpuKernel {
 public:
  FusedReluKernel(Context& context, const nn::Node& node, ReluFusable& producer)
      : CpuKernel(context, node),
        producer_(producer),
        apart_(std::make_unique<EltwiseKernel>(context, node)) {
    producer_.fuse_relu();
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    fused_[batch] = producer_.set_relu_output(batch, output);
    if (fused_[batch]) {
      output.allocate(cpu(*inputs[0]).desc(), context_);
    } else {
      apart_->prepare(batch, inputs, output);
    }
  }
  void do_prepare_backward(int batch, std::span<nn::Tensor* const> input_grads) override {
    if (!fused_.at(batch)) apart_->prepare_backward(batch, input_grads);
  }
  void do_forward(nn::KernelArgs& args) override {
    if (!fused_.at(args.batch)) apart_->forward(args);
  }
  void do_backward(nn::KernelArgs& args) override {
    if (!fused_.at(args.batch)) {
      apart_->backward(args);
      return;
    }
    // The producer's output has no other reader, so its gradient no other writer.
    if (args.input_grads[0] != nullptr) {
      cpu(*args.input_grads[0]).set_handle(cpu(*args.output_grad).data());
    }
  }

 private:
  ReluFusable& producer_;
  std::unique_ptr<nn::Kernel> apart_;  ///< the relu's own kernel
  std::map<int, bool> fused_;          ///< by batch size
};

// ---------------------------------------------------------------------------------------------

/// Softmax cross-entropy on (N, classes) logits. oneDNN's log-softmax gives log p; the loss is
/// -log p[label] and the output holds p = exp(log p) (evaluation reads it); forward reports the
/// summed loss and the top-1 hits; backward writes loss_scale * (p - onehot(label)).
class LossKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const memory::desc rows = plain_desc(batch, node_.output, true);
    output.allocate(rows, context_);
    Plan plan;
    const memory::desc& logits = cpu(*inputs[0]).desc();
    if (!(logits == rows)) {
      plan.plain_logits = memory(rows, context_.engine);
      plan.to_rows = Reorder(context_, logits, rows);
      plan.from_rows = Reorder(context_, rows, logits);
    }
    // Inference kind: the gradient (p - onehot) is formed here, not by a backward primitive.
    const dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, rows, 1);
    const dnnl::logsoftmax_forward::primitive_desc pd(desc, context_.engine);
    record("log-softmax", pd);
    plan.log_softmax = dnnl::logsoftmax_forward(pd);
    plan.losses.resize(static_cast<std::size_t>(batch));
    plan.hits.resize(static_cast<std::size_t>(batch));
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    CpuTensor& input = cpu(*args.inputs[0]);
    const memory* logits_memory = &input.mem();
    if (plan.to_rows) {
      plan.to_rows.run(context_, input.mem(), plan.plain_logits);
      logits_memory = &plan.plain_logits;
    }
    const auto* logits = static_cast<const float*>(logits_memory->get_data_handle());
    const int classes = node_.output.c;
    const int batch = args.batch;
    for (int i = 0; i < batch; ++i) {
      const std::int32_t label = args.labels[i];
      if (label < 0 || label >= classes) {
        data_error(cat("label ", label, " is outside [0, ", classes, ") for the model's output"));
      }
    }
    CpuTensor& output = cpu(*args.output);
    execute(plan.log_softmax, {{DNNL_ARG_SRC, *logits_memory}, {DNNL_ARG_DST, output.mem()}});
    float* probabilities = output.data();  // log p until the loop below
    std::vector<std::uint8_t>& hits = plan.hits;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < batch; ++i) {
      const float* z = logits + static_cast<std::ptrdiff_t>(i) * classes;
      float* p = probabilities + static_cast<std::ptrdiff_t>(i) * classes;
      const std::int32_t label = args.labels[i];
      plan.losses[static_cast<std::size_t>(i)] = -static_cast<double>(p[label]);
      for (int k = 0; k < classes; ++k) p[k] = std::exp(p[k]);
      // The top class from the logits themselves: log p can round two close logits together.
      int best = 0;
      for (int k = 1; k < classes; ++k) best = z[k] > z[best] ? k : best;
      hits[static_cast<std::size_t>(i)] = best == label;
    }
    // Sequential sums: the same result whatever the number of threads.
    double loss = 0.0;
    std::int64_t correct = 0;
    for (int i = 0; i < batch; ++i) {
      loss += plan.losses[static_cast<std::size_t>(i)];
      correct += hits[static_cast<std::size_t>(i)];
    }
    args.loss_sum = loss;
    args.correct = correct;
  }

  void do_backward(nn::KernelArgs& args) override {
    if (args.input_grads[0] == nullptr) return;
    Plan& plan = plans_.at(args.batch);
    CpuTensor& grad_in = cpu(*args.input_grads[0]);
    float* grad =
        plan.from_rows ? static_cast<float*>(plan.plain_logits.get_data_handle()) : grad_in.data();
    const float* probabilities = cpu(*args.output).data();
    const int classes = node_.output.c;
    const auto scale = static_cast<float>(args.loss_scale);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < args.batch; ++i) {
      const float* p = probabilities + static_cast<std::ptrdiff_t>(i) * classes;
      float* g = grad + static_cast<std::ptrdiff_t>(i) * classes;
      for (int k = 0; k < classes; ++k) g[k] = p[k] * scale;
      g[args.labels[i]] -= scale;
    }
    if (plan.from_rows) plan.from_rows.run(context_, plan.plain_logits, grad_in.mem());
  }

 private:
  struct Plan {
    memory plain_logits;
    Reorder to_rows, from_rows;
    dnnl::logsoftmax_forward log_softmax;
    std::vector<double> losses;
    std::vector<std::uint8_t> hits;
  };
  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_input_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<InputKernel>(context, node);
}
std::unique_ptr<nn::Kernel> make_eltwise_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<EltwiseKernel>(context, node);
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
std::unique_ptr<nn::Kernel> make_loss_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<LossKernel>(context, node);
}

std::unique_ptr<nn::Kernel> make_relu_in(Context& context, const nn::Node& node,
                                         nn::Kernel& producer) {
  auto* fusable = dynamic_cast<ReluFusable*>(&producer);
  MBKIT_CHECK(fusable != nullptr, "relu ", node.name, " fused into a kernel that cannot run it");
  return std::make_unique<FusedReluKernel>(context, node, *fusable);
}

}  // namespace mbkit::backend::cpu
