// 2-D convolution on cuDNN. Each pass (forward, input gradient, weight gradient) takes the
// fastest deterministic fp32 algorithm cuDNN has for its shape, measured once per process with
// cudnnFind* (which runs them all) and kept in a cache keyed by the full shape (ConvKey): every
// later layer, batch size or network with that shape reuses the choice. All layers share one
// workspace, grown to the largest an algorithm asks for. Weights are used in place:
// (out, in, kh, kw) in the flat buffer is cuDNN's NCHW filter layout.
//
// --precision: fp32 pins FMA math (no tensor cores); tf32 lets cuDNN use TF32 tensor cores on the
// same fp32 tensors (default math); bf16 runs each pass on bf16 copies of its operands, input,
// weights and output gradient, rounded once per pass by to_bf16 into scratch made once per batch
// size, with fp32 accumulation (PSEUDO_BFLOAT16: a float compute type), and widens the pass's
// bf16 result into the fp32 activation or gradient. The bias and everything after a convolution
// stay fp32. The precision is part of the algorithm cache's key.
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/conv_key.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::backend::cuda {
namespace {

/// Algorithms needing more workspace than this are passed over (a GPU shared with the model's
/// activations; the fastest ones for this toolkit's models need a few MB).
constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;

struct Choice {
  int algo = 0;
  std::size_t workspace = 0;
  bool deterministic = true;
  cudnnMathType_t math = CUDNN_FMA_MATH;  ///< what the algorithm was measured with
};

/// The process-wide algorithm cache (cudnnFind* costs about as much as running every algorithm).
class AlgorithmCache {
 public:
  static AlgorithmCache& instance() {
    static AlgorithmCache cache;
    return cache;
  }
  std::optional<Choice> find(const ConvKey& key) {
    const std::lock_guard lock(mutex_);
    const auto found = choices_.find(key);
    if (found == choices_.end()) return std::nullopt;
    return found->second;
  }
  void put(const ConvKey& key, Choice choice) {
    const std::lock_guard lock(mutex_);
    choices_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<ConvKey, Choice, ConvKeyHash> choices_;
};

/// The first (fastest: cuDNN sorts them) usable result: it ran, it is deterministic (the same
/// seed must give the same model) unless `any_determinism`, it uses tensor cores only where
/// `tensor_ops` (tf32, bf16; never at fp32, whose results compare with the CPU) and never with a
/// conversion to fp16, and its workspace fits.
template <class Perf>
std::optional<Choice> first_usable(const Perf* results, int count, bool tensor_ops,
                                   bool any_determinism = false) {
  for (int i = 0; i < count; ++i) {
    const Perf& perf = results[i];
    const bool deterministic = perf.determinism == CUDNN_DETERMINISTIC;
    if (perf.status != CUDNN_STATUS_SUCCESS || !(deterministic || any_determinism)) continue;
    if (perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (perf.mathType == CUDNN_TENSOR_OP_MATH && !tensor_ops) continue;
    if (perf.memory > kMaxWorkspace) continue;
    return Choice{static_cast<int>(perf.algo), perf.memory, deterministic, perf.mathType};
  }
  return std::nullopt;
}

/// The convolution descriptor's math type at a precision: FMA only at fp32; at tf32 cuDNN's
/// default, which allows TF32 tensor cores for fp32 data; tensor cores for bf16 data.
cudnnMathType_t math_for(nn::Precision precision) {
  switch (precision) {
    case nn::Precision::kFp32:
      return CUDNN_FMA_MATH;
    case nn::Precision::kTf32:
      return CUDNN_DEFAULT_MATH;
    case nn::Precision::kBf16:
      return CUDNN_TENSOR_OP_MATH;
  }
  return CUDNN_FMA_MATH;
}

class FilterDesc {
 public:
  FilterDesc(int k, int c, int h, int w, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    MBKIT_CUDNN_CHECK(cudnnCreateFilterDescriptor(desc_.out()));
    MBKIT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, type, CUDNN_TENSOR_NCHW, k, c, h, w));
  }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  Owned<cudnnFilterDescriptor_t, &cudnnDestroyFilterDescriptor> desc_;
};

class ConvDesc {
 public:
  ConvDesc(int pad_h, int pad_w, int stride_h, int stride_w, cudnnMathType_t math) {
    MBKIT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(desc_.out()));
    // A float compute type at every precision: bf16 operands accumulate in fp32.
    MBKIT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, pad_h, pad_w, stride_h, stride_w, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // At fp32, FMA math: no TF32 tensor cores, which cuDNN's default math allows for fp32 on
    // Ampere on.
    MBKIT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, math));
  }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  Owned<cudnnConvolutionDescriptor_t, &cudnnDestroyConvolutionDescriptor> desc_;
};

