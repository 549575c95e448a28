// The CUDA backend: one GPU, a compute stream every kernel, cuDNN and cuBLAS call is queued on,
// and a copy stream that brings each batch from pinned host memory.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/backend.hpp"
#include "mbkit/nn/kernel_table.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend::cuda {

DeviceMemory::DeviceMemory(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) MBKIT_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) cudaFree(data_);  // nothing to report from a destructor
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

TensorDesc::TensorDesc() {
  MBKIT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
}

TensorDesc::TensorDesc(int n, int c, int h, int w) : TensorDesc() {
  set(n, c, h, w);
}

TensorDesc::~TensorDesc() {
  cudnnDestroyTensorDescriptor(desc_);
}

void TensorDesc::set(int n, int c, int h, int w, cudnnDataType_t type) {
  MBKIT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, type, n, c, h, w));
}

Context::Context(int gpu_index) : gpu(gpu_index) {
  MBKIT_CUDA_CHECK(cudaSetDevice(gpu));
  cudaDeviceProp properties{};
  MBKIT_CUDA_CHECK(cudaGetDeviceProperties(&properties, gpu));
  gpu_name = properties.name;
  gpu_memory = properties.totalGlobalMem;
  compute_major = properties.major;
  compute_minor = properties.minor;
  MBKIT_CUDA_CHECK(cudaStreamCreateWithFlags(stream.out(), cudaStreamNonBlocking));
  MBKIT_CUDA_CHECK(cudaStreamCreateWithFlags(copy_stream.out(), cudaStreamNonBlocking));
  MBKIT_CUDNN_CHECK(cudnnCreate(cudnn.out()));
  MBKIT_CUDNN_CHECK(cudnnSetStream(cudnn, stream));
  MBKIT_CUBLAS_CHECK(cublasCreate(cublas.out()));
  MBKIT_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // fp32 as fp32: no TF32 tensor cores (--precision will choose them explicitly).
  MBKIT_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
}

Context::~Context() {
  // Teardown errors (a lost device) are not worth a second exception. The handles go with
  // the members, once the queued work that uses them is done.
  if (stream.get() != nullptr) cudaStreamSynchronize(stream);
}

void Context::activate() const {
  MBKIT_CUDA_CHECK(cudaSetDevice(gpu));
}

void* Context::workspace(std::size_t bytes) {
  if (bytes > workspace_.bytes()) {
    // Work queued on the stream may still use the old workspace.
    MBKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    workspace_ = DeviceMemory();
    workspace_ = DeviceMemory(bytes);
    ++workspace_generation;
  }
  return workspace_.get();
}

PinnedMemory::~PinnedMemory() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

void PinnedMemory::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return;
  if (data_ != nullptr) MBKIT_CUDA_CHECK(cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
  MBKIT_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  bytes_ = bytes;
}

