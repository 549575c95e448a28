// Network::train's step graphs (Backend::begin_capture), on the recording fake device
// (tests/common/fake_device): the first step at a batch size runs eagerly, the second records
// and replays, later ones replay; every step's loss, hits, gradients, parameters and batch-norm
// state are those of the same steps without graphs, bit for bit, with new images and labels
// every step, across batch-size changes, micro-batches summed into one gradient, dropout's
// per-step masks, stale and failed recordings. tests/backend/test_cuda_graphs.cpp checks the same
// on a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "mbkit/backend/cpu.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"
#include "step_trace.hpp"
#include "test_helpers.hpp"

namespace mbkit::nn {
namespace {

using test::Step;
using Trace = test::StepTrace;

Trace eager(const std::string& model, const std::vector<Step>& steps) {
  auto backend = test::make_fake_device_backend(1);
  return test::train_steps(model, *backend, false, steps);
}

TEST(StepGraphs, ReplayMatchesEagerBitForBit) {
  const std::vector<Step> steps(5, Step{6});
  for (const std::string model : {"mlp", "resnet8"}) {  // resnet8: convolution, batch norm, adds
    SCOPED_TRACE(model);
    auto backend = test::make_recording_fake_device_backend(1);
    const Trace run = test::train_steps(model, *backend, true, steps);
    test::expect_same_steps(run, eager(model, steps));
    // Step 0 eager, step 1 recorded and replayed, steps 2 to 4 replayed.
    EXPECT_EQ(run.counts.recorded, 1);
    EXPECT_EQ(run.counts.replayed, 4);
    EXPECT_EQ(run.counts.failed, 0);
  }
}

TEST(StepGraphs, EachBatchSizeAndMicroBatchAdditionGetsItsOwnRecording) {
  // A short batch (as an epoch's last), then the first size again, then AMB's micro-batches
  // (the second one adds its gradient: recorded apart from the first).
  const std::vector<Step> steps{{4}, {4}, {4}, {3}, {3}, {3}, {4}, {2, true}, {2, true}, {2, true}};
  auto backend = test::make_recording_fake_device_backend(1);
  const Trace run = test::train_steps("resnet8", *backend, true, steps);
  test::expect_same_steps(run, eager("resnet8", steps));
  // Recordings: batch 6, batch 4, and batch 5 as a first and as an added micro-batch.
  EXPECT_EQ(run.counts.recorded, 4);
  EXPECT_EQ(run.counts.failed, 0);
  EXPECT_EQ(run.counts.replayed, 2 + 2 + 1 + 2 + 2);
}

TEST(StepGraphs, StaleRecordingsAreMadeAgain) {
  const std::vector<Step> steps(6, Step{6});
  auto backend = test::make_recording_fake_device_backend(1);
  // Before step 3 the memory the recording reads moves: step 3 runs eagerly, 4 records again.
  const Trace run =
      test::train_steps("mlp", *backend, true, steps, [](Backend& device, std::size_t k) {
        if (k == 3) test::move_fake_device_memory(device);
      });
  test::expect_same_steps(run, eager("mlp", steps));
  EXPECT_EQ(run.counts.recorded, 2);
  EXPECT_EQ(run.counts.replayed, 2 + 2);
}

TEST(StepGraphs, AFailedRecordingRunsEagerlyAndSaysSoOnce) {
  const std::vector<Step> steps{{6}, {6}, {6}, {4}, {4}, {4}};
  auto backend = test::make_recording_fake_device_backend(1);
  test::fail_fake_device_recordings(*backend, true);
  testing::internal::CaptureStderr();
  const Trace run = test::train_steps("mlp", *backend, true, steps);
  const std::string err = testing::internal::GetCapturedStderr();
  test::expect_same_steps(run, eager("mlp", steps));
  EXPECT_EQ(run.counts.failed, 2);  // once per batch size, then eager there
  EXPECT_EQ(run.counts.recorded, 0);
  EXPECT_EQ(run.counts.replayed, 0);
  EXPECT_NE(err.find("CUDA graph of the training step at batch 6 failed"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("at batch 4"), std::string::npos) << "said more than once: " << err;
}

TEST(StepGraphs, AReplayStillChecksTheLabels) {
  const test::UsualInput usual = test::usual_input("mlp");
  auto backend = test::make_recording_fake_device_backend(1);
  models::ModelConfig config;
  config.name = "mlp";
  Network net(models::build_model(config, usual.input, usual.classes), *backend);
  net.initialize(1);
  net.set_step_graphs(true);
  std::vector<float> images(static_cast<std::size_t>(4 * usual.input.size()), 0.5f);
  std::vector<std::int32_t> labels{0, 1, 2, 3};
  for (int k = 0; k < 3; ++k) net.train(images.data(), labels.data(), 4, 1, 0.25);
  ASSERT_EQ(net.step_graph_counts().recorded, 1);
  labels[2] = usual.classes;  // one past the last class
  EXPECT_THROW(net.train(images.data(), labels.data(), 4, 1, 0.25), Error);
  // Also in the step that records (batch 2: the second step at that size), which is bad input,
  // not a failed recording.
  net.train(images.data(), labels.data() + 0, 2, 1, 0.5);
  EXPECT_THROW(net.train(images.data(), labels.data() + 2, 2, 1, 0.5), Error);
  EXPECT_EQ(net.step_graph_counts().failed, 0);
}

TEST(StepGraphs, DropoutDrawsEachStepsMasks) {
  // A small dropout model: a replay that kept the recorded step's seed would differ.
  const auto build = [] {
    GraphBuilder b("dropout-mlp", {1, 6, 6}, 4);
    int x = b.relu(b.dense(b.flatten(b.input()), 16, "fc1"));
    return b.finish(b.dense(b.dropout(x, 0.5), 4, "fc2"));
  };
  Trace traces[2];
  for (const bool graphs : {false, true}) {
    auto backend =
        graphs ? test::make_recording_fake_device_backend(1) : test::make_fake_device_backend(1);
    Network net(build(), *backend);
    net.initialize(2);
    if (graphs) net.set_step_graphs(true);
    Rng rng(5);
    for (int step = 0; step < 5; ++step) {
      std::vector<float> images(4 * 36);
      for (auto& value : images) value = static_cast<float>(rng.normal());
      const std::vector<std::int32_t> labels{0, 1, 2, 3};
      traces[graphs].losses.push_back(
          net.train(images.data(), labels.data(), 4, 100 + static_cast<std::uint64_t>(step), 0.25)
              .loss_sum);
    }
    traces[graphs].gradients = test::host_values(net.host_gradients());
    traces[graphs].counts = net.step_graph_counts();
  }
  EXPECT_EQ(traces[1].losses, traces[0].losses);
  EXPECT_TRUE(test::same_bits(traces[1].gradients, traces[0].gradients));
  EXPECT_EQ(traces[1].counts.replayed, 4);
}

TEST(StepGraphs, RefusedOnTheCpu) {
  auto cpu = backend::make_cpu_backend(1);
  models::ModelConfig config;
  config.name = "mlp";
  Network on_cpu(models::build_model(config, test::usual_input("mlp").input, 10), *cpu);
  EXPECT_NE(on_cpu.step_graphs_unavailable().find("records none"), std::string::npos);
  EXPECT_THROW(on_cpu.set_step_graphs(true), Error);
  EXPECT_FALSE(on_cpu.step_graphs());
}

}  // namespace
}  // namespace mbkit::nn
