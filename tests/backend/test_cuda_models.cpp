// Every model of the zoo trained a few steps on the CUDA backend and on the CPU backend from the
// same initial values, batches and dropout seeds: the losses, the first step's gradients, the
// parameters and the batch-norm state must agree to a normalised error (after several steps, no
// tighter than the model itself keeps a rounding-sized difference: see sensitivity below). The
// optimizer (momentum)
// steps over the Network's flat buffers as the trainers do, so the whole training step runs in
// GPU memory. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "test_helpers.hpp"

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {
namespace {

constexpr int kBatch = 4;
constexpr int kSteps = 3;
constexpr double kLearningRate = 0.01;

struct Trace {
  std::vector<double> losses;
  std::vector<float> first_gradients, parameters, state;
};

std::vector<float> values(const nn::HostView& view) {
  return {view.values().begin(), view.values().end()};
}

// `perturbation`: each initial parameter scaled by 1 -+ it (alternating), a difference of the
// size one op's rounding makes (CPU backend only: it writes the parameters in place).
Trace train(const std::string& model, nn::Backend& backend, double perturbation = 0) {
  const test::UsualInput usual = test::usual_input(model);
  models::ModelConfig config;
  config.name = model;
  nn::Network net(models::build_model(config, usual.input, usual.classes), backend);
  net.initialize(5);
  if (perturbation != 0) {
    const std::span<float> parameters = net.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      parameters[i] *= static_cast<float>(1 + (i % 2 == 0 ? perturbation : -perturbation));
    }
  }
  optim::OptimizerConfig momentum;
  momentum.name = "momentum";
  const auto optimizer = optim::make_optimizer(momentum, net.graph().parameter_count(), backend);
  Rng rng(17);
  std::vector<float> images(static_cast<std::size_t>(kBatch * usual.input.size()));
  std::vector<std::int32_t> labels(kBatch);
  Trace trace;
  for (int step = 0; step < kSteps; ++step) {
    for (auto& value : images) value = static_cast<float>(rng.normal());
    for (auto& label : labels) label = static_cast<std::int32_t>(rng.below(usual.classes));
    trace.losses.push_back(
        net.forward(images.data(), labels.data(), kBatch, true, 100 + step).loss_sum);
    net.backward(1.0 / kBatch);
    if (step == 0) trace.first_gradients = values(net.host_gradients());
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), kLearningRate);
  }
  trace.parameters = values(net.host_parameters());
  trace.state = values(net.host_state());
  return trace;
}

using test::normalised_error;

// Whole models add rounding differences layer after layer (and cuDNN's fastest fp32 algorithms,
// Winograd and FFT among them, round differently from oneDNN's direct ones), so the bounds are
// looser than one op's 1e-4; a wrong index or a missing term is off by far more than these.
constexpr double kLossTolerance = 1e-3;
constexpr double kGradientTolerance = 5e-3;
constexpr double kParameterTolerance = 1e-4;
constexpr double kStateTolerance = 1e-3;
// Deep models with batch norm over 4 samples are chaotic at this learning rate: on the CPU,
// resnet50's parameters after 3 steps differ by 9e-2 between 1 and 2 threads (inception3's by
// 5e-3) while their first gradients agree to 1e-5. So after the first step each bound is at
// least kChaosMargin times how far the CPU itself carries a 1e-6 relative change of the initial
// parameters over the same steps; a wrong index or a missing term still shows in the first
// step's gradients, whose bound is fixed.
constexpr double kPerturbation = 1e-6;
constexpr double kChaosMargin = 10;

// `actual` no further from the CPU's `reference` than the larger of `floor` and kChaosMargin
// times how far the CPU itself drifted from it in the `perturbed` run (`perturbation` says how).
void expect_within_chaos(const std::vector<float>& actual, const std::vector<float>& reference,
                         const std::vector<float>& perturbed, double floor, const std::string& what,
                         const std::string& perturbation) {
  const double chaos = normalised_error(perturbed, reference);
  EXPECT_LE(normalised_error(actual, reference), std::max(floor, kChaosMargin * chaos))
      << what << " (" << perturbation << ": " << chaos << ")";
}

// Parameters after the steps and batch-norm state, within the chaos bounds above.
void expect_final_values_within_chaos(const Trace& trace, const Trace& reference,
                                      const Trace& perturbed, const std::string& perturbation) {
  expect_within_chaos(trace.parameters, reference.parameters, perturbed.parameters,
                      kParameterTolerance, cat("parameters after ", kSteps, " steps"),
                      perturbation);
  expect_within_chaos(trace.state, reference.state, perturbed.state, kStateTolerance,
                      "batch-norm state", perturbation);
}