void Context::synchronize() const {
  MBKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

bool Context::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MBKIT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void CudaTensor::allocate() {
  memory_ = DeviceMemory(bytes());
  data_ = memory_.as<float>();
}

CudaTensor& cuda(nn::Tensor& tensor) {
  return static_cast<CudaTensor&>(tensor);
}
const CudaTensor& cuda(const nn::Tensor& tensor) {
  return static_cast<const CudaTensor&>(tensor);
}

namespace {

[[noreturn]] void rethrow(const nn::Node& node, const char* phase, const Error& error) {
  throw Error(cat("layer ", node.name, " (", nn::op_name(node.op), ") ", phase, ": ", error.what()),
              error.code(), error.where());
}

}  // namespace

void CudaKernel::prepare(int batch, std::span<nn::Tensor* const> inputs, nn::Tensor& output) {
  try {
    context_.activate();
    do_prepare(batch, inputs, cuda(output));
  } catch (const Error& error) {
    rethrow(node_, "setup", error);
  }
}

void CudaKernel::forward(nn::KernelArgs& args) {
  try {
    context_.activate();
    do_forward(args);
  } catch (const Error& error) {
    rethrow(node_, "forward", error);
  }
}

void CudaKernel::backward(nn::KernelArgs& args) {
  try {
    context_.activate();
    do_backward(args);
  } catch (const Error& error) {
    rethrow(node_, "backward", error);
  }
}

namespace {

/// Brings each batch to the GPU on the copy stream while the compute stream may still be running
/// the previous step: two device buffers (and two pinned host buffers) taken in turn, the input
/// tensor pointed at the one that holds the current batch. A buffer is refilled only once the step
/// that read it is done, and the compute stream waits for its copy: events, not the host.
class InputStaging {
 public:
  explicit InputStaging(Context& context) : context_(context) {
    for (Slot& slot : slots_) {
      MBKIT_CUDA_CHECK(cudaEventCreateWithFlags(slot.copied.out(), cudaEventDisableTiming));
      MBKIT_CUDA_CHECK(cudaEventCreateWithFlags(slot.consumed.out(), cudaEventDisableTiming));
    }
  }
  ~InputStaging() {
    // Queued copies and steps may still use the buffers freed after this (errors: nothing to do).
    cudaStreamSynchronize(context_.copy_stream);
    cudaStreamSynchronize(context_.stream);
  }
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;

  void copy(CudaTensor& input, const float* images) {
    const std::size_t bytes = input.bytes();
    // Everything queued since the last batch (that step) reads the current slot: mark its end.
    MBKIT_CUDA_CHECK(cudaEventRecord(slots_[current_].consumed, context_.stream));
    current_ ^= 1;
    Slot& slot = slots_[current_];
    if (bytes > slot.device.bytes()) grow(bytes);
    // The pinned buffer is free once its last copy is done; the device buffer once the step
    // before last, which read it, is (an event never recorded is no wait).
    MBKIT_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    std::memcpy(slot.host.get(), images, bytes);
    MBKIT_CUDA_CHECK(cudaStreamWaitEvent(context_.copy_stream, slot.consumed, 0));
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(slot.device.get(), slot.host.get(), bytes,
                                     cudaMemcpyHostToDevice, context_.copy_stream));
    MBKIT_CUDA_CHECK(cudaEventRecord(slot.copied, context_.copy_stream));
    MBKIT_CUDA_CHECK(cudaStreamWaitEvent(context_.stream, slot.copied, 0));
    input.alias(slot.device.as<float>());
  }

  /// As copy(), then on to the input's own memory on the compute stream (a device-to-device
  /// copy, microseconds): a step graph reads the batch at one address.
  void copy_fixed(CudaTensor& input, const float* images) {
    copy(input, images);
    const float* staged = input.data();
    input.own();
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(input.data(), staged, input.bytes(), cudaMemcpyDeviceToDevice,
                                     context_.stream));
  }

 private:
  struct Slot {
    DeviceMemory device;
    PinnedMemory host;
    OwnedEvent copied, consumed;
  };

  /// Both slots to at least `bytes` (a larger batch): when nothing queued uses them.
  void grow(std::size_t bytes) {
    MBKIT_CUDA_CHECK(cudaStreamSynchronize(context_.copy_stream));
    context_.synchronize();
    for (Slot& slot : slots_) {
      slot.device = DeviceMemory();
      slot.device = DeviceMemory(bytes);
      slot.host.reserve(bytes);
    }
  }

  Context& context_;
  Slot slots_[2];
  int current_ = 0;
};

/// A training step recorded on the compute stream (cudaStreamBeginCapture) and instantiated.
class CudaStepGraph final : public nn::StepGraph {
 public:
  CudaStepGraph(Context& context, cudaGraphExec_t exec, std::uint64_t workspace_generation)
      : context_(context), exec_(exec), workspace_generation_(workspace_generation) {}
  ~CudaStepGraph() override {
    // A replay may still be queued (errors here: nothing to do but release).
    cudaStreamSynchronize(context_.stream);
    cudaGraphExecDestroy(exec_);
  }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  bool replay() override {
    if (context_.workspace_generation != workspace_generation_) return false;
    context_.activate();
    MBKIT_CUDA_CHECK(cudaGraphLaunch(exec_, context_.stream));
    return true;
  }

 private:
  Context& context_;
  cudaGraphExec_t exec_;
  std::uint64_t workspace_generation_;
};

/// A flat buffer in device memory.
class DeviceBuffer final : public nn::Buffer {
 public:
  DeviceBuffer(DeviceMemory memory, std::size_t floats)
      : Buffer(memory.as<float>(), floats), memory_(std::move(memory)) {}

 private:
  DeviceMemory memory_;
};

