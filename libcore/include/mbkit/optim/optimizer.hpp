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
// update. The update is elementwise and parallel over the buffer (OpenMP).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

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

  /// One update of `params` from `grads` (same size as the optimizer was made for).
  virtual void step(std::span<float> params, std::span<const float> grads, double lr) = 0;

  /// Named state arrays (each the size of the parameter buffer), for checkpoints; restoring
  /// them and the step count continues bit for bit.
  virtual std::vector<std::pair<std::string, std::vector<float>*>> state() = 0;
  /// Updates done so far (Adam's t).
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
};

/// Throws a usage error naming the known optimizers for an unknown name, or for out-of-range
/// hyperparameters (negative weight decay, momentum outside [0, 1), ...).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t parameters);

}  // namespace mbkit::optim
