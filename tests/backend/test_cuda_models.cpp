// Every model of the zoo trained a few steps on the CUDA backend and on the CPU backend from the
// same initial values, batches and dropout seeds: the losses, the first step's gradients, the
// parameters and the batch-norm state must agree to a normalised error. The optimizer (momentum)
// steps over the Network's flat buffers as the trainers do, so the whole training step runs in
// GPU memory. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_helpers.hpp"

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/cuda_plugin.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"

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

Trace train(const std::string& model, nn::Backend& backend) {
  const test::UsualInput usual = test::usual_input(model);
  models::ModelConfig config;
  config.name = model;
  nn::Network net(models::build_model(config, usual.input, usual.classes), backend);
  net.initialize(5);
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

class CudaModels : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModels, TrainLikeTheCpu) {
  std::string why_not;
  const CudaPluginApi* plugin = cuda_plugin(&why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA backend not run: " << why_not;
  if (plugin->device_count() == 0) GTEST_SKIP() << "CUDA backend not run: no CUDA GPU is visible";
  const std::string& model = GetParam();
  Trace reference;
  {
    auto cpu = make_cpu_backend(0);
    reference = train(model, *cpu);
  }
  std::unique_ptr<nn::Backend> gpu(plugin->make_backend(0));
  const Trace trace = train(model, *gpu);
  for (int step = 0; step < kSteps; ++step) {
    const double expected = reference.losses[static_cast<std::size_t>(step)];
    EXPECT_NEAR(trace.losses[static_cast<std::size_t>(step)], expected,
                kLossTolerance * std::max(1.0, std::fabs(expected)))
        << "loss of step " << step;
  }
  EXPECT_LE(normalised_error(trace.first_gradients, reference.first_gradients), kGradientTolerance)
      << "gradients of the first step";
  EXPECT_LE(normalised_error(trace.parameters, reference.parameters), kParameterTolerance)
      << "parameters after " << kSteps << " steps";
  EXPECT_LE(normalised_error(trace.state, reference.state), kStateTolerance) << "batch-norm state";
}

INSTANTIATE_TEST_SUITE_P(Zoo, CudaModels, ::testing::ValuesIn(models::model_names()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace mbkit::backend
