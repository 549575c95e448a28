// A graph running on a backend: the flat parameter, gradient and state buffers (backend
// Buffers: device memory on a GPU), one kernel per node, and per batch size the activations and
// gradients the kernels work on.
//
//   Network net(graph, backend);
//   net.initialize(seed);
//   auto result = net.forward(images, labels, batch, /*training=*/true, step_seed);
//   net.backward(1.0 / batch);             // gradients of the mean loss
//   optimizer.step(net.parameter_buffer(), net.gradient_buffer(), lr);  // in backend memory
//   auto params = net.host_parameters();   // host access: a view (CPU) or a counted copy (GPU)
//
// Buffers (floats):  parameters [P]   gradients [P | tail]   state [S]
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/graph.hpp"

namespace mbkit::nn {

class Network {
 public:
  Network(Graph graph, Backend& backend);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const Graph& graph() const { return graph_; }
  Backend& backend() { return backend_; }

  // The flat buffers, in backend memory (device memory on a GPU): for backend operations
  // (the optimizer step) and kernels. gradient_buffer() holds the gradients and the tail.
  Buffer& parameter_buffer() { return *parameters_; }
  Buffer& gradient_buffer() { return *gradients_; }
  Buffer& state_buffer() { return *state_; }
  std::size_t parameter_count() const { return parameter_count_; }
  std::size_t state_count() const { return state_->size(); }

  // Host access by name: a view of the buffer on a host-accessible backend (no copy), a counted
  // staged copy on a device backend (HostView::write_back() copies changes back).
  HostView host_parameters() { return {backend_, *parameters_, 0, parameter_count_}; }
  HostView host_gradients() { return {backend_, *gradients_, 0, parameter_count_}; }
  HostView host_state() { return {backend_, *state_, 0, state_->size()}; }

  // The buffers as host memory, where the backend's memory is the host's (the CPU): today's
  // callers, zero-copy. On a device backend these refuse (use the buffers or HostViews).
  std::span<float> parameters() { return host_span(*parameters_, parameter_count_); }
  std::span<const float> parameters() const { return host_span(*parameters_, parameter_count_); }
  std::span<float> gradients() { return host_span(*gradients_, parameter_count_); }
  std::span<const float> gradients() const { return host_span(*gradients_, parameter_count_); }
  std::span<float> state() { return host_span(*state_, state_->size()); }
  std::span<const float> state() const { return host_span(*state_, state_->size()); }

  /// `floats` spare floats right after the gradients, in the same buffer: a distributed
  /// exchange sends gradients and its small per-step values as one message. The gradients
  /// keep their values; the tail is zeroed. Earlier spans of gradients() become invalid.
  /// After move_gradients_to(), `floats` must be the tail's size (the tail is then zeroed).
  /// Host memory: a host-accessible backend only.
  std::span<float> gradient_tail(std::size_t floats);
  /// Gradients and tail move into `storage` (the caller keeps it alive for the network's
  /// life): the backward pass then writes where a shared-memory exchange reads. `storage` has
  /// room for exactly the gradients and the tail; the values are copied. Host-accessible
  /// backends only (a shared-memory window is host memory).
  void move_gradients_to(std::span<float> storage);

  /// Initialises parameters and state from the graph's initialisers and a seed.
  void initialize(std::uint64_t seed);

  struct Result {
    double loss_sum = 0;       ///< sum over the batch of the per-sample losses
    std::int64_t correct = 0;  ///< samples whose top-1 class is the label
    int batch = 0;
  };

  /// Forward pass on `batch` images (N, C, H, W, normalised, host memory) and their labels.
  /// In training mode batch norm uses (and updates) batch statistics and dropout drops units
  /// with masks drawn from `seed`.
  Result forward(const float* images, const std::int32_t* labels, int batch, bool training,
                 std::uint64_t seed = 0);
  /// Backward pass of the last forward: the gradients of loss_scale * (sum of per-sample
  /// losses) (1 / batch for the mean, 1 for the sum). `accumulate` adds them to the gradient
  /// buffer instead of overwriting it (micro-batches summed into one gradient).
  /// `gradients_ready(from)`, when given (not with `accumulate`), is called as the pass goes
  /// back through the layers: gradients()[from, end) are then final, and `from` only falls
  /// (to 0 at the last call). A distributed exchange starts summing them meanwhile.
  void backward(double loss_scale, bool accumulate = false,
                const std::function<void(std::size_t)>& gradients_ready = {});

