// Optimizers over the flat parameter and gradient buffers (one contiguous float array each),
// with TensorFlow 1 default semantics, as the AMB original used them (tf.train.*Optimizer):
//
//   sgd       p -= lr g
//   momentum  a = m a + g;  p -= lr a            (nesterov: p -= lr (g + m a))
//   rmsprop   ms = d ms + (1 - d) g^2;  mom = mu mom + lr g / sqrt(ms + eps);  p -= mom
//             (ms starts at 1, eps inside the root: TF1's RMSPropOptimizer)
//   adam      t += 1;  lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)
//             m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr_t m / (sqrt(v) + eps)
//
// L2 weight decay adds wd * p to every gradient first (the gradient of wd/2 |p|^2), once per
// update. The state arrays are Buffers of the backend the optimizer was made for, and the
// update is that backend's operation (Backend::optimizer_step: OpenMP loops on the CPU, one
// fused kernel on a GPU); the optimizer computes its scalars (Adam's corrected rate) once.
//
//   auto optimizer = make_optimizer(config, net.parameter_count(), net.backend());
//   optimizer->step(net.parameter_buffer(), net.gradient_buffer(), lr);     // backend memory
//   optimizer->step(host_params, host_grads, lr);   // host spans: host-accessible backends
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/nn/backend.hpp"

namespace mbkit::optim {

struct OptimizerConfig {
  std::string name = "sgd";  ///< sgd, momentum, rmsprop, adam
  double weight_decay = 0.0;
  double momentum = 0.9;  ///< the momentum optimizer's m (rmsprop's mu is rmsprop_momentum)
  bool nesterov = false;
  double rmsprop_decay = 0.9;
  double rmsprop_momentum = 0.0;  ///< mu (TF1's default is 0)
  double rmsprop_epsilon = 1e-10;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
};

/// The optimizer names, for messages: "sgd, momentum, rmsprop, adam".
std::string known_optimizers();

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  const OptimizerConfig& config() const { return config_; }
  nn::Backend& backend() const { return backend_; }
  /// The parameters it updates (a server's shard may be part of a network's).
  std::size_t size() const { return parameters_; }

  /// One update of params[offset, offset + size()) from grads[offset, offset + size()), in the
  /// memory of the backend the optimizer was made for (gradient buffers may have a tail).
  void step(nn::Buffer& params, const nn::Buffer& grads, double lr, std::size_t offset = 0);
  /// The same over host memory (size() floats each): a host-accessible backend only.
  void step(std::span<float> params, std::span<const float> grads, double lr);

  /// Named state buffers (size() floats each, backend memory), for checkpoints: copying them
  /// out and back (Backend::copy_to_host / copy_from_host) with the step count continues bit
  /// for bit.
  std::vector<std::pair<std::string, nn::Buffer*>> state();
  /// Updates done so far (Adam's t).
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }

 protected:
  Optimizer(OptimizerConfig config, std::size_t parameters, nn::Backend& backend)
      : config_(std::move(config)), parameters_(parameters), backend_(backend) {}
  /// A state buffer of size() floats, each `initial`.
  void add_state(std::string name, float initial);
  /// The rule and its scalars for update number `t` (1 for the first) at `lr`; the caller fills
  /// in the pointers and the count.
  virtual nn::OptimizerUpdate update(double lr, std::int64_t t) const = 0;

  OptimizerConfig config_;

 private:
  void run(float* params, const float* grads, double lr);

  std::size_t parameters_;
  nn::Backend& backend_;
  std::vector<std::pair<std::string, std::unique_ptr<nn::Buffer>>> state_;
  std::int64_t steps_ = 0;
};

/// Throws a usage error naming the known optimizers for an unknown name, or for out-of-range
/// hyperparameters (negative weight decay, momentum outside [0, 1), ...).
/// `parameters` floats, state in `backend`'s memory (kept by reference: it must outlive the
/// optimizer).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t parameters,
                                          nn::Backend& backend);

}  // namespace mbkit::optim
