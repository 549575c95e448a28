#include "mbkit/optim/optimizer.hpp"

#include <cmath>
#include <cstdlib>

#include "mbkit/util/check.hpp"

namespace mbkit::optim {

namespace {

// Buffers at least this long are updated by all OpenMP threads; for shorter ones starting the
// team costs more than the update. Either way every element is computed the same way, so the
// result does not depend on the thread count.
constexpr std::size_t kParallelThreshold = std::size_t{1} << 14;

void require_unit_interval(double value, const char* flag) {
  if (!(value >= 0.0 && value < 1.0)) {
    usage_error(cat(flag, " ", shortest_decimal(value), " is not in [0, 1)"));
  }
}

void require_positive(double value, const char* flag) {
  if (!(value > 0.0 && std::isfinite(value))) {
    usage_error(cat(flag, " must be positive and finite (got ", shortest_decimal(value), ")"));
  }
}

/// Holds the buffer size and checks every buffer an update touches against it.
class FlatOptimizer : public Optimizer {
 protected:
  FlatOptimizer(OptimizerConfig config, std::size_t parameters)
      : Optimizer(std::move(config)), parameters_(parameters) {}

  void check_step(std::span<float> params, std::span<const float> grads, double lr) {
    MBKIT_CHECK(params.size() == parameters_, "optimizer made for ", parameters_,
                " parameters got ", params.size());
    MBKIT_CHECK(grads.size() == parameters_, "optimizer made for ", parameters_, " parameters got ",
                grads.size(), " gradients");
    MBKIT_CHECK(std::isfinite(lr), "learning rate ", lr, " is not finite");
    for (const auto& [name, values] : state()) {
      MBKIT_CHECK(values->size() == parameters_, "optimizer state '", name, "' holds ",
                  values->size(), " values for ", parameters_, " parameters");
    }
  }

  bool parallel() const { return parameters_ >= kParallelThreshold; }

  std::size_t parameters_;
};

class Sgd final : public FlatOptimizer {
 public:
  Sgd(OptimizerConfig config, std::size_t parameters)
      : FlatOptimizer(std::move(config), parameters) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_step(params, grads, lr);
    float* p = params.data();
    const float* g = grads.data();
    const float rate = static_cast<float>(lr);
    const float decay = static_cast<float>(config_.weight_decay);
    if (decay == 0.0f) {
      update<false>(p, g, rate, decay);
    } else {
      update<true>(p, g, rate, decay);
    }
    ++steps_;
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override { return {}; }

 private:
  // kDecay = false leaves out `decay * p` (see Momentum::update).
  template <bool kDecay>
  void update(float* p, const float* g, float rate, float decay) const {
    const std::size_t n = parameters_;
#pragma omp parallel for simd if (parallel())
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = kDecay ? g[i] + decay * p[i] : g[i];
      p[i] = p[i] - rate * grad;
    }
  }
};

class Momentum final : public FlatOptimizer {
 public:
  Momentum(OptimizerConfig config, std::size_t parameters)
      : FlatOptimizer(std::move(config), parameters), accumulator_(parameters, 0.0f) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_step(params, grads, lr);
    float* p = params.data();
    const float* g = grads.data();
    float* a = accumulator_.data();
    const float rate = static_cast<float>(lr);
    const float decay = static_cast<float>(config_.weight_decay);
    const float m = static_cast<float>(config_.momentum);
    if (decay == 0.0f) {
      update<false>(p, g, a, rate, decay, m);
    } else {
      update<true>(p, g, a, rate, decay, m);
    }
    ++steps_;
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    return {{"momentum", &accumulator_}};
  }

 private:
  // kDecay = false leaves out `decay * p`: with decay 0 it adds nothing to a finite p's
  // gradient, and the update, bound by memory and instructions alike, is faster without it.
  template <bool kDecay>
  void update(float* p, const float* g, float* a, float rate, float decay, float m) {
    const std::size_t n = parameters_;
    if (config_.nesterov) {
#pragma omp parallel for simd if (parallel())
      for (std::size_t i = 0; i < n; ++i) {
        const float grad = kDecay ? g[i] + decay * p[i] : g[i];
        a[i] = m * a[i] + grad;
        p[i] = p[i] - rate * (grad + m * a[i]);
      }
    } else {
#pragma omp parallel for simd if (parallel())
      for (std::size_t i = 0; i < n; ++i) {
        const float grad = kDecay ? g[i] + decay * p[i] : g[i];
        a[i] = m * a[i] + grad;
        p[i] = p[i] - rate * a[i];
      }
    }
  }

  std::vector<float> accumulator_;
};

