#include <omp.h>

#include <algorithm>
#include <set>
#include <utility>

#include "cpu_internal.hpp"
#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/kernel_table.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::backend::cpu {
namespace {

std::string isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "AVX-512 + AMX";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX-512 bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX-512 VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX-512";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2 VNNI";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::sse41:
      return "SSE4.1";
    default:
      return "generic";
  }
}

}  // namespace

void CpuTensor::allocate(const memory::desc& desc, const Context& context) {
  desc_ = desc;
  memory_ = memory(desc, context.engine);  // oneDNN allocates, aligned
}

void CpuTensor::alias(const memory::desc& desc, const Context& context, void* handle) {
  desc_ = desc;
  memory_ = memory(desc, context.engine, handle);
}

CpuTensor& cpu(nn::Tensor& tensor) {
  return static_cast<CpuTensor&>(tensor);
}
const CpuTensor& cpu(const nn::Tensor& tensor) {
  return static_cast<const CpuTensor&>(tensor);
}

memory::desc plain_like(const memory::desc& desc) {
  const auto dims = desc.dims();
  return memory::desc(dims, memory::data_type::f32,
                      dims.size() == 2 ? memory::format_tag::ab : memory::format_tag::abcd);
}

memory::desc plain_desc(int batch, nn::Dims dims, bool flat2d) {
  if (flat2d) {
    return memory::desc({batch, static_cast<memory::dim>(dims.size())}, memory::data_type::f32,
                        memory::format_tag::ab);
  }
  return memory::desc({batch, dims.c, dims.h, dims.w}, memory::data_type::f32,
                      memory::format_tag::abcd);
}

memory::desc param_desc(const std::vector<std::int64_t>& shape) {
  memory::dims dims(shape.begin(), shape.end());
  static const memory::format_tag kTags[] = {memory::format_tag::undef, memory::format_tag::a,
                                             memory::format_tag::ab, memory::format_tag::abc,
                                             memory::format_tag::abcd};
  MBKIT_CHECK(!dims.empty() && dims.size() <= 4, "parameter of rank ", dims.size());
  return memory::desc(dims, memory::data_type::f32, kTags[dims.size()]);
}

bool is_reference(const dnnl::primitive_desc_base& pd) {
  return is_reference_impl(pd.impl_info_str());
}

void Context::record(std::string_view primitive, const dnnl::primitive_desc_base& pd) {
  if (layer == nullptr) return;  // the backend's own copies (read, write)
  PrimitiveImpl impl{layer->name, std::string(primitive), batch, pd.impl_info_str(), false};
  impl.reference = is_reference_impl(impl.impl);
  if (impl.reference) {
    // Once per layer and primitive, whatever the number of batch sizes.
    const bool first = std::none_of(built.begin(), built.end(), [&](const PrimitiveImpl& other) {
      return other.reference && other.layer == impl.layer && other.primitive == impl.primitive;
    });
    if (first) {
      log::warn(cat("layer ", impl.layer, ": oneDNN has only its reference implementation (",
                    impl.impl, ") of ", impl.primitive, " for this shape on this CPU (", isa_name(),
                    "); it is slow"));
    }
  }
  built.push_back(std::move(impl));
}

Reorder::Reorder(Context& context, const memory::desc& from, const memory::desc& to) {
  const dnnl::reorder::primitive_desc pd(context.engine, from, context.engine, to);
  context.record("reorder", pd);
  primitive_ = dnnl::reorder(pd);
}

