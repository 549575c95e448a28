// Dense (fully connected) layer on cuBLAS: the weight is (out, in) row-major in the flat buffer,
// as PyTorch's Linear, which cuBLAS (column-major) reads as W^T (in x out) in place. Row-major
// Y (n x out) = X W^T + b is column-major Y^T = W X^T: every row of Y starts as the bias and the
// sgemm adds to it (beta = 1), as the CPU backend does.
#include "cuda_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cuda {
namespace {

class DenseKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

 protected:
  void do_prepare(int, std::span<nn::Tensor* const> inputs, CudaTensor& output) override {
    MBKIT_CHECK(inputs[0]->dims().size() == features(), "dense layer of ", features(),
                " inputs fed ", inputs[0]->dims().text());
    output.allocate();
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
    // Y^T (out x n) = op(W^T as stored) (out x in) * X^T (in x n).
    MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one,
                                   args.params[0], in, x, in, &beta, y, out));
  }

  void do_backward(nn::KernelArgs& args) override {
    const float* x = cuda(*args.inputs[0]).data();
    const float* dy = cuda(*args.output_grad).data();
    const int n = args.batch, out = node_.units, in = features();
    const float one = 1.0f, zero = 0.0f;
    // dW (out x in, row-major) = dY^T X; column-major dW^T (in x out) = X^T (in x n) dY (n x out).
    MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                   in, dy, out, &zero, args.param_grads[0], in));
    // db = column sums of dY, in row order (the CPU backend's order).
    if (node_.bias) column_sums(args.param_grads[1], dy, n, out, stream());
    if (args.input_grads[0] != nullptr) {
      // dX (n x in, row-major) = dY W; column-major dX^T (in x n) = W^T (in x out) dY^T (out x n).
      MBKIT_CUBLAS_CHECK(cublasSgemm(context_.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one,
                                     args.params[0], in, dy, out, &zero,
                                     cuda(*args.input_grads[0]).data(), in));
    }
  }

 private:
  int features() const { return static_cast<int>(node_.params[0].shape[1]); }
};

}  // namespace

std::unique_ptr<nn::Kernel> make_dense_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<DenseKernel>(context, node);
}

}  // namespace mbkit::backend::cuda