OptimizerArgs optimizer_args(const nn::OptimizerUpdate& update) {
  using Rule = nn::OptimizerUpdate::Rule;
  OptimizerArgs args;
  switch (update.rule) {
    case Rule::kSgd:
      args.rule = OptimizerArgs::Rule::kSgd;
      break;
    case Rule::kMomentum:
      args.rule = OptimizerArgs::Rule::kMomentum;
      break;
    case Rule::kNesterov:
      args.rule = OptimizerArgs::Rule::kNesterov;
      break;
    case Rule::kRmsProp:
      args.rule = OptimizerArgs::Rule::kRmsProp;
      break;
    case Rule::kAdam:
      args.rule = OptimizerArgs::Rule::kAdam;
      break;
  }
  args.count = static_cast<std::int64_t>(update.count);
  args.params = update.params;
  args.grads = update.grads;
  args.state0 = update.state[0];
  args.state1 = update.state[1];
  args.lr = update.lr;
  args.weight_decay = update.weight_decay;
  args.momentum = update.momentum;
  args.beta1 = update.beta1;
  args.one_minus_beta1 = update.one_minus_beta1;
  args.beta2 = update.beta2;
  args.one_minus_beta2 = update.one_minus_beta2;
  args.epsilon = update.epsilon;
  return args;
}

/// Device seconds between two events on the compute stream: what the virtual clock counts for
/// a GPU's work (the host only launches it, then waits).
class StreamTimer final : public nn::DeviceTimer {
 public:
  explicit StreamTimer(const Context& context) : context_(context) {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventCreate(begin_.out()));
    MBKIT_CUDA_CHECK(cudaEventCreate(end_.out()));
  }
  // Destroying an event still queued is allowed: it is released once it completes.
  ~StreamTimer() override = default;
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  void start() override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(begin_, context_.stream));
  }

  double seconds() override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(end_, context_.stream));
    MBKIT_CUDA_CHECK(cudaEventSynchronize(end_));
    float milliseconds = 0;
    MBKIT_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, begin_, end_));
    return static_cast<double>(milliseconds) / 1000.0;
  }

 private:
  const Context& context_;
  OwnedEvent begin_;
  OwnedEvent end_;
};

constexpr nn::KernelTable<Context> kKernels{
    .input = make_input_kernel,
    .dense = make_dense_kernel,
    .conv = make_conv_kernel,
    .pool = make_pool_kernel,
    .batch_norm = make_batch_norm_kernel,
    .activation = make_activation_kernel,
    .dropout = make_dropout_kernel,
    .flatten = make_flatten_kernel,
    .add = make_add_kernel,
    .loss = make_loss_kernel,
    .concat = make_concat_kernel,
    .lrn = make_lrn_kernel,
};

// The backends this library made, so that context_of() recognises one without RTTI across the
// dlopen() boundary (the core's and this library's type_info of nn::Backend may differ).
std::mutex made_mutex;
std::unordered_map<const nn::Backend*, Context*>& made() {
  static std::unordered_map<const nn::Backend*, Context*> backends;
  return backends;
}

class CudaBackend final : public nn::Backend {
 public:
  CudaBackend(int gpu, nn::Precision precision) : context_(gpu), staging_(context_) {
    if (precision != nn::Precision::kFp32 && context_.compute_major < 8) {
      // TF32 and bf16 tensor cores (and cuBLAS's bf16 products) came with Ampere.
      usage_error(cat("--precision ", nn::precision_name(precision), ": cuda:", gpu, " (",
                      context_.gpu_name, ", compute capability ", context_.compute_major, ".",
                      context_.compute_minor, ") has no ", nn::precision_name(precision),
                      " tensor cores; they need 8.0 (Ampere) or newer"));
    }
    context_.precision = precision;
    // Dense layers: TF32 tensor cores for fp32 products at tf32. bf16 products name their types
    // and compute type in each call (cublasGemmEx), whatever the handle's mode.
    if (precision == nn::Precision::kTf32) {
      MBKIT_CUBLAS_CHECK(cublasSetMathMode(context_.cublas, CUBLAS_TF32_TENSOR_OP_MATH));
    }
    const std::lock_guard lock(made_mutex);  // last: a constructor that threw made nothing
    made()[this] = &context_;
  }
  ~CudaBackend() override {
    const std::lock_guard lock(made_mutex);
    made().erase(this);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string description() const override {
    const auto cudnn = cudnnGetVersion();
    int cublas_version = 0;
    cublasGetVersion(context_.cublas, &cublas_version);
    return strprintf("cuda:%d: %s (%.1f GiB), cuDNN %zu.%zu.%zu, cuBLAS %d, %s", context_.gpu,
                     context_.gpu_name.c_str(),
                     static_cast<double>(context_.gpu_memory) / (1024.0 * 1024.0 * 1024.0),
                     cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100, cublas_version,
                     std::string(nn::precision_name(context_.precision)).c_str());
  }

  int threads() const override { return 1; }

  bool supports(nn::Op op) const override { return kKernels.supports(op); }

  std::unique_ptr<nn::Kernel> make_kernel(const nn::Graph& graph, int index) override {
    return kKernels.make(context_, graph.node(index), "cuda");
  }

  std::unique_ptr<nn::Tensor> make_tensor(int batch, nn::Dims dims) override {
    return std::make_unique<CudaTensor>(batch, dims);
  }

  std::unique_ptr<nn::Tensor> make_tensor_like(const nn::Tensor& like) override {
    context_.activate();
    auto tensor = std::make_unique<CudaTensor>(like.batch(), like.dims());
    tensor->allocate();
    return tensor;
  }

  void set_input(nn::Tensor& input, const float* images) override {
    context_.activate();
    staging_.copy(cuda(input), images);
  }

  void set_input_fixed(nn::Tensor& input, const float* images) override {
    context_.activate();
    staging_.copy_fixed(cuda(input), images);
  }

  void read(const nn::Tensor& tensor, float* host) const override {
    context_.activate();
    const CudaTensor& source = cuda(tensor);
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(host, source.data(), source.bytes(), cudaMemcpyDeviceToHost,
                                     context_.stream));
    context_.synchronize();
  }

