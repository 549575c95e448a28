// Dense (fully connected) layer on cuBLAS: the weight is (out, in) row-major in the flat buffer,
// as PyTorch's Linear, which cuBLAS (column-major) reads as W^T (in x out) in place. Row-major
// Y (n x out) = X W^T + b is column-major Y^T = W X^T: every row of Y starts as the bias and the
// sgemm adds to it (beta = 1), as the CPU backend does.
//
// --precision tf32 is the handle's math mode (cuda_backend.cpp). At bf16 the products take bf16
// copies of their operands (X and W in the forward pass, dY in the backward) and accumulate and
// write fp32 (cublasGemmEx: A and B CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F): Y, dW and dX
// stay fp32, and the bias is fp32 throughout.
#include <map>

#include "cuda_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cuda {
namespace {

class DenseKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CudaTensor& output) override {
    MBKIT_CHECK(inputs[0]->dims().size() == features(), "dense layer of ", features(),
                " inputs fed ", inputs[0]->dims().text());
    output.allocate();
    if (!bf16()) return;
    // Scratch for the bf16 operands, made once per batch size (the weights' once) and reused.
    const auto n = static_cast<std::size_t>(batch);
    Bf16Scratch& scratch = scratch_[batch];
    scratch.x = DeviceMemory(n * static_cast<std::size_t>(features()) * sizeof(std::uint16_t));
    scratch.dy = DeviceMemory(n * static_cast<std::size_t>(node_.units) * sizeof(std::uint16_t));
    if (w16_.bytes() == 0) w16_ = DeviceMemory(weights() * sizeof(std::uint16_t));
  }

  void do_forward(nn::KernelArgs& args) override {
    const float* x = cuda(*args.inputs[0]).data();
    float* y = cuda(*args.output).data();
    const int n = args.batch, out = node_.units, in = features();
    float beta = 0.0f;
    if (node_.bias) {
      broadcast_rows(y, args.params[1], n, out, stream());
      beta = 1.0f;
    }
    const float one = 1.0f;
    if (bf16()) {
      Bf16Scratch& scratch = scratch_.at(n);
      to_bf16(scratch.x.as<std::uint16_t>(), x, static_cast<std::int64_t>(n) * in, stream());
      to_bf16(w16_.as<std::uint16_t>(), args.params[0], static_cast<std::int64_t>(weights()),
              stream());
      gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w16_.get(), in, scratch.x.get(), in, beta, y,
                out);
      return;
    }
    // Y^T (out x n) = op(W^T as stored) (out x in) * X^T (in x n).
    MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one,
                                   args.params[0], in, x, in, &beta, y, out));
  }

  void do_backward(nn::KernelArgs& args) override {
    const float* x = cuda(*args.inputs[0]).data();
    const float* dy = cuda(*args.output_grad).data();
    const int n = args.batch, out = node_.units, in = features();
    const float one = 1.0f, zero = 0.0f;
    // db = column sums of dY, in row order (the CPU backend's order), fp32 at every precision.
    if (node_.bias) column_sums(args.param_grads[1], dy, n, out, stream());
    if (bf16()) {
      // X and W as the forward pass rounded them (same step, same batch size).
      Bf16Scratch& scratch = scratch_.at(n);
      to_bf16(scratch.dy.as<std::uint16_t>(), dy, static_cast<std::int64_t>(n) * out, stream());
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, scratch.x.get(), in, scratch.dy.get(), out,
                0.0f, args.param_grads[0], in);
      if (args.input_grads[0] != nullptr) {
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w16_.get(), in, scratch.dy.get(), out, 0.0f,
                  cuda(*args.input_grads[0]).data(), in);
      }
      return;
    }
    // dW (out x in, row-major) = dY^T X; column-major dW^T (in x out) = X^T (in x n) dY (n x out).
    MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                   in, dy, out, &zero, args.param_grads[0], in));
    if (args.input_grads[0] != nullptr) {
      // dX (n x in, row-major) = dY W; column-major dX^T (in x n) = W^T (in x out) dY^T (out x n).
      MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one,
                                     args.params[0], in, dy, out, &zero,
                                     cuda(*args.input_grads[0]).data(), in));
    }
  }

 private:
  struct Bf16Scratch {
    DeviceMemory x;   ///< the input, rounded in the forward pass, read again by dW
    DeviceMemory dy;  ///< the output's gradient, rounded
  };

  int features() const { return static_cast<int>(node_.params[0].shape[1]); }
  std::size_t weights() const {
    return static_cast<std::size_t>(node_.units) * static_cast<std::size_t>(features());
  }
  bool bf16() const { return context_.precision == nn::Precision::kBf16; }

  /// C (fp32, m x n column-major) = A B + beta C with A and B bf16: fp32 accumulation.
  void gemm_bf16(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const void* a,
                 int lda, const void* b, int ldb, float beta, float* c, int ldc) {
    const float one = 1.0f;
    MBKIT_CUBLAS_CHECK(cublasGemmEx(context_.cublas, op_a, op_b, m, n, k, &one, a, CUDA_R_16BF, lda,
                                    b, CUDA_R_16BF, ldb, &beta, c, CUDA_R_32F, ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  DeviceMemory w16_;  ///< the weights, rounded at each forward pass
  std::map<int, Bf16Scratch> scratch_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_dense_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<DenseKernel>(context, node);
}

}  // namespace mbkit::backend::cuda
