#include "mbkit/nn/network.hpp"

#include <algorithm>
#include <utility>

#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::nn {

struct Network::Plan {
  int batch = 0;
  std::vector<std::unique_ptr<Tensor>> outputs;    ///< one per node
  std::vector<std::unique_ptr<Tensor>> gradients;  ///< one per node that needs a gradient
  /// For an activation used by several nodes: where the second and later consumers (in
  /// backward order) write their share before it is added in.
  std::vector<std::unique_ptr<Tensor>> shares;
  /// via_share[node][k]: node's k-th input gradient goes through the producer's share.
  std::vector<std::vector<bool>> via_share;
  /// train()'s step graphs at this batch size, by the values they were recorded with (loss
  /// scale, accumulate): AMB's first micro-batch and the ones added to it take turns.
  struct Recording {
    std::unique_ptr<StepGraph> graph;
    int eager_steps = 0;  ///< the first runs the lazy set-up a recording cannot
    bool failed = false;  ///< recording failed: eager from now on
  };
  std::map<std::pair<double, bool>, Recording> recordings;
};

Network::Network(Graph graph, Backend& backend)
    : graph_(std::move(graph)),
      backend_(backend),
      parameter_count_(graph_.parameter_count()),
      parameters_(backend_.make_buffer(parameter_count_)),
      gradients_(backend_.make_buffer(parameter_count_)),
      state_(backend_.make_buffer(graph_.state_count())) {
  const auto& nodes = graph_.nodes();
  for (const Node& node : nodes) {
    if (!backend_.supports(node.op)) {
      usage_error(cat("model ", graph_.model(), ": layer ", node.name, " is a ", op_name(node.op),
                      ", which the backend (", backend_.description(), ") does not run"));
    }
  }
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    kernels_.push_back(backend_.make_kernel(graph_, i));
  }
  // An activation needs a gradient when something before it (or the node itself) has
  // parameters: the input and what is computed from it alone do not.
  needs_gradient_.assign(nodes.size(), false);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    bool needs = !nodes[i].params.empty();
    for (int input : nodes[i].inputs)
      needs = needs || needs_gradient_[static_cast<std::size_t>(input)];
    needs_gradient_[i] = needs && nodes[i].op != Op::kInput;
  }
  // Nodes need not own their parameters in node order (a shared layout is possible), so the
  // final part is bounded by the end of every earlier node's parameters.
  final_from_.assign(nodes.size(), 0);
  std::size_t end_of_earlier = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    final_from_[i] = end_of_earlier;
    for (const auto& spec : nodes[i].params) {
      end_of_earlier =
          std::max(end_of_earlier, spec.offset + static_cast<std::size_t>(spec.size()));
    }
  }
}

Network::~Network() = default;

void Network::initialize(std::uint64_t seed) {
  if (backend_.host_accessible()) {
    graph_.initialize(parameters(), state(), seed);
    return;
  }
  // The initialisers run on the host: drawn there, then copied over once.
  std::vector<float> params(parameter_count_), state_values(state_->size());
  graph_.initialize(params, state_values, seed);
  backend_.copy_from_host(params, *parameters_, 0);
  backend_.copy_from_host(state_values, *state_, 0);
}

std::span<float> Network::host_span(Buffer& buffer, std::size_t size) const {
  MBKIT_CHECK(backend_.host_accessible(), "host memory of a ", backend_.description(),
              " buffer: use the Network's host_parameters()/host_gradients()/host_state()");
  return {buffer.data(), size};
}

std::span<const float> Network::host_span(const Buffer& buffer, std::size_t size) const {
  MBKIT_CHECK(backend_.host_accessible(), "host memory of a ", backend_.description(),
              " buffer: use the Network's host_parameters()/host_gradients()/host_state()");
  return {buffer.data(), size};
}

Network::Plan& Network::plan(int batch) {
  MBKIT_CHECK(batch >= 1, "batch of ", batch, " samples");
  auto found = plans_.find(batch);
  if (found != plans_.end()) return *found->second;

  const auto& nodes = graph_.nodes();
  auto made = std::make_unique<Plan>();
  Plan& plan = *made;
  plan.batch = batch;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    plan.outputs.push_back(backend_.make_tensor(batch, nodes[i].output));
    std::vector<Tensor*> inputs;
    for (int input : nodes[i].inputs)
      inputs.push_back(plan.outputs[static_cast<std::size_t>(input)].get());
    kernels_[i]->prepare(batch, inputs, *plan.outputs[i]);
  }
  plan.gradients.resize(nodes.size());
  plan.shares.resize(nodes.size());
  plan.via_share.resize(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (needs_gradient_[i] && static_cast<int>(i) != graph_.loss()) {
      plan.gradients[i] = backend_.make_tensor_like(*plan.outputs[i]);
    }
  }
  // Backward visits nodes in reverse: the first consumer of an activation writes its gradient,
  // later consumers add theirs through a share.
  std::vector<bool> written(nodes.size(), false);
  for (std::size_t i = nodes.size(); i-- > 0;) {
    for (int input : nodes[i].inputs) {
      const auto producer = static_cast<std::size_t>(input);
      const bool share = needs_gradient_[producer] && written[producer];
      plan.via_share[i].push_back(share);
      if (share && !plan.shares[producer]) {
        plan.shares[producer] = backend_.make_tensor_like(*plan.outputs[producer]);
      }
      written[producer] = written[producer] || needs_gradient_[producer];
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!needs_gradient_[i]) continue;
    std::vector<Tensor*> input_grads;
    for (int input : nodes[i].inputs) {
      const auto producer = static_cast<std::size_t>(input);
      input_grads.push_back(needs_gradient_[producer] ? plan.gradients[producer].get() : nullptr);
    }
    kernels_[i]->prepare_backward(batch, input_grads);
  }
  plans_[batch] = std::move(made);
  return plan;
}