void Reorder::run(const Context& context, const memory& from, const memory& to) const {
  primitive_.execute(context.stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

void CpuKernel::execute(const dnnl::primitive& primitive,
                        const std::unordered_map<int, memory>& args) {
  primitive.execute(context_.stream, args);
}

namespace {

[[noreturn]] void rethrow(const nn::Node& node, const char* phase, const dnnl::error& error) {
  fail(cat("layer ", node.name, " (", nn::op_name(node.op), ") ", phase, ": oneDNN: ", error.what(),
           " (status ", static_cast<int>(error.status), ")"));
}

/// Makes `node` the context's current layer (see Context::layer) while it lives.
class CurrentLayer {
 public:
  CurrentLayer(Context& context, const nn::Node& node, int batch) : context_(context) {
    context.layer = &node;
    context.batch = batch;
  }
  ~CurrentLayer() { context_.layer = nullptr; }
  CurrentLayer(const CurrentLayer&) = delete;
  CurrentLayer& operator=(const CurrentLayer&) = delete;

 private:
  Context& context_;
};

}  // namespace

void CpuKernel::prepare(int batch, std::span<nn::Tensor* const> inputs, nn::Tensor& output) {
  const CurrentLayer current(context_, node_, batch);
  try {
    do_prepare(batch, inputs, cpu(output));
  } catch (const dnnl::error& error) {
    rethrow(node_, "setup", error);
  }
}

void CpuKernel::prepare_backward(int batch, std::span<nn::Tensor* const> input_grads) {
  const CurrentLayer current(context_, node_, batch);
  try {
    do_prepare_backward(batch, input_grads);
  } catch (const dnnl::error& error) {
    rethrow(node_, "setup", error);
  }
}

void CpuKernel::forward(nn::KernelArgs& args) {
  const CurrentLayer current(context_, node_, args.batch);
  try {
    do_forward(args);
  } catch (const dnnl::error& error) {
    rethrow(node_, "forward", error);
  }
}

void CpuKernel::backward(nn::KernelArgs& args) {
  const CurrentLayer current(context_, node_, args.batch);
  try {
    do_backward(args);
  } catch (const dnnl::error& error) {
    rethrow(node_, "backward", error);
  }
}

namespace {

void check_range(const nn::Buffer& buffer, std::size_t offset, std::size_t count) {
  MBKIT_CHECK(offset <= buffer.size() && count <= buffer.size() - offset, count, " floats at ",
              offset, " in a buffer of ", buffer.size());
}

/// The CPU backend has a kernel for every op.
constexpr nn::KernelTable<Context> kKernels{
    .input = make_input_kernel,
    .dense = make_dense_kernel,
    .conv = make_conv_kernel,
    .pool = make_pool_kernel,
    .batch_norm = make_batch_norm_kernel,
    .activation = make_eltwise_kernel,
    .dropout = make_dropout_kernel,
    .flatten = make_flatten_kernel,
    .add = make_add_kernel,
    .loss = make_loss_kernel,
    .concat = make_concat_kernel,
    .lrn = make_lrn_kernel,
};

/// Whether node `index` is a relu its input's kernel can compute (a batch norm's, an add's): that
/// is the node just before it (nothing runs between them) and the relu its only reader.
bool relu_after_fusable(const nn::Graph& graph, int index) {
  const nn::Node& node = graph.node(index);
  if (node.op != nn::Op::kRelu || node.inputs.size() != 1 || node.inputs[0] != index - 1) {
    return false;
  }
  const nn::Op producer = graph.node(index - 1).op;
  if (producer != nn::Op::kBatchNorm && producer != nn::Op::kAdd) return false;
  int readers = 0;
  for (const nn::Node& other : graph.nodes()) {
    readers += static_cast<int>(std::count(other.inputs.begin(), other.inputs.end(), index - 1));
  }
  return readers == 1;
}

class CpuBackend final : public nn::Backend {
 public:
  CpuBackend(int threads, bool fuse_layers) : fuse_layers_(fuse_layers) {
    if (threads > 0) omp_set_num_threads(threads);
    threads_ = omp_get_max_threads();
  }

  std::string description() const override {
    const dnnl_version_t* version = dnnl_version();
    return strprintf("cpu: oneDNN %d.%d.%d (%s), %d thread%s", version->major, version->minor,
                     version->patch, isa_name().c_str(), threads_, threads_ == 1 ? "" : "s");
  }

  int threads() const override { return threads_; }
  void use_from_this_thread() override { omp_set_num_threads(threads_); }

  bool supports(nn::Op op) const override { return kKernels.supports(op); }

  const std::vector<PrimitiveImpl>& built() const { return context_.built; }

  std::unique_ptr<nn::Kernel> make_kernel(const nn::Graph& graph, int index) override {
    // A Network makes its kernels in node order, so the previous one is the relu's input's.
    const bool fused = fuse_layers_ && previous_.graph == &graph && previous_.index == index - 1 &&
                       relu_after_fusable(graph, index);
    auto kernel = fused ? make_relu_in(context_, graph.node(index), *previous_.kernel)
                        : kKernels.make(context_, graph.node(index), "cpu");
    previous_ = {&graph, index, kernel.get()};
    return kernel;
  }

  std::unique_ptr<nn::Tensor> make_tensor(int batch, nn::Dims dims) override {
    return std::make_unique<CpuTensor>(batch, dims);
  }

  std::unique_ptr<nn::Tensor> make_tensor_like(const nn::Tensor& like) override {
    auto tensor = std::make_unique<CpuTensor>(like.batch(), like.dims());
    tensor->allocate(cpu(like).desc(), context_);
    return tensor;
  }

  void set_input(nn::Tensor& input, const float* images) override {
    cpu(input).set_handle(const_cast<float*>(images));  // read-only use
  }

  void read(const nn::Tensor& tensor, float* host) const override {
    const CpuTensor& source = cpu(tensor);
    source.refresh();
    const memory::desc plain = plain_like(source.desc());
    memory destination(plain, context_.engine, host);
    Reorder(context_, source.desc(), plain).run(context_, source.mem(), destination);
    context_.stream.wait();
  }

  void write(nn::Tensor& tensor, const float* host) override {
    CpuTensor& destination = cpu(tensor);
    const memory::desc plain = plain_like(destination.desc());
    memory source(plain, context_.engine, const_cast<float*>(host));
    Reorder(context_, plain, destination.desc()).run(context_, source, destination.mem());
    context_.stream.wait();
  }

  void accumulate(nn::Tensor& destination, const nn::Tensor& source) override {
    CpuTensor& to = cpu(destination);
    const CpuTensor& from = cpu(source);
    MBKIT_CHECK(to.desc() == from.desc(), "accumulate: layouts differ");
    float* out = to.data();
    const float* in = from.data();
    const auto count = static_cast<std::ptrdiff_t>(to.floats());
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) out[i] += in[i];
  }

  std::unique_ptr<nn::Buffer> make_buffer(std::size_t floats) override {
    return std::make_unique<nn::HostBuffer>(floats);
  }

  bool host_accessible() const override {
    return true;
  }

  void copy(const nn::Buffer& source, std::size_t from, nn::Buffer& destination, std::size_t to,
            std::size_t count) override {
    check_range(source, from, count);
    check_range(destination, to, count);
    copy_floats(source.data() + from, destination.data() + to, count);
  }

  void fill(nn::Buffer& buffer, std::size_t offset, std::size_t count, float value) override {
    check_range(buffer, offset, count);
    std::fill_n(buffer.data() + offset, count, value);
  }

  void add(nn::Buffer& destination, const nn::Buffer& source, std::size_t count) override {
    check_range(source, 0, count);
    check_range(destination, 0, count);
    add_floats(destination.data(), source.data(), count);
  }

  void optimizer_step(const nn::OptimizerUpdate& update) override {
    cpu::optimizer_step(update);
  }

 protected:
  void read_buffer(const nn::Buffer& source, std::size_t offset, std::span<float> host) override {
    copy_floats(source.data() + offset, host.data(), host.size());
  }

  void write_buffer(std::span<const float> host, nn::Buffer& destination,
                    std::size_t offset) override {
    copy_floats(host.data(), destination.data() + offset, host.size());
  }

 private:
  mutable Context context_;
  int threads_ = 1;
  bool fuse_layers_ = true;
  /// The kernel make_kernel made last, and for which node of which graph.
  struct Made {
    const nn::Graph* graph = nullptr;
    int index = -1;
    nn::Kernel* kernel = nullptr;
  } previous_;
};

}  // namespace
}  // namespace mbkit::backend::cpu

namespace mbkit::backend {

std::unique_ptr<nn::Backend> make_cpu_backend(int threads, bool fuse_layers) {
  return std::make_unique<cpu::CpuBackend>(threads, fuse_layers);
}

bool is_reference_impl(std::string_view impl) {
  // "ref:any", "ref_fused:any", and the per-primitive ones: "bnorm_ref:any", "lrn_ref:any".
  const std::string_view name = impl.substr(0, impl.find(':'));
  return name.starts_with("ref") || name.ends_with("_ref");
}

std::vector<PrimitiveImpl> implementations(const nn::Backend& backend) {
  const auto* cpu_backend = dynamic_cast<const cpu::CpuBackend*>(&backend);
  MBKIT_CHECK(cpu_backend != nullptr, "implementations() of a backend that is not the CPU one");
  return cpu_backend->built();
}

}  // namespace mbkit::backend
