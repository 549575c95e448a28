// CUDA graphs of the training step (Network::train with step graphs, CudaBackend's
// begin_capture / end_capture): on a GPU, zoo models trained a few steps with graphs give the
// losses, hits, gradients, parameters and batch-norm state of the same steps without them, bit
// for bit, with new batches every step; a batch-size change and AMB's added micro-batches get
// recordings of their own; dropout (cifar10-cnn) draws each step's masks. Two backends on the same
// GPU (each its own streams and workspace), the same cuDNN algorithms (cached per process). Skips,
// saying why, without a GPU. tests/nn/test_step_graphs.cpp checks the Network's side without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "step_trace.hpp"

namespace mbkit::backend {
namespace {

using test::Step;
using test::StepTrace;

/// The plugin, or null after GTEST_SKIP's reason (the caller returns).
const plugin::CudaPluginApi* gpu_or_skip(std::string& why_not) {
  // Without a driver, loading the plugin would only map cuDNN and cuBLAS (a second a test).
  if (!plugin::gpu_driver_present()) {
    why_not = "no NVIDIA driver (libcuda.so.1 does not open)";
    return nullptr;
  }
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin(&why_not);
  if (plugin == nullptr) return nullptr;
  if (plugin->device_count() == 0) {
    why_not = "no CUDA GPU is visible";
    return nullptr;
  }
  return plugin;
}

void expect_replay_matches_eager(const std::string& model, const std::vector<Step>& steps,
                                 int recordings) {
  std::unique_ptr<nn::Backend> eager_gpu(backend::cuda_backend_maker()(0, 0));  // fp32
  std::unique_ptr<nn::Backend> graph_gpu(backend::cuda_backend_maker()(0, 0));  // fp32
  const StepTrace eager = test::train_steps(model, *eager_gpu, false, steps);
  const StepTrace graphs = test::train_steps(model, *graph_gpu, true, steps);
  test::expect_same_steps(graphs, eager);
  EXPECT_EQ(graphs.counts.failed, 0) << "a recording failed (its warning is above)";
  EXPECT_EQ(graphs.counts.recorded, recordings);
  EXPECT_GT(graphs.counts.replayed, 0);
}

class CudaGraphs : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphs, ReplayMatchesEagerBitForBit) {
  std::string why_not;
  const plugin::CudaPluginApi* plugin = gpu_or_skip(why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA graphs not run: " << why_not;
  expect_replay_matches_eager(GetParam(), std::vector<Step>(5, Step{8}), 1);
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
  const plugin::CudaPluginApi* plugin = gpu_or_skip(why_not);
  if (plugin == nullptr) GTEST_SKIP() << "CUDA graphs not run: " << why_not;
  // A short batch, the first size again, then AMB's two micro-batches a step.
  const std::vector<Step> steps{{8}, {8}, {8}, {5}, {5}, {5}, {8}, {6, true}, {6, true}, {6, true}};
  expect_replay_matches_eager("resnet8", steps, 4);
}

}  // namespace
}  // namespace mbkit::backend
