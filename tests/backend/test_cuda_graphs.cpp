// CUDA graphs of the training step (Network::train with step graphs, CudaBackend's
// begin_capture / end_capture): on a GPU, zoo models trained a few steps with graphs give the
// losses, hits, gradients, parameters and batch-norm state of the same steps without them, bit
// for bit, with new batches every step; a batch-size change and AMB's added micro-batches get
// recordings of their own; dropout (cifar10-cnn) draws each step's masks. Two backends on the same
// GPU (each its own streams and workspace), the same cuDNN algorithms (cached per process). Skips,
// saying why, without a GPU. tests/nn/test_step_graphs.cpp checks the Network's side without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/backend/cuda_plugin.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::backend {
namespace {

struct Step {
  int batch;
  bool micro_batches = false;  ///< a second micro-batch adds its gradient
};

struct Trace {
  std::vector<double> losses;
  std::vector<std::int64_t> correct;
  std::vector<float> gradients, parameters, state;
  nn::Network::StepGraphCounts counts;
};

std::vector<float> values(const nn::HostView& view) {
  return {view.values().begin(), view.values().end()};
}

Trace train(const std::string& model, nn::Backend& backend, bool graphs,
            const std::vector<Step>& steps) {
  const test::UsualInput usual = test::usual_input(model);
  models::ModelConfig config;
  config.name = model;
  nn::Network net(models::build_model(config, usual.input, usual.classes), backend);
  net.initialize(3);
  if (graphs) net.set_step_graphs(true);
  optim::OptimizerConfig momentum;
  momentum.name = "momentum";
  const auto optimizer = optim::make_optimizer(momentum, net.parameter_count(), backend);
  Rng rng(11);
  Trace run;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const int batch = steps[k].batch;
    for (int part = 0; part < (steps[k].micro_batches ? 2 : 1); ++part) {
      std::vector<float> images(static_cast<std::size_t>(batch * usual.input.size()));
      std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
      for (auto& value : images) value = static_cast<float>(rng.normal());
      for (auto& label : labels) label = static_cast<std::int32_t>(rng.below(usual.classes));
      const auto result =
          net.train(images.data(), labels.data(), batch, 40 + k, 1.0 / batch, part > 0);
      run.losses.push_back(result.loss_sum);
      run.correct.push_back(result.correct);
    }
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), 0.05);
  }
  run.gradients = values(net.host_gradients());
  run.parameters = values(net.host_parameters());
  run.state = values(net.host_state());
  run.counts = net.step_graph_counts();
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The plugin, or null after GTEST_SKIP's reason (the caller returns).
const CudaPluginApi* gpu_or_skip(std::string& why_not) {
  // Without a driver, loading the plugin would only map cuDNN and cuBLAS (a second a test).
  if (!gpu_driver_present()) {
    why_not = "no NVIDIA driver (libcuda.so.1 does not open)";
    return nullptr;
  }
  const CudaPluginApi* plugin = cuda_plugin(&why_not);
  if (plugin == nullptr) return nullptr;
  if (plugin->device_count() == 0) {
    why_not = "no CUDA GPU is visible";
    return nullptr;
  }
  return plugin;
}

void expect_replay_matches_eager(const CudaPluginApi& plugin, const std::string& model,
                                 const std::vector<Step>& steps, int recordings) {
  std::unique_ptr<nn::Backend> eager_gpu(plugin.make_backend(0, 0));  // fp32
  std::unique_ptr<nn::Backend> graph_gpu(plugin.make_backend(0, 0));  // fp32
  const Trace eager = train(model, *eager_gpu, false, steps);
  const Trace graphs = train(model, *graph_gpu, true, steps);
  EXPECT_EQ(graphs.losses, eager.losses);
  EXPECT_EQ(graphs.correct, eager.correct);
  EXPECT_TRUE(same_bits(graphs.gradients, eager.gradients)) << "gradients";
  EXPECT_TRUE(same_bits(graphs.parameters, eager.parameters)) << "parameters";
  EXPECT_TRUE(same_bits(graphs.state, eager.state)) << "batch-norm state";
  EXPECT_EQ(graphs.counts.failed, 0) << "a recording failed (its warning is above)";
  EXPECT_EQ(graphs.counts.recorded, recordings);
  EXPECT_GT(graphs.counts.replayed, 0);
}

class CudaGraphs : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphs, ReplayMatchesEagerBitForBit) {
  std::string why_not;
  const CudaPluginApi* plugin = gpu_or_skip(why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA graphs not run: " << why_not;
  expect_replay_matches_eager(*plugin, GetParam(), std::vector<Step>(5, Step{8}), 1);
}

INSTANTIATE_TEST_SUITE_P(Zoo, CudaGraphs,
                         ::testing::Values("mlp", "mnist-cnn", "cifar10-cnn", "resnet20",
                                           "resnet18"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(CudaGraphsShapes, BatchSizeChangesAndMicroBatchesRecordAgain) {
  std::string why_not;
  const CudaPluginApi* plugin = gpu_or_skip(why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA graphs not run: " << why_not;
  // A short batch, the first size again, then AMB's two micro-batches a step.
  const std::vector<Step> steps{{8}, {8}, {8}, {5}, {5}, {5}, {8}, {6, true}, {6, true}, {6, true}};
  expect_replay_matches_eager(*plugin, "resnet8", steps, 4);
}

}  // namespace
}  // namespace mbkit::backend