class RmsProp final : public FlatOptimizer {
 public:
  // TF1 starts the mean square at one, so the first steps are not divided by a tiny root.
  RmsProp(OptimizerConfig config, std::size_t parameters)
      : FlatOptimizer(std::move(config), parameters),
        mean_square_(parameters, 1.0f),
        moment_(parameters, 0.0f) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_step(params, grads, lr);
    float* p = params.data();
    const float* g = grads.data();
    float* ms = mean_square_.data();
    float* mom = moment_.data();
    const float rate = static_cast<float>(lr);
    const float weight_decay = static_cast<float>(config_.weight_decay);
    const float decay = static_cast<float>(config_.rmsprop_decay);
    const float one_minus_decay = static_cast<float>(1.0 - config_.rmsprop_decay);
    const float mu = static_cast<float>(config_.rmsprop_momentum);
    const float epsilon = static_cast<float>(config_.rmsprop_epsilon);
    const std::size_t n = parameters_;
#pragma omp parallel for simd if (parallel())
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = g[i] + weight_decay * p[i];
      ms[i] = decay * ms[i] + one_minus_decay * (grad * grad);
      mom[i] = mu * mom[i] + rate * grad / std::sqrt(ms[i] + epsilon);
      p[i] = p[i] - mom[i];
    }
    ++steps_;
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    return {{"ms", &mean_square_}, {"mom", &moment_}};
  }

 private:
  std::vector<float> mean_square_;
  std::vector<float> moment_;
};

class Adam final : public FlatOptimizer {
 public:
  Adam(OptimizerConfig config, std::size_t parameters)
      : FlatOptimizer(std::move(config), parameters),
        first_moment_(parameters, 0.0f),
        second_moment_(parameters, 0.0f) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_step(params, grads, lr);
    ++steps_;
    // TF1 folds both bias corrections into the step size, computed once in double; epsilon is
    // then added to sqrt(v) itself (the paper's "epsilon hat").
    const double beta1 = config_.adam_beta1;
    const double beta2 = config_.adam_beta2;
    const auto t = static_cast<double>(steps_);
    const float corrected_rate =
        static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t)));
    float* p = params.data();
    const float* g = grads.data();
    float* m = first_moment_.data();
    float* v = second_moment_.data();
    const float weight_decay = static_cast<float>(config_.weight_decay);
    const float b1 = static_cast<float>(beta1);
    const float one_minus_b1 = static_cast<float>(1.0 - beta1);
    const float b2 = static_cast<float>(beta2);
    const float one_minus_b2 = static_cast<float>(1.0 - beta2);
    const float epsilon = static_cast<float>(config_.adam_epsilon);
    const std::size_t n = parameters_;
#pragma omp parallel for simd if (parallel())
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = g[i] + weight_decay * p[i];
      m[i] = b1 * m[i] + one_minus_b1 * grad;
      v[i] = b2 * v[i] + one_minus_b2 * (grad * grad);
      p[i] = p[i] - corrected_rate * m[i] / (std::sqrt(v[i]) + epsilon);
    }
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    return {{"m", &first_moment_}, {"v", &second_moment_}};
  }

 private:
  std::vector<float> first_moment_;
  std::vector<float> second_moment_;
};

}  // namespace

std::string known_optimizers() {
  return "sgd, momentum, rmsprop, adam";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t parameters) {
  if (!(config.weight_decay >= 0.0 && std::isfinite(config.weight_decay))) {
    usage_error(cat("--weight-decay must be non-negative and finite (got ",
                    shortest_decimal(config.weight_decay), ")"));
  }
  // Only the settings the chosen optimizer reads are checked: the tools fill in every field.
  if (config.name == "sgd") return std::make_unique<Sgd>(config, parameters);
  if (config.name == "momentum") {
    require_unit_interval(config.momentum, "--momentum");
    return std::make_unique<Momentum>(config, parameters);
  }
  if (config.name == "rmsprop") {
    require_unit_interval(config.rmsprop_decay, "--rmsprop-decay");
    require_unit_interval(config.rmsprop_momentum, "--momentum");
    require_positive(config.rmsprop_epsilon, "--epsilon");
    return std::make_unique<RmsProp>(config, parameters);
  }
  if (config.name == "adam") {
    require_unit_interval(config.adam_beta1, "--beta1");
    require_unit_interval(config.adam_beta2, "--beta2");
    require_positive(config.adam_epsilon, "--epsilon");
    return std::make_unique<Adam>(config, parameters);
  }
  usage_error(
      cat("--optimizer: unknown optimizer '", config.name, "' (known: ", known_optimizers(), ")"));
}

}  // namespace mbkit::optim
