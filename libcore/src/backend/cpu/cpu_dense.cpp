// Dense (fully connected) layer on oneDNN's sgemm: the weight is (out, in) in the flat buffer,
// as PyTorch's Linear, so Y = X W^T + b reads it in place. The forward pass runs oneDNN's matmul
// primitive instead where it has a brgemm kernel (AVX-512 in oneDNN 2.6): there it is faster than
// sgemm (64x784x256: about 0.85 of sgemm's time) and adds the bias itself. Elsewhere matmul is
// sgemm plus a pass, so sgemm is called directly.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <string>

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {
namespace {

class DenseKernel final : public CpuKernel {
 public:
  using CpuKernel::CpuKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CpuTensor& output) override {
    const CpuTensor& input = cpu(*inputs[0]);
    output.allocate(plain_desc(batch, node_.output, true), context_);
    Plan plan;
    // The rows must be plain (N, in): anything else is reordered into a scratch buffer.
    const memory::desc plain = plain_like(input.desc());
    if (!(input.desc() == plain)) {
      plan.plain_input = memory(plain, context_.engine);
      plan.to_plain = Reorder(context_, input.desc(), plain);
      plan.plain_input_grad = memory(plain, context_.engine);
      plan.from_plain = Reorder(context_, plain, input.desc());
    }
    // Y (n, out) = X (n, in) W^T: matmul's weights (in, out) are W read column-major ("ba").
    const memory::dim rows = batch, out = node_.units, in = features();
    const memory::desc x_desc({rows, in}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc w_desc({in, out}, memory::data_type::f32, memory::format_tag::ba);
    const memory::desc b_desc({1, out}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc y_desc({rows, out}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc matmul_pd(
        node_.bias ? dnnl::matmul::desc(x_desc, w_desc, b_desc, y_desc)
                   : dnnl::matmul::desc(x_desc, w_desc, y_desc),
        context_.engine);
    if (std::string(matmul_pd.impl_info_str()).starts_with("brg")) {
      plan.matmul = dnnl::matmul(matmul_pd);
      plan.x = memory(x_desc, context_.engine, nullptr);
      plan.w = memory(w_desc, context_.engine, nullptr);
      plan.b = memory(b_desc, context_.engine, nullptr);
    }
    plans_[batch] = std::move(plan);
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const float* x = rows(plan, cpu(*args.inputs[0]));
    float* y = cpu(*args.output).data();
    const dnnl_dim_t n = args.batch, out = node_.units, in = features();
    const float* weight = args.params[0];
    if (plan.matmul) {
      plan.x.set_data_handle(const_cast<float*>(x));
      plan.w.set_data_handle(const_cast<float*>(weight));
      std::unordered_map<int, memory> matmul_args{{DNNL_ARG_SRC, plan.x},
                                                  {DNNL_ARG_WEIGHTS, plan.w},
                                                  {DNNL_ARG_DST, cpu(*args.output).mem()}};
      if (node_.bias) {
        plan.b.set_data_handle(const_cast<float*>(args.params[1]));
        matmul_args.emplace(DNNL_ARG_BIAS, plan.b);
      }
      execute(plan.matmul, matmul_args);
      return;
    }
    float beta = 0.0f;
    if (node_.bias) {
      // Start every row from the bias and let the gemm add X W^T to it.
      const float* bias = args.params[1];
#pragma omp parallel for schedule(static)
      for (dnnl_dim_t i = 0; i < n; ++i) std::copy(bias, bias + out, y + i * out);
      beta = 1.0f;
    }
    MBKIT_DNNL_CHECK(dnnl_sgemm('N', 'T', n, out, in, 1.0f, x, in, weight, in, beta, y, out));
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = plans_.at(args.batch);
    const float* x = rows(plan, cpu(*args.inputs[0]), /*reorder=*/false);
    const float* dy = cpu(*args.output_grad).data();
    const dnnl_dim_t n = args.batch, out = node_.units, in = features();
    // dW = dY^T X  (out x in)
    MBKIT_DNNL_CHECK(
        dnnl_sgemm('T', 'N', out, in, n, 1.0f, dy, out, x, in, 0.0f, args.param_grads[0], in));
    if (node_.bias) {
      // db = column sums of dY, each summed in row order (deterministic). The rows are read in
      // order, adding a block of columns at once, so the additions run across the columns.
      float* db = args.param_grads[1];
      constexpr dnnl_dim_t kBlock = 256;
#pragma omp parallel for schedule(static) if (out > kBlock)
      for (dnnl_dim_t first = 0; first < out; first += kBlock) {
        const dnnl_dim_t width = std::min(kBlock, out - first);
        float sums[kBlock] = {};
        for (dnnl_dim_t i = 0; i < n; ++i) {
          const float* row = dy + i * out + first;
          for (dnnl_dim_t j = 0; j < width; ++j) sums[j] += row[j];
        }
        std::copy(sums, sums + width, db + first);
      }
    }
    if (args.input_grads[0] != nullptr) {
      CpuTensor& grad_in = cpu(*args.input_grads[0]);
      float* dx = plan.from_plain ? static_cast<float*>(plan.plain_input_grad.get_data_handle())
                                  : grad_in.data();
      // dX = dY W  (n x in)
      MBKIT_DNNL_CHECK(
          dnnl_sgemm('N', 'N', n, in, out, 1.0f, dy, out, args.params[0], in, 0.0f, dx, in));
      if (plan.from_plain) plan.from_plain.run(context_, plan.plain_input_grad, grad_in.mem());
    }
  }

 private:
  struct Plan {
    memory plain_input, plain_input_grad;
    Reorder to_plain, from_plain;
    dnnl::matmul matmul;  ///< the forward pass where oneDNN has a brgemm matmul, else empty
    memory x, w, b;       ///< its arguments, pointed at the step's buffers
  };

  dnnl_dim_t features() const {
    return static_cast<dnnl_dim_t>(node_.params[0].shape[1]);
  }

  // The input as plain rows; `reorder` = false reuses the rows made by the forward pass.
  const float* rows(Plan& plan, CpuTensor& input, bool reorder = true) {
    if (!plan.to_plain) return input.data();
    if (reorder) plan.to_plain.run(context_, input.mem(), plan.plain_input);
    return static_cast<const float*>(plan.plain_input.get_data_handle());
  }

  std::map<int, Plan> plans_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_dense_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<DenseKernel>(context, node);
}

}  // namespace mbkit::backend::cpu