class CudaModels : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModels, TrainLikeTheCpu) {
  std::string why_not;
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin(&why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA backend not run: " << why_not;
  if (plugin->device_count() == 0) GTEST_SKIP() << "CUDA backend not run: no CUDA GPU is visible";
  const std::string& model = GetParam();
  Trace reference, perturbed;
  {
    auto cpu = make_cpu_backend(0);
    reference = train(model, *cpu);
    perturbed = train(model, *cpu, kPerturbation);
  }
  std::unique_ptr<nn::Backend> gpu(backend::cuda_backend_maker()(0, 0));
  const Trace trace = train(model, *gpu);
  for (int step = 0; step < kSteps; ++step) {
    const auto s = static_cast<std::size_t>(step);
    const double expected = reference.losses[s];
    const double scale = std::max(1.0, std::fabs(expected));
    const double chaos = step == 0 ? 0 : std::fabs(perturbed.losses[s] - expected) / scale;
    EXPECT_NEAR(trace.losses[s], expected, std::max(kLossTolerance, kChaosMargin * chaos) * scale)
        << "loss of step " << step << " (perturbed CPU run: " << chaos << ")";
  }
  EXPECT_LE(normalised_error(trace.first_gradients, reference.first_gradients), kGradientTolerance)
      << "gradients of the first step";
  expect_final_values_within_chaos(trace, reference, perturbed, "perturbed CPU run");
}

INSTANTIATE_TEST_SUITE_P(Zoo, CudaModels, ::testing::ValuesIn(models::model_names()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A few training steps at --precision tf32 and bf16, of a shallow model (mnist-cnn: two
// convolutions, two dense layers) and a deep one with batch norm (resnet20), against the CPU in
// fp32. Rounding the operands of every product to the format (unit roundoff u: 2^-11 for TF32,
// 2^-8 for bf16) moves a model about as much as a relative change of u in its initial
// parameters does, which the CPU measures here (a run perturbed by +-u); each bound is
// kChaosMargin times that, and at least one op's bound in test_backend_parity.cpp: 16u of the
// scale for the loss, and for the first gradients kKinkTolerance (a ReLU or max pool input within
// rounding distance of its kink takes the other branch, which changes the gradients by a whole
// term whatever u is). A wrong index, a transposed operand or a missing cast is off by far more.
constexpr double kKinkTolerance = 0.15;

struct PrecisionCase {
  std::string model;
  nn::Precision precision;
};

class CudaModelsAtPrecision : public ::testing::TestWithParam<PrecisionCase> {};

TEST_P(CudaModelsAtPrecision, TrainCloseToTheCpuInFp32) {
  std::string why_not;
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin(&why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA backend not run: " << why_not;
  if (plugin->device_count() == 0) GTEST_SKIP() << "CUDA backend not run: no CUDA GPU is visible";
  const auto& [model, precision] = GetParam();
  const double u = precision == nn::Precision::kTf32 ? 0x1p-11 : 0x1p-8;
  Trace reference, perturbed;
  {
    auto cpu = make_cpu_backend(0);
    reference = train(model, *cpu);
    perturbed = train(model, *cpu, u);
  }
  std::unique_ptr<nn::Backend> gpu;
  try {
    gpu.reset(backend::cuda_backend_maker()(0, static_cast<int>(precision)));
  } catch (const Error& error) {
    if (error.code() != ExitCode::kUsage) throw;  // pre-Ampere: no TF32 or bf16 tensor cores
    GTEST_SKIP() << error.what();
  }
  ASSERT_EQ(gpu->precision(), precision);
  const Trace trace = train(model, *gpu);
  for (int step = 0; step < kSteps; ++step) {
    const auto s = static_cast<std::size_t>(step);
    const double expected = reference.losses[s];
    const double scale = std::max(1.0, std::fabs(expected));
    const double chaos = std::fabs(perturbed.losses[s] - expected) / scale;
    EXPECT_NEAR(trace.losses[s], expected, std::max(16 * u, kChaosMargin * chaos) * scale)
        << "loss of step " << step << " (CPU perturbed by u: " << chaos << ")";
  }
  expect_within_chaos(trace.first_gradients, reference.first_gradients, perturbed.first_gradients,
                      kKinkTolerance, "gradients of the first step", "CPU perturbed by u");
  expect_final_values_within_chaos(trace, reference, perturbed, "CPU perturbed by u");
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaModelsAtPrecision,
                         ::testing::Values(PrecisionCase{"mnist-cnn", nn::Precision::kTf32},
                                           PrecisionCase{"mnist-cnn", nn::Precision::kBf16},
                                           PrecisionCase{"resnet20", nn::Precision::kTf32},
                                           PrecisionCase{"resnet20", nn::Precision::kBf16}),
                         [](const ::testing::TestParamInfo<PrecisionCase>& param_info) {
                           std::string name =
                               param_info.param.model + "_" +
                               std::string(nn::precision_name(param_info.param.precision));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace mbkit::backend