Network::Result Network::forward(const float* images, const std::int32_t* labels, int batch,
                                 bool training, std::uint64_t seed) {
  Plan& current = plan(batch);
  backend_.set_input(*current.outputs[0], images);
  return run_forward(current, labels, training, seed);
}

KernelArgs Network::forward_args(Plan& current, std::size_t i, const std::int32_t* labels,
                                 bool training, std::uint64_t seed) const {
  const Node& node = graph_.nodes()[i];
  KernelArgs args;
  args.batch = current.batch;
  for (int input : node.inputs)
    args.inputs.push_back(current.outputs[static_cast<std::size_t>(input)].get());
  args.output = current.outputs[i].get();
  for (const auto& spec : node.params) args.params.push_back(parameters_->data() + spec.offset);
  for (const auto& spec : node.state) args.state.push_back(state_->data() + spec.offset);
  args.training = training;
  std::uint64_t mixer = seed ^ (0x9e3779b97f4a7c15ULL * (i + 1));
  args.seed = splitmix64(mixer);
  args.labels = labels;
  return args;
}

Network::Result Network::run_forward(Plan& current, const std::int32_t* labels, bool training,
                                     std::uint64_t seed, void (Kernel::*pass)(KernelArgs&)) {
  const auto& nodes = graph_.nodes();
  Result result;
  result.batch = current.batch;
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    KernelArgs args = forward_args(current, i, labels, training, seed);
    ((*kernels_[i]).*pass)(args);
    if (static_cast<int>(i) == graph_.loss()) {
      result.loss_sum = args.loss_sum;
      result.correct = args.correct;
    }
  }
  last_ = &current;
  last_seed_ = seed;
  last_training_ = training;
  last_labels_ = labels;
  return result;
}

void Network::backward(double loss_scale, bool accumulate,
                       const std::function<void(std::size_t)>& gradients_ready) {
  MBKIT_CHECK(last_ != nullptr && last_training_, "backward without a training forward pass");
  MBKIT_CHECK(!(accumulate && gradients_ready),
              "gradients_ready with accumulate: the gradients are final only at the end");
  Plan& current = *last_;
  if (accumulate && !gradient_scratch_) gradient_scratch_ = backend_.make_buffer(parameter_count_);
  float* target = accumulate ? gradient_scratch_->data() : gradients_->data();
  const auto& nodes = graph_.nodes();
  for (std::size_t i = nodes.size(); i-- > 1;) {
    const Node& node = nodes[i];
    if (!needs_gradient_[i]) continue;
    KernelArgs args;
    args.batch = current.batch;
    for (int input : node.inputs)
      args.inputs.push_back(current.outputs[static_cast<std::size_t>(input)].get());
    args.output = current.outputs[i].get();
    args.output_grad = current.gradients[i].get();  // null for the loss
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const auto producer = static_cast<std::size_t>(node.inputs[k]);
      Tensor* grad = nullptr;
      if (needs_gradient_[producer]) {
        grad = current.via_share[i][k] ? current.shares[producer].get()
                                       : current.gradients[producer].get();
      }
      args.input_grads.push_back(grad);
    }
    for (const auto& spec : node.params) {
      args.params.push_back(parameters_->data() + spec.offset);
      args.param_grads.push_back(target + spec.offset);
    }
    for (const auto& spec : node.state) args.state.push_back(state_->data() + spec.offset);
    args.training = true;
    args.labels = last_labels_;
    args.loss_scale = loss_scale;
    kernels_[i]->backward(args);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const auto producer = static_cast<std::size_t>(node.inputs[k]);
      if (needs_gradient_[producer] && current.via_share[i][k]) {
        backend_.accumulate(*current.gradients[producer], *current.shares[producer]);
      }
    }
    if (gradients_ready && !node.params.empty()) gradients_ready(final_from_[i]);
  }
  // Nodes before the first with parameters write none.
  if (gradients_ready) gradients_ready(0);
  if (accumulate) backend_.add(*gradients_, *gradient_scratch_, parameter_count_);
}

std::string Network::step_graphs_unavailable() const {
  if (!backend_.can_capture()) return cat("the ", backend_.description(), " backend records none");
  return {};
}

