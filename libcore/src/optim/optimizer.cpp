#include "mbkit/optim/optimizer.hpp"

#include <cmath>
#include <cstdlib>

#include "mbkit/util/check.hpp"

namespace mbkit::optim {

namespace {

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

using Rule = nn::OptimizerUpdate::Rule;

class Sgd final : public Optimizer {
 public:
  Sgd(OptimizerConfig config, std::size_t parameters, nn::Backend& backend)
      : Optimizer(std::move(config), parameters, backend) {}

 protected:
  nn::OptimizerUpdate update(double lr, std::int64_t /*t*/) const override {
    nn::OptimizerUpdate u;
    u.rule = Rule::kSgd;
    u.lr = static_cast<float>(lr);
    u.weight_decay = static_cast<float>(config_.weight_decay);
    return u;
  }
};

class Momentum final : public Optimizer {
 public:
  Momentum(OptimizerConfig config, std::size_t parameters, nn::Backend& backend)
      : Optimizer(std::move(config), parameters, backend) {
    add_state("momentum", 0.0f);
  }

 protected:
  nn::OptimizerUpdate update(double lr, std::int64_t /*t*/) const override {
    nn::OptimizerUpdate u;
    u.rule = config_.nesterov ? Rule::kNesterov : Rule::kMomentum;
    u.lr = static_cast<float>(lr);
    u.weight_decay = static_cast<float>(config_.weight_decay);
    u.momentum = static_cast<float>(config_.momentum);
    return u;
  }
};

class RmsProp final : public Optimizer {
 public:
  // TF1 starts the mean square at one, so the first steps are not divided by a tiny root.
  RmsProp(OptimizerConfig config, std::size_t parameters, nn::Backend& backend)
      : Optimizer(std::move(config), parameters, backend) {
    add_state("ms", 1.0f);
    add_state("mom", 0.0f);
  }

 protected:
  nn::OptimizerUpdate update(double lr, std::int64_t /*t*/) const override {
    nn::OptimizerUpdate u;
    u.rule = Rule::kRmsProp;
    u.lr = static_cast<float>(lr);
    u.weight_decay = static_cast<float>(config_.weight_decay);
    u.beta2 = static_cast<float>(config_.rmsprop_decay);
    u.one_minus_beta2 = static_cast<float>(1.0 - config_.rmsprop_decay);
    u.momentum = static_cast<float>(config_.rmsprop_momentum);
    u.epsilon = static_cast<float>(config_.rmsprop_epsilon);
    return u;
  }
};

class Adam final : public Optimizer {
 public:
  Adam(OptimizerConfig config, std::size_t parameters, nn::Backend& backend)
      : Optimizer(std::move(config), parameters, backend) {
    add_state("m", 0.0f);
    add_state("v", 0.0f);
  }

 protected:
  nn::OptimizerUpdate update(double lr, std::int64_t t) const override {
    // TF1 folds both bias corrections into the step size, computed once in double; epsilon is
    // then added to sqrt(v) itself (the paper's "epsilon hat").
    const double beta1 = config_.adam_beta1;
    const double beta2 = config_.adam_beta2;
    const auto steps = static_cast<double>(t);
    nn::OptimizerUpdate u;
    u.rule = Rule::kAdam;
    u.lr = static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta2, steps)) /
                              (1.0 - std::pow(beta1, steps)));
    u.weight_decay = static_cast<float>(config_.weight_decay);
    u.beta1 = static_cast<float>(beta1);
    u.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    u.beta2 = static_cast<float>(beta2);
    u.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    u.epsilon = static_cast<float>(config_.adam_epsilon);
    return u;
  }
};

}  // namespace

void Optimizer::add_state(std::string name, float initial) {
  auto buffer = backend_.make_buffer(parameters_);
  if (initial != 0.0f) backend_.fill(*buffer, 0, parameters_, initial);
  state_.emplace_back(std::move(name), std::move(buffer));
}

std::vector<std::pair<std::string, nn::Buffer*>> Optimizer::state() {
  std::vector<std::pair<std::string, nn::Buffer*>> slots;
  for (auto& [name, buffer] : state_) slots.emplace_back(name, buffer.get());
  return slots;
}

void Optimizer::step(nn::Buffer& params, const nn::Buffer& grads, double lr, std::size_t offset) {
  MBKIT_CHECK(offset <= params.size() && params.size() - offset >= parameters_,
              "optimizer made for ", parameters_, " parameters got ", params.size(), " from ",
              offset);
  MBKIT_CHECK(offset <= grads.size() && grads.size() - offset >= parameters_, "optimizer made for ",
              parameters_, " parameters got ", grads.size(), " gradients from ", offset);
  run(params.data() + offset, grads.data() + offset, lr);
}

void Optimizer::step(std::span<float> params, std::span<const float> grads, double lr) {
  MBKIT_CHECK(backend_.host_accessible(), "an optimizer step over host memory with the ",
              backend_.description(), " backend: step over its buffers");
  MBKIT_CHECK(params.size() == parameters_, "optimizer made for ", parameters_, " parameters got ",
              params.size());
  MBKIT_CHECK(grads.size() == parameters_, "optimizer made for ", parameters_, " parameters got ",
              grads.size(), " gradients");
  run(params.data(), grads.data(), lr);
}

void Optimizer::run(float* params, const float* grads, double lr) {
  MBKIT_CHECK(std::isfinite(lr), "learning rate ", lr, " is not finite");
  nn::OptimizerUpdate u = update(lr, steps_ + 1);
  u.count = parameters_;
  u.params = params;
  u.grads = grads;
  for (std::size_t i = 0; i < state_.size() && i < u.state.size(); ++i) {
    u.state[i] = state_[i].second->data();
  }
  backend_.optimizer_step(u);
  ++steps_;
}

std::string known_optimizers() {
  return "sgd, momentum, rmsprop, adam";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t parameters,
                                          nn::Backend& backend) {
  if (!(config.weight_decay >= 0.0 && std::isfinite(config.weight_decay))) {
    usage_error(cat("--weight-decay must be non-negative and finite (got ",
                    shortest_decimal(config.weight_decay), ")"));
  }
  // Only the settings the chosen optimizer reads are checked: the tools fill in every field.
  if (config.name == "sgd") return std::make_unique<Sgd>(config, parameters, backend);
  if (config.name == "momentum") {
    require_unit_interval(config.momentum, "--momentum");
    return std::make_unique<Momentum>(config, parameters, backend);
  }
  if (config.name == "rmsprop") {
    require_unit_interval(config.rmsprop_decay, "--rmsprop-decay");
    require_unit_interval(config.rmsprop_momentum, "--momentum");
    require_positive(config.rmsprop_epsilon, "--epsilon");
    return std::make_unique<RmsProp>(config, parameters, backend);
  }
  if (config.name == "adam") {
    require_unit_interval(config.adam_beta1, "--beta1");
    require_unit_interval(config.adam_beta2, "--beta2");
    require_positive(config.adam_epsilon, "--epsilon");
    return std::make_unique<Adam>(config, parameters, backend);
  }
  usage_error(
      cat("--optimizer: unknown optimizer '", config.name, "' (known: ", known_optimizers(), ")"));
}

}  // namespace mbkit::optim
