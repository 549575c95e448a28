// A checkpoint's arrays come out of the backend's buffers by explicit, counted copies: exactly
// the parameters, the state and the optimizer state, on the CPU and on a backend whose memory
// the host cannot read (the fake device); restoring them copies exactly as many bytes back,
// continues bit for bit, and a checkpoint that does not fit changes nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

constexpr int kBatch = 4;

std::unique_ptr<nn::Backend> make(const std::string& kind) {
  return kind == "cpu" ? backend::make_cpu_backend(1) : test::make_fake_device_backend(1);
}

// Dense, batch norm (state), dense: parameters and state both.
std::unique_ptr<nn::Network> small_net(nn::Backend& backend) {
  nn::GraphBuilder b("copies", {6, 1, 1}, 3);
  const int x = b.relu(b.batch_norm(b.dense(b.input(), 5, "fc1"), "bn"));
  auto net = std::make_unique<nn::Network>(b.finish(b.dense(x, 3, "fc2")), backend);
  net->initialize(3);
  return net;
}

void train_step(nn::Network& net, optim::Optimizer& optimizer, std::uint64_t step) {
  Rng rng(5, step);
  std::vector<float> images(kBatch * 6);
  for (auto& v : images) v = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels;
  for (int i = 0; i < kBatch; ++i) labels.push_back(static_cast<std::int32_t>(rng.below(3)));
  net.forward(images.data(), labels.data(), kBatch, true, step);
  net.backward(1.0 / kBatch);
  optimizer.step(net.parameter_buffer(), net.gradient_buffer(), 0.05);
}

std::vector<float> read(nn::Backend& backend, const nn::Buffer& buffer) {
  std::vector<float> values(buffer.size());
  backend.copy_to_host(buffer, 0, values);
  return values;
}

class CheckpointCopies : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointCopies, ExactlyTheModelAndOptimizerStateEachWayAndBitForBitOnResume) {
  optim::OptimizerConfig config;
  config.name = "adam";
  auto backend = make(GetParam());
  auto net = small_net(*backend);
  auto optimizer = optim::make_optimizer(config, net->parameter_count(), *backend);
  for (std::uint64_t step = 0; step < 2; ++step) train_step(*net, *optimizer, step);
  const std::size_t expected_bytes =
      (net->parameter_count() * 3 + net->state_count()) * sizeof(float);  // adam: m and v
  ASSERT_GT(net->state_count(), 0u);

  Checkpoint checkpoint;
  nn::CopyCounts before = backend->copied();
  capture_model(checkpoint, *net, *optimizer);
  nn::CopyCounts moved = backend->copied() - before;
  EXPECT_EQ(moved.to_host, expected_bytes);
  EXPECT_EQ(moved.from_host, 0u);
  EXPECT_EQ(checkpoint.optimizer_steps, 2);
  ASSERT_EQ(checkpoint.optimizer_state.size(), 2u);

  // One more step straight on, and the same from a fresh model restored from the checkpoint.
  train_step(*net, *optimizer, 2);
  auto resumed = small_net(*backend);
  auto resumed_optimizer = optim::make_optimizer(config, net->parameter_count(), *backend);
  before = backend->copied();
  restore_model(checkpoint, *resumed, *resumed_optimizer, "saved.h5");
  moved = backend->copied() - before;
  EXPECT_EQ(moved.from_host, expected_bytes);
  EXPECT_EQ(moved.to_host, 0u);
  train_step(*resumed, *resumed_optimizer, 2);
  EXPECT_EQ(read(*backend, resumed->parameter_buffer()), read(*backend, net->parameter_buffer()));
  EXPECT_EQ(read(*backend, resumed->state_buffer()), read(*backend, net->state_buffer()));
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(read(*backend, *resumed_optimizer->state()[i].second),
              read(*backend, *optimizer->state()[i].second));
  }
}

TEST_P(CheckpointCopies, OneThatDoesNotFitChangesNothing) {
  optim::OptimizerConfig config;
  config.name = "momentum";
  auto backend = make(GetParam());
  auto net = small_net(*backend);
  auto optimizer = optim::make_optimizer(config, net->parameter_count(), *backend);
  train_step(*net, *optimizer, 0);
  Checkpoint checkpoint;
  capture_model(checkpoint, *net, *optimizer);
  checkpoint.optimizer_state[0].values.pop_back();

  auto other = small_net(*backend);
  auto other_optimizer = optim::make_optimizer(config, net->parameter_count(), *backend);
  const auto params = read(*backend, other->parameter_buffer());
  const nn::CopyCounts before = backend->copied();
  EXPECT_MBKIT_ERROR(restore_model(checkpoint, *other, *other_optimizer, "saved.h5"),
                     ExitCode::kBadData, "saved.h5: optimizer state momentum does not fit");
  EXPECT_EQ(backend->copied().from_host, before.from_host);
  EXPECT_EQ(read(*backend, other->parameter_buffer()), params);
  EXPECT_EQ(other_optimizer->steps(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointCopies, ::testing::Values("cpu", "device"),
                         [](const auto& kind) { return kind.param; });

}  // namespace
}  // namespace mbkit::train
