// Optimizers: one step of each worked out by hand, five steps against reference values
// (golden/optimizers.h5: PyTorch's SGD and the TF1 RMSProp and Adam formulas), checkpoint
// state that continues bit for bit, the threaded path against the serial one, and the messages
// of bad settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::optim {
namespace {

// The optimizers' arithmetic runs in a backend: the CPU one here (test_optimizer_backends.cpp
// holds every backend to its bits).
nn::Backend& cpu() {
  static const auto backend = backend::make_cpu_backend(0);
  return *backend;
}

OptimizerConfig config_for(const std::string& name) {
  OptimizerConfig config;
  config.name = name;
  return config;
}

std::vector<float> random_values(std::size_t count, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (auto& value : values) value = static_cast<float>(rng.normal(0.0, scale));
  return values;
}

std::map<std::string, std::vector<float>> state_of(Optimizer& optimizer) {
  std::map<std::string, std::vector<float>> copy;
  for (const auto& [name, values] : optimizer.state()) {
    copy[name].resize(values->size());
    optimizer.backend().copy_to_host(*values, 0, copy[name]);
  }
  return copy;
}

// ---------------------------------------------------------------------------------------------
// One step by hand.

TEST(Sgd, StepsAgainstTheGradient) {
  auto sgd = make_optimizer(config_for("sgd"), 2, cpu());
  std::vector<float> params{1.0f, -2.0f};
  const std::vector<float> grads{0.5f, 0.25f};
  sgd->step(params, grads, 0.1);
  EXPECT_FLOAT_EQ(params[0], 0.95f);  // 1 - 0.1 * 0.5
  EXPECT_FLOAT_EQ(params[1], -2.025f);
  EXPECT_TRUE(sgd->state().empty());
  EXPECT_EQ(sgd->steps(), 1);
}

TEST(Sgd, WeightDecayAddsItsShareOfTheParameterToTheGradient) {
  auto config = config_for("sgd");
  config.weight_decay = 0.1;
  auto sgd = make_optimizer(config, 1, cpu());
  std::vector<float> params{2.0f};
  const std::vector<float> grads{0.5f};
  sgd->step(params, grads, 0.1);
  EXPECT_FLOAT_EQ(params[0], 1.93f);  // 2 - 0.1 * (0.5 + 0.1 * 2)
}

TEST(Momentum, WeightDecayAddsItsShareOfTheParameterToTheGradient) {
  auto config = config_for("momentum");
  config.momentum = 0.9;
  config.weight_decay = 0.1;
  auto momentum = make_optimizer(config, 1, cpu());
  std::vector<float> params{2.0f};
  const std::vector<float> grads{0.5f};
  momentum->step(params, grads, 0.1);  // a = 0.5 + 0.1 * 2 = 0.7
  EXPECT_FLOAT_EQ(params[0], 1.93f);
  momentum->step(params, grads, 0.1);  // a = 0.9 * 0.7 + 0.5 + 0.1 * 1.93 = 1.323
  EXPECT_FLOAT_EQ(params[0], 1.7977f);
  config.nesterov = true;  // p -= lr * (g + m * a) with g = 0.7, a = 0.7
  auto nesterov = make_optimizer(config, 1, cpu());
  params = {2.0f};
  nesterov->step(params, grads, 0.1);
  EXPECT_FLOAT_EQ(params[0], 1.867f);
}

TEST(Momentum, AccumulatesGradients) {
  auto config = config_for("momentum");
  config.momentum = 0.9;
  auto momentum = make_optimizer(config, 1, cpu());
  std::vector<float> params{1.0f};
  const std::vector<float> grads{1.0f};
  momentum->step(params, grads, 0.1);  // a = 1
  EXPECT_FLOAT_EQ(params[0], 0.9f);
  momentum->step(params, grads, 0.1);  // a = 0.9 * 1 + 1 = 1.9
  EXPECT_FLOAT_EQ(params[0], 0.71f);
  const auto state = state_of(*momentum);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_FLOAT_EQ(state.at("momentum").at(0), 1.9f);
}

TEST(Momentum, NesterovLooksAhead) {
  auto config = config_for("momentum");
  config.momentum = 0.9;
  config.nesterov = true;
  auto nesterov = make_optimizer(config, 1, cpu());
  std::vector<float> params{1.0f};
  const std::vector<float> grads{1.0f};
  nesterov->step(params, grads, 0.1);  // a = 1; p -= 0.1 (1 + 0.9 * 1)
  EXPECT_FLOAT_EQ(params[0], 0.81f);
  nesterov->step(params, grads, 0.1);  // a = 1.9; p -= 0.1 (1 + 0.9 * 1.9)
  EXPECT_FLOAT_EQ(params[0], 0.539f);
}

TEST(RmsProp, MeanSquareStartsAtOneAndEpsilonIsInsideTheRoot) {
  auto config = config_for("rmsprop");
  config.rmsprop_decay = 0.9;
  config.rmsprop_epsilon = 0.2;  // large, to see where it goes
  auto rmsprop = make_optimizer(config, 1, cpu());
  ASSERT_EQ(state_of(*rmsprop).at("ms"), std::vector<float>{1.0f});
  std::vector<float> params{1.0f};
  const std::vector<float> grads{2.0f};
  rmsprop->step(params, grads, 0.01);
  // ms = 0.9 * 1 + 0.1 * 2^2 = 1.3 (it would be 0.4 from zero); mom = 0.01 * 2 / sqrt(1.3 + 0.2).
  const auto state = state_of(*rmsprop);
  EXPECT_FLOAT_EQ(state.at("ms")[0], 1.3f);
  EXPECT_FLOAT_EQ(state.at("mom")[0], static_cast<float>(0.02 / std::sqrt(1.5)));
  EXPECT_FLOAT_EQ(params[0], static_cast<float>(1.0 - 0.02 / std::sqrt(1.5)));
}

TEST(RmsProp, MomentumCarriesThePreviousStep) {
  auto config = config_for("rmsprop");
  config.rmsprop_decay = 0.5;
  config.rmsprop_momentum = 0.5;
  config.rmsprop_epsilon = 1e-10;
  auto rmsprop = make_optimizer(config, 1, cpu());
  std::vector<float> params{0.0f};
  const std::vector<float> grads{1.0f};
  rmsprop->step(params, grads, 0.1);  // ms = 1, mom = 0.1
  rmsprop->step(params, grads, 0.1);  // ms = 1, mom = 0.05 + 0.1
  EXPECT_FLOAT_EQ(params[0], -0.25f);
}

TEST(Adam, FirstStepMovesByAboutTheLearningRate) {
  // With TF1's step size lr sqrt(1 - b2) / (1 - b1), m = (1 - b1) g and v = (1 - b2) g^2, the
  // first update is lr g / |g| up to epsilon, whatever the gradient's scale.
  auto adam = make_optimizer(config_for("adam"), 3, cpu());
  std::vector<float> params{0.0f, 0.0f, 0.0f};
  const std::vector<float> grads{0.5f, -20.0f, 0.01f};
  adam->step(params, grads, 0.001);
  EXPECT_NEAR(params[0], -0.001f, 1e-7);
  EXPECT_NEAR(params[1], 0.001f, 1e-7);
  EXPECT_NEAR(params[2], -0.001f, 1e-7);
  EXPECT_EQ(adam->steps(), 1);
}

TEST(Adam, EpsilonIsAddedToTheUncorrectedRoot) {
  auto config = config_for("adam");
  config.adam_epsilon = 1.0;  // large, to see where it goes
  auto adam = make_optimizer(config, 1, cpu());
  std::vector<float> params{0.0f};
  const std::vector<float> grads{0.5f};
  adam->step(params, grads, 0.1);
  const double rate = 0.1 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double m = 0.1 * 0.5, v = 0.001 * 0.25;
  // TF1 ("epsilon hat"): rate m / (sqrt(v) + eps) = 0.00156; the paper's form,
  // lr m_hat / (sqrt(v_hat) + eps), would give 0.0333.
  EXPECT_FLOAT_EQ(params[0], static_cast<float>(-rate * m / (std::sqrt(v) + 1.0)));
  const auto state = state_of(*adam);
  EXPECT_FLOAT_EQ(state.at("m")[0], static_cast<float>(m));
  EXPECT_FLOAT_EQ(state.at("v")[0], static_cast<float>(v));
}

// ---------------------------------------------------------------------------------------------
// Reference values.

class Golden : public testing::TestWithParam<std::string> {};

TEST_P(Golden, FiveStepsMatchTheReference) {
  const auto file = io::File::open(MBKIT_TEST_DATA_DIR "/optim/golden/optimizers.h5");
  const auto initial = file.open_dataset("initial_params").read<float>();
  const auto gradients = file.open_dataset("gradients").read<float>();
  const auto learning_rates = file.open_dataset("learning_rates").read<double>();
  const auto reference = file.open_group("cases").open_dataset(GetParam());
  const auto expected = reference.read<float>();
  const std::size_t size = initial.size();
  const std::size_t steps = learning_rates.size();
  ASSERT_EQ(gradients.size(), steps * size);
  ASSERT_EQ(expected.size(), steps * size);

  OptimizerConfig config;
  config.name = reference.string_attribute("optimizer");
  config.weight_decay = reference.double_attribute("weight_decay");
  config.momentum = reference.double_attribute("momentum");
  config.nesterov = reference.int_attribute("nesterov") != 0;
  config.rmsprop_decay = reference.double_attribute("rmsprop_decay");
  config.rmsprop_momentum = reference.double_attribute("rmsprop_momentum");
  config.rmsprop_epsilon = reference.double_attribute("rmsprop_epsilon");
  config.adam_beta1 = reference.double_attribute("adam_beta1");
  config.adam_beta2 = reference.double_attribute("adam_beta2");
  config.adam_epsilon = reference.double_attribute("adam_epsilon");
  auto optimizer = make_optimizer(config, size, cpu());

  std::vector<float> params = initial;
  for (std::size_t step = 0; step < steps; ++step) {
    optimizer->step(params, std::span(gradients).subspan(step * size, size), learning_rates[step]);
    for (std::size_t i = 0; i < size; ++i) {
      const float want = expected[step * size + i];
      // 1e-6 relative, and absolute near zero: PyTorch's kernels may fuse multiply-adds.
      EXPECT_NEAR(params[i], want, 1e-6 * std::max(1.0f, std::abs(want)))
          << "step " << step + 1 << ", parameter " << i;
    }
  }
  EXPECT_NE(params, initial);
  EXPECT_EQ(optimizer->steps(), static_cast<std::int64_t>(steps));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Golden,
                         testing::Values("sgd", "sgd_weight_decay", "momentum", "nesterov",
                                         "rmsprop", "rmsprop_momentum", "adam",
                                         "adam_weight_decay"),
                         [](const testing::TestParamInfo<std::string>& case_info) {
                           return case_info.param;
                         });

// ---------------------------------------------------------------------------------------------
// Every optimizer, small and large buffers.

struct Variant {
  const char* label;
  OptimizerConfig config;
};

std::vector<Variant> variants() {
  std::vector<Variant> all;
  for (const char* name : {"sgd", "momentum", "rmsprop", "adam"}) {
    auto config = config_for(name);
    config.weight_decay = 0.01;
    config.rmsprop_momentum = 0.5;
    all.push_back({name, config});
  }
  auto nesterov = config_for("momentum");
  nesterov.nesterov = true;
  all.push_back({"nesterov", nesterov});
  return all;
}

TEST(Optimizer, StateNamesAndSizes) {
  const std::map<std::string, std::vector<std::string>> names{
      {"sgd", {}}, {"momentum", {"momentum"}}, {"rmsprop", {"ms", "mom"}}, {"adam", {"m", "v"}}};
  for (const auto& [name, expected] : names) {
    auto optimizer = make_optimizer(config_for(name), 11, cpu());
    std::vector<std::string> got;
    for (const auto& [slot, values] : optimizer->state()) {
      got.push_back(slot);
      EXPECT_EQ(values->size(), 11u) << name << " " << slot;
    }
    EXPECT_EQ(got, expected) << name;
    EXPECT_EQ(optimizer->config().name, name);
    EXPECT_EQ(optimizer->steps(), 0);
  }
}

TEST(Optimizer, RestoredStateContinuesBitForBit) {
  constexpr std::size_t kSize = 40000;  // above the threshold of the threaded path
  const auto initial = random_values(kSize, 1);
  std::vector<std::vector<float>> grads;
  for (std::uint64_t step = 0; step < 6; ++step) grads.push_back(random_values(kSize, 10 + step));
  const auto lr = [](std::size_t step) { return 0.01 / static_cast<double>(step + 1); };

  for (const auto& variant : variants()) {
    SCOPED_TRACE(variant.label);
    auto uninterrupted = make_optimizer(variant.config, kSize, cpu());
    auto straight = initial;
    for (std::size_t step = 0; step < 6; ++step)
      uninterrupted->step(straight, grads[step], lr(step));

    auto first = make_optimizer(variant.config, kSize, cpu());
    auto resumed = initial;
    for (std::size_t step = 0; step < 3; ++step) first->step(resumed, grads[step], lr(step));
    const auto saved = state_of(*first);
    const auto saved_steps = first->steps();
    first.reset();

    auto second = make_optimizer(variant.config, kSize, cpu());
    for (const auto& [name, values] : second->state()) {
      cpu().copy_from_host(saved.at(name), *values, 0);
    }
    second->set_steps(saved_steps);
    for (std::size_t step = 3; step < 6; ++step) second->step(resumed, grads[step], lr(step));

    EXPECT_EQ(resumed, straight);
    EXPECT_EQ(state_of(*second), state_of(*uninterrupted));
    EXPECT_EQ(second->steps(), 6);
  }
}

TEST(Optimizer, ThreadedBuffersMatchElementByElementUpdates) {
  // The same update applied to a large buffer (all threads, vectorised) and to each element
  // alone (one thread) gives identical values: the result does not depend on the split.
  constexpr std::size_t kSize = 20000;
  constexpr std::size_t kChecked = 97;
  const auto initial = random_values(kSize, 2);
  const auto grads = random_values(kSize, 3, 0.1);
  for (const auto& variant : variants()) {
    SCOPED_TRACE(variant.label);
    auto whole = make_optimizer(variant.config, kSize, cpu());
    auto params = initial;
    for (int step = 0; step < 3; ++step) whole->step(params, grads, 0.05);
    for (std::size_t i = 0; i < kSize; i += kSize / kChecked) {
      auto single = make_optimizer(variant.config, 1, cpu());
      std::vector<float> param{initial[i]};
      const std::vector<float> grad{grads[i]};
      for (int step = 0; step < 3; ++step) single->step(param, grad, 0.05);
      ASSERT_EQ(param[0], params[i]) << "element " << i;
    }
  }
}

TEST(Optimizer, SizeMismatchIsAnInternalError) {
  auto adam = make_optimizer(config_for("adam"), 4, cpu());
  std::vector<float> params(4), grads(4), short_buffer(3);
  EXPECT_MBKIT_ERROR(adam->step(short_buffer, grads, 0.1), ExitCode::kFailure,
                     "optimizer made for 4 parameters got 3");
  EXPECT_MBKIT_ERROR(adam->step(params, short_buffer, 0.1), ExitCode::kFailure,
                     "optimizer made for 4 parameters got 3 gradients");
  // Buffers: a range past the end (a shard's offset too far).
  auto long_params = cpu().make_buffer(6);
  auto long_grads = cpu().make_buffer(6);
  adam->step(*long_params, *long_grads, 0.1, 2);
  EXPECT_MBKIT_ERROR(adam->step(*long_params, *long_grads, 0.1, 3), ExitCode::kFailure,
                     "optimizer made for 4 parameters got 6 from 3");
}

// ---------------------------------------------------------------------------------------------
// Bad settings.

TEST(MakeOptimizer, NamesTheFlagOfABadSetting) {
  EXPECT_EQ(known_optimizers(), "sgd, momentum, rmsprop, adam");
  EXPECT_MBKIT_ERROR(
      make_optimizer(config_for("adamw"), 1, cpu()), ExitCode::kUsage,
      "--optimizer: unknown optimizer 'adamw' (known: sgd, momentum, rmsprop, adam)");

  auto config = config_for("momentum");
  config.momentum = 1.5;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--momentum 1.5 is not in [0, 1)");
  config.momentum = -0.1;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--momentum -0.1 is not in [0, 1)");
  config.momentum = 1.0;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--momentum 1 is not in [0, 1)");
  config.momentum = std::nan("");
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--momentum nan is not in");

  config = config_for("sgd");
  config.weight_decay = -1e-4;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--weight-decay must be non-negative and finite (got -0.0001)");
  config.weight_decay = std::numeric_limits<double>::infinity();
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--weight-decay must be non-negative");

  config = config_for("rmsprop");
  config.rmsprop_decay = 1.0;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--rmsprop-decay 1 is not in [0, 1)");
  config = config_for("rmsprop");
  config.rmsprop_momentum = 2.0;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--momentum 2 is not in [0, 1)");
  config = config_for("rmsprop");
  config.rmsprop_epsilon = 0.0;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--epsilon must be positive and finite (got 0)");

  config = config_for("adam");
  config.adam_beta1 = 1.0;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--beta1 1 is not in [0, 1)");
  config = config_for("adam");
  config.adam_beta2 = 1.0000001;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--beta2 1.0000001 is not in [0, 1)");
  config = config_for("adam");
  config.adam_epsilon = -1e-8;
  EXPECT_MBKIT_ERROR(make_optimizer(config, 1, cpu()), ExitCode::kUsage,
                     "--epsilon must be positive and finite (got -1e-08)");
}

TEST(MakeOptimizer, IgnoresSettingsOfOtherOptimizers) {
  auto config = config_for("sgd");
  config.momentum = 1.5;
  config.adam_beta1 = 2.0;
  config.rmsprop_epsilon = 0.0;
  EXPECT_NO_THROW(make_optimizer(config, 1, cpu()));
  config.name = "adam";
  config.adam_beta1 = 0.9;
  EXPECT_NO_THROW(make_optimizer(config, 1, cpu()));
}

}  // namespace
}  // namespace mbkit::optim