void Network::set_step_graphs(bool on) {
  if (on) {
    const std::string why_not = step_graphs_unavailable();
    MBKIT_CHECK(why_not.empty(), "step graphs: ", why_not);
  }
  step_graphs_ = on;
  if (!on) {
    for (auto& [size, other] : plans_) other->recordings.clear();
  }
}

Network::Result Network::train(const float* images, const std::int32_t* labels, int batch,
                               std::uint64_t seed, double loss_scale, bool accumulate,
                               const std::function<void(std::size_t)>& gradients_ready) {
  if (!step_graphs_ || gradients_ready) {
    const Result result = forward(images, labels, batch, true, seed);
    backward(loss_scale, accumulate, gradients_ready);
    return result;
  }
  Plan& current = plan(batch);
  Plan::Recording& recording = current.recordings[{loss_scale, accumulate}];
  // The same input memory every step: the recording reads the batch there.
  backend_.set_input_fixed(*current.outputs[0], images);
  Result result;
  if (recording.eager_steps > 0 && !recording.failed &&
      replay_step(current, labels, seed, loss_scale, accumulate, result)) {
    return result;
  }
  result = run_forward(current, labels, true, seed);
  backward(loss_scale, accumulate);
  ++recording.eager_steps;
  return result;
}

bool Network::replay_step(Plan& current, const std::int32_t* labels, std::uint64_t seed,
                          double loss_scale, bool accumulate, Result& result) {
  Plan::Recording& recording = current.recordings[{loss_scale, accumulate}];
  const auto& nodes = graph_.nodes();
  if (recording.graph) {
    // The host's part of the forward pass: what the recording reads from host memory.
    for (std::size_t i = 1; i < nodes.size(); ++i) {
      KernelArgs args = forward_args(current, i, labels, true, seed);
      kernels_[i]->before_replay(args);
    }
  } else {
    // Recording runs the kernels' host side as a forward and backward pass would; the device
    // work is only recorded, so the recording is replayed at once below.
    std::string why_not;
    backend_.begin_capture();
    try {
      run_forward(current, labels, true, seed);
      backward(loss_scale, accumulate);
    } catch (const Error& error) {
      if (error.code() != ExitCode::kFailure) {
        // Bad input (a label out of range), not the recording: said as it is.
        backend_.end_capture(nullptr);
        throw;
      }
      why_not = error.what();
    }
    auto graph = backend_.end_capture(why_not.empty() ? &why_not : nullptr);
    if (!graph || !why_not.empty()) {
      recording.failed = true;
      ++step_graph_counts_.failed;
      if (!warned_) {
        log::warn(cat("CUDA graph of the training step at batch ", current.batch,
                      " failed; running it without one: ", why_not));
        warned_ = true;
      }
      return false;
    }
    recording.graph = std::move(graph);
    ++step_graph_counts_.recorded;
  }
  if (!recording.graph->replay()) {
    // Memory the recordings read has moved (a larger workspace for another batch size): every
    // recording is stale. This step runs eagerly; the next records again.
    for (auto& [size, other] : plans_) {
      for (auto& [values, stale] : other->recordings) stale.graph.reset();
    }
    return false;
  }
  ++step_graph_counts_.replayed;
  backend_.synchronize();
  result = run_forward(current, labels, true, seed, &Kernel::after_replay);
  return true;
}

std::span<float> Network::gradient_tail(std::size_t floats) {
  MBKIT_CHECK(backend_.host_accessible(), "a gradient tail in ", backend_.description(),
              " memory: the tail is for host exchanges");
  if (!gradients_moved_ && gradients_->size() != parameter_count_ + floats) {
    auto longer = backend_.make_buffer(parameter_count_ + floats);
    backend_.copy(*gradients_, 0, *longer, 0, parameter_count_);
    gradients_ = std::move(longer);
  }
  MBKIT_CHECK(gradients_->size() == parameter_count_ + floats, "a tail of ", floats,
              " floats after gradients moved with a tail of ",
              gradients_->size() - parameter_count_);
  backend_.fill(*gradients_, parameter_count_, floats, 0.0f);
  return host_span(*gradients_, gradients_->size()).subspan(parameter_count_);
}

void Network::move_gradients_to(std::span<float> storage) {
  MBKIT_CHECK(storage.size() == gradients_->size(), "gradient storage of ", storage.size(),
              " floats for ", gradients_->size());
  const std::span<const float> current = host_span(*gradients_, gradients_->size());
  std::copy(current.begin(), current.end(), storage.begin());
  gradients_ = std::make_unique<HostBuffer>(storage);
  gradients_moved_ = true;
}

std::vector<float> Network::probabilities() const {
  return activation(graph_.loss());
}

std::vector<float> Network::activation(int node) const {
  MBKIT_CHECK(last_ != nullptr, "no forward pass yet");
  const Tensor& tensor = *last_->outputs.at(static_cast<std::size_t>(node));
  std::vector<float> values(static_cast<std::size_t>(tensor.batch() * tensor.dims().size()));
  backend_.read(tensor, values.data());
  return values;
}

}  // namespace mbkit::nn