  void write(nn::Tensor& tensor, const float* host) override {
    context_.activate();
    CudaTensor& destination = cuda(tensor);
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(destination.data(), host, destination.bytes(),
                                     cudaMemcpyHostToDevice, context_.stream));
    context_.synchronize();  // `host` may go away when this returns
  }

  void accumulate(nn::Tensor& destination, const nn::Tensor& source) override {
    context_.activate();
    CudaTensor& to = cuda(destination);
    const CudaTensor& from = cuda(source);
    MBKIT_CHECK(to.count() == from.count(), "accumulate: ", to.count(), " and ", from.count(),
                " elements");
    cuda::accumulate(to.data(), from.data(), to.count(), context_.stream);
  }

  void synchronize() override {
    context_.activate();
    context_.synchronize();
  }

  std::unique_ptr<nn::DeviceTimer> make_device_timer() override {
    return std::make_unique<StreamTimer>(context_);
  }

  // Flat buffers: device memory, every operation queued on the compute stream; only the copies
  // to and from the host wait for it.
  std::unique_ptr<nn::Buffer> make_buffer(std::size_t floats) override {
    context_.activate();
    DeviceMemory memory(floats * sizeof(float));
    if (floats > 0) {
      MBKIT_CUDA_CHECK(cudaMemsetAsync(memory.get(), 0, memory.bytes(), context_.stream));
    }
    return std::make_unique<DeviceBuffer>(std::move(memory), floats);
  }

  bool host_accessible() const override { return false; }

  void copy(const nn::Buffer& source, std::size_t from, nn::Buffer& destination, std::size_t to,
            std::size_t count) override {
    context_.activate();
    MBKIT_CHECK(from <= source.size() && count <= source.size() - from &&
                    to <= destination.size() && count <= destination.size() - to,
                "copy of ", count, " floats from ", from, " of ", source.size(), " to ", to, " of ",
                destination.size());
    if (count == 0) return;
    const std::size_t bytes = count * sizeof(float);
    const bool overlaps =
        source.data() == destination.data() && (from < to ? to - from : from - to) < count;
    if (overlaps) {
      // cudaMemcpy's ranges must not overlap (the CPU's memmove allows it): through a copy.
      DeviceMemory between(bytes);
      MBKIT_CUDA_CHECK(cudaMemcpyAsync(between.get(), source.data() + from, bytes,
                                       cudaMemcpyDeviceToDevice, context_.stream));
      MBKIT_CUDA_CHECK(cudaMemcpyAsync(destination.data() + to, between.get(), bytes,
                                       cudaMemcpyDeviceToDevice, context_.stream));
      context_.synchronize();  // before `between` is freed
      return;
    }
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(destination.data() + to, source.data() + from, bytes,
                                     cudaMemcpyDeviceToDevice, context_.stream));
  }

  void fill(nn::Buffer& buffer, std::size_t offset, std::size_t count, float value) override {
    context_.activate();
    MBKIT_CHECK(offset <= buffer.size() && count <= buffer.size() - offset, "fill of ", count,
                " floats at ", offset, " in a buffer of ", buffer.size());
    if (count == 0) return;
    cuda::fill(buffer.data() + offset, static_cast<std::int64_t>(count), value, context_.stream);
  }

  void add(nn::Buffer& destination, const nn::Buffer& source, std::size_t count) override {
    context_.activate();
    MBKIT_CHECK(count <= destination.size() && count <= source.size(), "add of ", count,
                " floats to buffers of ", destination.size(), " and ", source.size());
    if (count == 0) return;
    cuda::accumulate(destination.data(), source.data(), static_cast<std::int64_t>(count),
                     context_.stream);
  }

  void optimizer_step(const nn::OptimizerUpdate& update) override {
    context_.activate();
    cuda::optimizer_step(optimizer_args(update), context_.stream);
  }

  nn::Precision precision() const override { return context_.precision; }

  // Step graphs: the compute stream recorded. Thread-local mode: a call of this thread that
  // would wait for the device or allocate during the recording fails it (and the step runs
  // eagerly); the exchange threads of other ranks' work are not affected.
  bool can_capture() const override { return true; }

  void begin_capture() override {
    context_.activate();
    capture_generation_ = context_.workspace_generation;
    MBKIT_CUDA_CHECK(cudaStreamBeginCapture(context_.stream, cudaStreamCaptureModeThreadLocal));
  }

  std::unique_ptr<nn::StepGraph> end_capture(std::string* why_not) override {
    context_.activate();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(context_.stream, &graph);
    std::string failure;
    cudaGraphExec_t exec = nullptr;
    if (ended != cudaSuccess || graph == nullptr) {
      failure =
          cat("cudaStreamEndCapture: ", cudaGetErrorName(ended), ": ", cudaGetErrorString(ended));
    } else if (context_.workspace_generation != capture_generation_) {
      failure = "the cuDNN workspace grew while recording";
    } else if (const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
               made != cudaSuccess) {
      failure =
          cat("cudaGraphInstantiate: ", cudaGetErrorName(made), ": ", cudaGetErrorString(made));
      exec = nullptr;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);  // the instantiated graph is independent
    if (!failure.empty()) {
      // A failed recording leaves its error for the next cudaGetLastError (a kernel launch's
      // check) to find: take it here, where it belongs.
      cudaGetLastError();
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      if (why_not != nullptr) *why_not = failure;
      return nullptr;
    }
    return std::make_unique<CudaStepGraph>(context_, exec, capture_generation_);
  }

 protected:
  void read_buffer(const nn::Buffer& source, std::size_t offset, std::span<float> host) override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(host.data(), source.data() + offset, host.size_bytes(),
                                     cudaMemcpyDeviceToHost, context_.stream));
    context_.synchronize();
  }

  void write_buffer(std::span<const float> host, nn::Buffer& destination,
                    std::size_t offset) override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(destination.data() + offset, host.data(), host.size_bytes(),
                                     cudaMemcpyHostToDevice, context_.stream));
    context_.synchronize();  // `host` may go away when this returns
  }

 private:
  Context context_;
  InputStaging staging_;
  std::uint64_t capture_generation_ = 0;  ///< workspace generation at begin_capture
};

}  // namespace

Context* context_of(nn::Backend& backend) {
  const std::lock_guard lock(made_mutex);
  const auto found = made().find(&backend);
  return found == made().end() ? nullptr : found->second;
}

std::unique_ptr<nn::Backend> make_cuda_backend(int gpu, nn::Precision precision) {
  return std::make_unique<CudaBackend>(gpu, precision);
}

void round_to_bf16_on_gpu(int gpu, const float* values, std::uint16_t* bits, std::size_t count) {
  Context context(gpu);
  if (count == 0) return;
  DeviceMemory from(count * sizeof(float)), to(count * sizeof(std::uint16_t));
  MBKIT_CUDA_CHECK(
      cudaMemcpyAsync(from.get(), values, from.bytes(), cudaMemcpyHostToDevice, context.stream));
  to_bf16(to.as<std::uint16_t>(), from.as<float>(), static_cast<std::int64_t>(count),
          context.stream);
  MBKIT_CUDA_CHECK(
      cudaMemcpyAsync(bits, to.get(), to.bytes(), cudaMemcpyDeviceToHost, context.stream));
  context.synchronize();
}

}  // namespace mbkit::backend::cuda
