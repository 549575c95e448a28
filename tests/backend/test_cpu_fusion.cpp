// The CPU backend runs a relu right after a batch norm inside the batch norm's primitives
// (make_cpu_backend's fuse_layers). That must change nothing a user can see: every activation
// (the batch norm's own output too, written when read), the loss, every gradient and the
// running statistics have the same bits as with one kernel per layer, in training and in
// evaluation. CI runs this binary at every instruction-set level (isa-*.backend); at SSE4.1
// only the adds are fused (oneDNN's fused batch norm is a reference one there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/graph.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::backend {
namespace {

struct Outcome {
  double loss = 0, eval_loss = 0;
  std::vector<std::vector<float>> activations, eval_activations;
  std::vector<float> gradients, state;
  int fused = 0;  ///< batch norms built with their relu
  std::string backend;
};

/// Every case of fusion and of none, small: a batch norm with 16 channels and its relu (fused
/// where the level has channel blocks of 8 or 16), one with 28 (padded to whole blocks: its relu
/// runs apart), a relu whose output two layers read, a batch norm two layers read and an add
/// without a relu (not fused), an add with one (fused).
nn::Graph mixed() {
  nn::GraphBuilder b("mixed", {3, 8, 8}, 5);
  const int a = b.relu(b.batch_norm(b.conv2d(b.input(), 16, 3, 1, 1, "c1", false), "bn1"));
  const int padded = b.relu(b.batch_norm(b.conv2d(a, 28, 3, 1, 1, "c2", false), "bn2"));
  const int back = b.batch_norm(b.conv2d(padded, 16, 3, 1, 1, "c3", false), "bn3");
  const int both = b.add(b.relu(back), back, "add");
  const int sum = b.relu(b.add(both, a, "add2"));
  return b.finish(b.dense(b.flatten(b.global_avg_pool(sum, "pool")), 5, "fc"));
}

/// Two training steps (batch 4, momentum-free SGD applied by hand, so that the second step runs
/// on updated parameters), then an evaluation; every activation read after each.
Outcome run(const std::string& model, bool fuse) {
  auto backend = make_cpu_backend(1, fuse);
  nn::Graph graph = mixed();
  if (model != "mixed") {
    const test::UsualInput usual = test::usual_input(model);
    models::ModelConfig config;
    config.name = model;
    graph = models::build_model(config, usual.input, usual.classes);
  }
  nn::Network net(std::move(graph), *backend);
  const int classes = net.graph().num_classes();
  const nn::Dims input = net.graph().input();
  net.initialize(5);
  constexpr int kBatch = 4;
  Rng rng(6);
  std::vector<float> images(static_cast<std::size_t>(kBatch * input.size()));
  for (auto& value : images) value = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[i] = i % classes;
  const int nodes = static_cast<int>(net.graph().nodes().size());
  Outcome outcome;
  for (int step = 0; step < 2; ++step) {
    outcome.loss = net.forward(images.data(), labels.data(), kBatch, true, 7).loss_sum;
    net.backward(1.0 / kBatch);
    const auto gradients = net.gradients();
    auto parameters = net.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i] -= 0.1f * gradients[i];
  }
  // Read after the update: a batch norm's own output is what the forward pass computed.
  for (int node = 1; node < nodes; ++node) outcome.activations.push_back(net.activation(node));
  outcome.gradients.assign(net.gradients().begin(), net.gradients().end());
  outcome.state.assign(net.state().begin(), net.state().end());
  outcome.eval_loss = net.forward(images.data(), labels.data(), kBatch, false).loss_sum;
  for (int node = 1; node < nodes; ++node) {
    outcome.eval_activations.push_back(net.activation(node));
  }
  outcome.backend = backend->description();
  for (const PrimitiveImpl& built : implementations(*backend)) {
    outcome.fused += built.primitive == "batch norm and relu forward";
  }
  return outcome;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class Fusion : public testing::TestWithParam<std::string> {};

TEST_P(Fusion, ChangesNoBit) {
  const Outcome fused = run(GetParam(), true);
  const Outcome apart = run(GetParam(), false);
  if (fused.backend.find("SSE4.1") != std::string::npos) {
    EXPECT_EQ(fused.fused, 0) << "oneDNN's fused batch norm is a reference one at SSE4.1";
  } else {
    EXPECT_GT(fused.fused, 0) << "no batch norm was fused with its relu (" << fused.backend << ")";
  }
  EXPECT_EQ(apart.fused, 0);
  EXPECT_EQ(fused.loss, apart.loss);
  EXPECT_EQ(fused.eval_loss, apart.eval_loss);
  ASSERT_EQ(fused.activations.size(), apart.activations.size());
  for (std::size_t i = 0; i < fused.activations.size(); ++i) {
    EXPECT_TRUE(same_bits(fused.activations[i], apart.activations[i])) << "node " << i + 1;
    EXPECT_TRUE(same_bits(fused.eval_activations[i], apart.eval_activations[i]))
        << "node " << i + 1 << " in evaluation";
  }
  EXPECT_TRUE(same_bits(fused.gradients, apart.gradients));
  EXPECT_TRUE(same_bits(fused.state, apart.state));
}

// resnet8 (0.3 s): the zoo's pattern, batch norm then relu, and add then relu.
INSTANTIATE_TEST_SUITE_P(Cpu, Fusion, testing::Values("resnet8", "mixed"),
                         [](const testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

}  // namespace
}  // namespace mbkit::backend