class ConvKernel final : public CudaKernel {
 public:
  ConvKernel(Context& context, const nn::Node& node)
      : CudaKernel(context, node),
        padding_(plan_padding(node.pad_top, node.pad_bottom, node.pad_left, node.pad_right)),
        filter_(node.units, static_cast<int>(node.params[0].shape[1]), node.kernel_h,
                node.kernel_w),
        conv_(padding_.pad_h, padding_.pad_w, node.stride_h, node.stride_w,
              math_for(context.precision)),
        bias_(1, node.units, 1, 1) {
    if (bf16()) {
      filter16_.emplace(node.units, static_cast<int>(node.params[0].shape[1]), node.kernel_h,
                        node.kernel_w, CUDNN_DATA_BFLOAT16);
      const std::size_t bytes = weights() * sizeof(std::uint16_t);
      w16_ = DeviceMemory(bytes);
      dw16_ = DeviceMemory(bytes);
    }
  }

 protected:
  void do_prepare(int batch, std::span<nn::Tensor* const> inputs, CudaTensor& output) override {
    const nn::Dims in = inputs[0]->dims();
    auto plan = std::make_unique<Plan>();
    plan->geometry = {batch,
                      in.c,
                      in.h,
                      in.w,
                      in.h + padding_.extra_top + padding_.extra_bottom,
                      in.w + padding_.extra_left + padding_.extra_right,
                      padding_.extra_top,
                      padding_.extra_left};
    const PadGeometry& g = plan->geometry;
    plan->x.set(batch, in.c, g.padded_h, g.padded_w);
    if (padding_.copies()) {
      plan->padded = DeviceMemory(static_cast<std::size_t>(batch) * in.c * g.padded_h * g.padded_w *
                                  sizeof(float));
    }
    int n = 0, c = 0, h = 0, w = 0;
    MBKIT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.get(), plan->x.get(),
                                                            filter_.get(), &n, &c, &h, &w));
    const nn::Dims out = node_.output;
    MBKIT_CHECK(n == batch && c == out.c && h == out.h && w == out.w, "cuDNN makes ", n, "x", c,
                "x", h, "x", w, " of a layer whose output is ", batch, "x", out.text());
    plan->y.set(batch, out.c, out.h, out.w);
    if (bf16()) {
      plan->x16.set(batch, in.c, g.padded_h, g.padded_w, CUDNN_DATA_BFLOAT16);
      plan->y16.set(batch, out.c, out.h, out.w, CUDNN_DATA_BFLOAT16);
      plan->x16_memory = DeviceMemory(static_cast<std::size_t>(batch) * in.c * g.padded_h *
                                      g.padded_w * sizeof(std::uint16_t));
      plan->y16_memory =
          DeviceMemory(static_cast<std::size_t>(batch) * out.size() * sizeof(std::uint16_t));
    }
    output.allocate();
    plan->key = ConvKey{ConvPass::kForward,
                        batch,
                        in.c,
                        g.padded_h,
                        g.padded_w,
                        out.c,
                        node_.kernel_h,
                        node_.kernel_w,
                        padding_.pad_h,
                        padding_.pad_w,
                        node_.stride_h,
                        node_.stride_w,
                        1,
                        1,
                        static_cast<int>(math_for(context_.precision)),
                        static_cast<int>(bf16() ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT),
                        static_cast<int>(context_.precision)};
    plan->forward = choose(ConvPass::kForward, *plan);
    plan->filter = choose(ConvPass::kBackwardFilter, *plan);
    plans_[batch] = std::move(plan);
    // The input gradient's algorithm is chosen at the first backward pass that needs one (the
    // first layer's never does).
  }

  void do_forward(nn::KernelArgs& args) override {
    Plan& plan = *plans_.at(args.batch);
    const float* x = source(plan, cuda(*args.inputs[0]));
    void* workspace = context_.workspace(plan.forward.workspace);
    const float one = 1.0f, zero = 0.0f;
    float* y = cuda(*args.output).data();
    use_math(plan.forward);
    if (bf16()) {
      to_bf16(plan.x16_memory.as<std::uint16_t>(), x, input_count(plan), stream());
      to_bf16(w16_.as<std::uint16_t>(), args.params[0], static_cast<std::int64_t>(weights()),
              stream());
      MBKIT_CUDNN_CHECK(cudnnConvolutionForward(
          context_.cudnn, &one, plan.x16.get(), plan.x16_memory.get(), filter16_->get(), w16_.get(),
          conv_.get(), static_cast<cudnnConvolutionFwdAlgo_t>(plan.forward.algo), workspace,
          plan.forward.workspace, &zero, plan.y16.get(), plan.y16_memory.get()));
      from_bf16(y, plan.y16_memory.as<std::uint16_t>(), cuda(*args.output).count(), stream());
    } else {
      MBKIT_CUDNN_CHECK(cudnnConvolutionForward(
          context_.cudnn, &one, plan.x.get(), x, filter_.get(), args.params[0], conv_.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(plan.forward.algo), workspace,
          plan.forward.workspace, &zero, plan.y.get(), y));
    }
    if (node_.bias) {
      MBKIT_CUDNN_CHECK(
          cudnnAddTensor(context_.cudnn, &one, bias_.get(), args.params[1], &one, plan.y.get(), y));
    }
  }

  void do_backward(nn::KernelArgs& args) override {
    Plan& plan = *plans_.at(args.batch);
    const float one = 1.0f, zero = 0.0f;
    const float* dy = cuda(*args.output_grad).data();
    // The forward pass's (padded) input, still there.
    const float* x = padding_.copies() ? plan.padded.as<float>() : cuda(*args.inputs[0]).data();
    void* workspace = context_.workspace(plan.filter.workspace);
    use_math(plan.filter);
    if (bf16()) {
      // dY rounded into the forward pass's bf16 output (free again); X as the forward pass
      // rounded it.
      const std::int64_t outputs = cuda(*args.output_grad).count();
      to_bf16(plan.y16_memory.as<std::uint16_t>(), dy, outputs, stream());
      MBKIT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
          context_.cudnn, &one, plan.x16.get(), plan.x16_memory.get(), plan.y16.get(),
          plan.y16_memory.get(), conv_.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.filter.algo), workspace,
          plan.filter.workspace, &zero, filter16_->get(), dw16_.get()));
      from_bf16(args.param_grads[0], dw16_.as<std::uint16_t>(),
                static_cast<std::int64_t>(weights()), stream());
    } else {
      MBKIT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
          context_.cudnn, &one, plan.x.get(), x, plan.y.get(), dy, conv_.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.filter.algo), workspace,
          plan.filter.workspace, &zero, filter_.get(), args.param_grads[0]));
    }
    if (node_.bias) {
      MBKIT_CUDNN_CHECK(cudnnConvolutionBackwardBias(context_.cudnn, &one, plan.y.get(), dy, &zero,
                                                     bias_.get(), args.param_grads[1]));
    }
    if (args.input_grads[0] == nullptr) return;
    if (!plan.data) {
      plan.data = choose(ConvPass::kBackwardData, plan);
      if (padding_.copies()) plan.padded_grad = DeviceMemory(plan.padded.bytes());
    }
    float* dx = cuda(*args.input_grads[0]).data();
    float* target = padding_.copies() ? plan.padded_grad.as<float>() : dx;
    workspace = context_.workspace(plan.data->workspace);
    use_math(*plan.data);
    if (bf16()) {
      // dX in bf16 into the input's bf16 copy, which the weight gradient above was the last to
      // read, then widened; W as the forward pass rounded it.
      MBKIT_CUDNN_CHECK(cudnnConvolutionBackwardData(
          context_.cudnn, &one, filter16_->get(), w16_.get(), plan.y16.get(), plan.y16_memory.get(),
          conv_.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.data->algo), workspace,
          plan.data->workspace, &zero, plan.x16.get(), plan.x16_memory.get()));
      from_bf16(target, plan.x16_memory.as<std::uint16_t>(), input_count(plan), stream());
    } else {
      MBKIT_CUDNN_CHECK(cudnnConvolutionBackwardData(
          context_.cudnn, &one, filter_.get(), args.params[0], plan.y.get(), dy, conv_.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.data->algo), workspace,
          plan.data->workspace, &zero, plan.x.get(), target));
    }
    if (padding_.copies()) crop_copy(dx, target, plan.geometry, stream());
  }

 private:
  struct Plan {
    ConvKey key;  ///< of the forward pass at this batch size (choose() sets the pass)
    PadGeometry geometry;
    TensorDesc x, y;  ///< x: the input as cuDNN reads it (padded when padding_ copies)
    DeviceMemory padded, padded_grad;
    // bf16 only: x and y as bf16, and their memory (x16 also holds dX, y16 dY).
    TensorDesc x16, y16;
    DeviceMemory x16_memory, y16_memory;
    Choice forward, filter;
    std::optional<Choice> data;
  };

  bool bf16() const { return context_.precision == nn::Precision::kBf16; }
  std::size_t weights() const {
    return static_cast<std::size_t>(node_.units) *
           static_cast<std::size_t>(node_.params[0].shape[1]) *
           static_cast<std::size_t>(node_.kernel_h) * static_cast<std::size_t>(node_.kernel_w);
  }
  /// Elements of the input as cuDNN reads it (padded).
  static std::int64_t input_count(const Plan& plan) {
    const PadGeometry& g = plan.geometry;
    return static_cast<std::int64_t>(g.batch) * g.channels * g.padded_h * g.padded_w;
  }
  /// Below fp32 the descriptor takes the math type each pass's algorithm was measured with (as
  /// cuDNN's find results ask); fp32 keeps FMA math throughout.
  void use_math(const Choice& choice) {
    if (context_.precision == nn::Precision::kFp32) return;
    MBKIT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), choice.math));
  }

  const float* source(Plan& plan, const CudaTensor& input) {
    if (!padding_.copies()) return input.data();
    pad_copy(plan.padded.as<float>(), input.data(), plan.geometry, stream());
    return plan.padded.as<float>();
  }

  Choice choose(ConvPass pass, const Plan& plan) {
    ConvKey key = plan.key;
    key.pass = pass;
    AlgorithmCache& cache = AlgorithmCache::instance();
    if (const auto cached = cache.find(key)) return *cached;
    const Choice choice = measure(pass, plan, key);
    log::verbose(cat("layer ", node_.name, ": cuDNN algorithm ", choice.algo, " (workspace ",
                     choice.workspace, " bytes) for ", key.text()));
    cache.put(key, choice);
    return choice;
  }

  /// cudnnFind* (runs every algorithm), else the heuristics of cudnnGet*_v7; at bf16 on the
  /// bf16 descriptors.
  Choice measure(ConvPass pass, const Plan& plan, const ConvKey& key) {
    cudnnHandle_t handle = context_.cudnn;
    const bool tensor_ops = context_.precision != nn::Precision::kFp32;
    const cudnnTensorDescriptor_t x = bf16() ? plan.x16.get() : plan.x.get();
    const cudnnTensorDescriptor_t y = bf16() ? plan.y16.get() : plan.y.get();
    const cudnnFilterDescriptor_t w = bf16() ? filter16_->get() : filter_.get();
    // The descriptor's own math type while cuDNN measures (a previous pass may have set another).
    MBKIT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), math_for(context_.precision)));
    std::optional<Choice> choice;
    int returned = 0;
    switch (pass) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        MBKIT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(
            handle, x, w, conv_.get(), y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
        choice = first_usable(perf, returned, tensor_ops);
        if (!choice) {
          MBKIT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
              handle, x, w, conv_.get(), y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
          choice = first_usable(perf, returned, tensor_ops);
        }
        if (!choice) choice = first_usable(perf, returned, tensor_ops, true);
        break;
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        MBKIT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
            handle, w, y, conv_.get(), x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
        choice = first_usable(perf, returned, tensor_ops);
        if (!choice) {
          MBKIT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
              handle, w, y, conv_.get(), x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
              perf));
          choice = first_usable(perf, returned, tensor_ops);
        }
        if (!choice) choice = first_usable(perf, returned, tensor_ops, true);
        break;
      }
      case ConvPass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        MBKIT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
            handle, x, y, conv_.get(), w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
            perf));
        choice = first_usable(perf, returned, tensor_ops);
        if (!choice) {
          MBKIT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              handle, x, y, conv_.get(), w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
              perf));
          choice = first_usable(perf, returned, tensor_ops);
        }
        if (!choice) choice = first_usable(perf, returned, tensor_ops, true);
        break;
      }
    }
    if (!choice) {
      fail(cat("cuDNN has no ", nn::precision_name(context_.precision), " algorithm within ",
               kMaxWorkspace >> 20, " MiB of workspace for ", key.text()));
    }
    if (!choice->deterministic) {
      // Better a run than none; but the same seed may then give slightly different models.
      log::warn(cat("layer ", node_.name, ": cuDNN has only a non-deterministic algorithm for ",
                    key.text(), "; runs with the same seed may differ"));
    }
    return *choice;
  }

  PaddingPlan padding_;
  FilterDesc filter_;
  ConvDesc conv_;
  TensorDesc bias_;
  std::map<int, std::unique_ptr<Plan>> plans_;
  // bf16 only: the weights' descriptor and their bf16 copy (rounded at each forward pass), and
  // the weight gradient as cuDNN writes it.
  std::optional<FilterDesc> filter16_;
  DeviceMemory w16_, dw16_;
};

}  // namespace

std::unique_ptr<nn::Kernel> make_conv_kernel(Context& context, const nn::Node& node) {
  return std::make_unique<ConvKernel>(context, node);
}

}  // namespace mbkit::backend::cuda