  /// One training step of `batch` samples: forward(training) then backward(loss_scale,
  /// accumulate, gradients_ready), the same values. With step graphs on (set_step_graphs), the
  /// first step at a batch size (with this loss_scale and accumulate) runs as those do; the
  /// second records both passes (Backend::begin_capture) and runs the recording; later ones
  /// replay it, one launch a step. A recording that fails is said once (a warning) and that batch
  /// size runs as before. With gradients_ready nothing is recorded (the exchange runs on the
  /// host during the pass).
  Result train(const float* images, const std::int32_t* labels, int batch, std::uint64_t seed,
               double loss_scale, bool accumulate = false,
               const std::function<void(std::size_t)>& gradients_ready = {});
  /// Step graphs on or off (off at first). On needs a backend that can_capture():
  /// step_graphs_unavailable() says why not.
  void set_step_graphs(bool on);
  bool step_graphs() const { return step_graphs_; }
  /// Why step graphs cannot run this graph on this backend; empty when they can.
  std::string step_graphs_unavailable() const;
  struct StepGraphCounts {
    int recorded = 0;  ///< recordings made (one per batch size, more when memory moved)
    int failed = 0;    ///< recordings that failed (those batch sizes then run eagerly)
    std::int64_t replayed = 0;
  };
  StepGraphCounts step_graph_counts() const { return step_graph_counts_; }

  /// Builds every kernel for `batch` samples (oneDNN primitives, layouts, activation memory)
  /// without running anything: what the first forward pass at that size would do. Lets a caller
  /// see what the backend picked (tests check no reference kernel is chosen) at no compute cost.
  void prepare(int batch) { plan(batch); }

  /// Class probabilities of the last forward pass (batch x classes, host memory).
  std::vector<float> probabilities() const;
  /// The output of any node after the last forward pass, (N, C, H, W) in host memory.
  std::vector<float> activation(int node) const;

 private:
  struct Plan;
  Plan& plan(int batch);
  /// The forward pass through every kernel's `pass`: forward itself, or after_replay (the host's
  /// part after a recorded step ran); the loss node's totals, and the pass backward() follows.
  Result run_forward(Plan& current, const std::int32_t* labels, bool training, std::uint64_t seed,
                     void (Kernel::*pass)(KernelArgs&) = &Kernel::forward);
  KernelArgs forward_args(Plan& current, std::size_t node, const std::int32_t* labels,
                          bool training, std::uint64_t seed) const;
  /// train()'s recorded step: records it when none is there, then replays it; false when it
  /// could not (the step has not run).
  bool replay_step(Plan& current, const std::int32_t* labels, std::uint64_t seed, double loss_scale,
                   bool accumulate, Result& result);

  Graph graph_;
  Backend& backend_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::size_t parameter_count_ = 0;
  std::span<float> host_span(Buffer& buffer, std::size_t size) const;
  std::span<const float> host_span(const Buffer& buffer, std::size_t size) const;

  /// gradients_: the gradients and the tail, in a backend buffer or the storage they were moved
  /// to; gradient_scratch_: micro-batch gradients before they are added in.
  std::unique_ptr<Buffer> parameters_, gradients_, state_, gradient_scratch_;
  bool gradients_moved_ = false;
  std::vector<bool> needs_gradient_;
  /// Per node: where the gradients still to be written start once the backward pass has done
  /// this node and all after it (the end of the parameters of the nodes before it).
  std::vector<std::size_t> final_from_;
  std::map<int, std::unique_ptr<Plan>> plans_;
  Plan* last_ = nullptr;  ///< plan of the last forward pass
  std::uint64_t last_seed_ = 0;
  bool last_training_ = false;
  const std::int32_t* last_labels_ = nullptr;
  bool step_graphs_ = false;
  bool warned_ = false;  ///< a failed recording has been said
  StepGraphCounts step_graph_counts_;
};

}  // namespace mbkit::nn
