// Every backend against the CPU reference, op by op (ggml's test-backend-ops): a small graph
// around each op runs a training forward and backward on one backend and on the reference (the
// CPU backend on one thread), and every activation, the loss, every parameter gradient and the
// updated batch-norm state must agree to a normalised error. The candidates are the CPU backend
// on two threads (other summation orders, so this suite runs and can fail on every machine) and
// each other backend this build has (available_backends()), so the CUDA backend meets the same
// suite the day it runs operations; an op a backend lacks (supports()) is a skip that says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "test_helpers.hpp"

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {
namespace {

using nn::GraphBuilder;
using nn::Padding;
using test::normalised_error;

struct OpCase {
  std::string name;
  nn::Op op;  ///< the op under test (what supports() is asked)
  std::function<nn::Graph()> graph;
};

std::vector<OpCase> op_cases() {
  return {
      {"dense_sigmoid", nn::Op::kDense,
       [] {
         GraphBuilder b("parity", {12, 1, 1}, 4);
         return b.finish(b.dense(b.sigmoid(b.dense(b.input(), 9, "fc1")), 4, "fc2"));
       }},
      {"conv_same_relu", nn::Op::kConv2d,
       [] {
         GraphBuilder b("parity", {3, 9, 7}, 3);
         const int x = b.relu(b.conv2d(b.input(), 8, 3, 1, Padding::kSame, "conv", true));
         return b.finish(b.dense(b.flatten(x), 3, "fc"));
       }},
      {"conv_strided_valid_tanh", nn::Op::kConv2d,
       [] {
         GraphBuilder b("parity", {2, 11, 10}, 3);
         const int x = b.tanh(b.conv2d(b.input(), 5, 5, 2, Padding::kValid, "conv", false));
         return b.finish(b.dense(b.flatten(x), 3, "fc"));
       }},
      {"max_pool", nn::Op::kMaxPool,
       [] {
         GraphBuilder b("parity", {4, 8, 8}, 3);
         const int x = b.conv2d(b.input(), 6, 3, 1, 1, "conv");
         return b.finish(b.dense(b.flatten(b.max_pool(x, 3, 2, 1, "pool")), 3, "fc"));
       }},
      {"avg_pool", nn::Op::kAvgPool,
       [] {
         GraphBuilder b("parity", {4, 8, 8}, 3);
         const int x = b.conv2d(b.input(), 6, 3, 1, 1, "conv");
         return b.finish(b.dense(b.flatten(b.avg_pool(x, 2, 2, Padding::kValid, "pool")), 3, "fc"));
       }},
      {"global_avg_pool", nn::Op::kGlobalAvgPool,
       [] {
         GraphBuilder b("parity", {4, 6, 6}, 3);
         const int x = b.conv2d(b.input(), 7, 3, 1, 1, "conv");
         return b.finish(b.dense(b.global_avg_pool(x, "gap"), 3, "fc"));
       }},
      {"batch_norm", nn::Op::kBatchNorm,
       [] {
         GraphBuilder b("parity", {3, 6, 6}, 3);
         const int x = b.relu(b.batch_norm(b.conv2d(b.input(), 8, 3, 1, 1, "conv"), "bn"));
         return b.finish(b.dense(b.flatten(x), 3, "fc"));
       }},
      {"batch_norm_no_scale", nn::Op::kBatchNorm,
       [] {
         // tf_cnn_benchmarks' batch norm (inception3's): a shift alone, after a bias-free
         // convolution; cuDNN gets a constant scale of 1.
         GraphBuilder b("parity", {3, 6, 6}, 3);
         const int conv = b.conv2d(b.input(), 8, 3, 1, Padding::kSame, "conv", false);
         const int x = b.relu(b.batch_norm(conv, "bn", 1e-3, 1e-3, false));
         return b.finish(b.dense(b.flatten(x), 3, "fc"));
       }},
      {"inception_branches", nn::Op::kAvgPool,
       [] {
         // An inception3 block in small: a 3x3 stride-1 SAME average pool (border windows
         // divide by the pixels inside), 1x3 and 3x1 kernels, a VALID 3x3/2 reduction, joined.
         GraphBuilder b("parity", {4, 7, 7}, 3);
         const int pool = b.avg_pool(b.input(), 3, 1, Padding::kSame, "pool");
         const int a = b.conv2d(pool, 5, 1, 1, Padding::kSame, "conv_a", false);
         const int wide = b.conv2d(b.input(), 6, 1, 3, 1, Padding::kSame, "conv_wide", false);
         const int tall = b.conv2d(wide, 6, 3, 1, 1, Padding::kSame, "conv_tall", false);
         const int joined = b.relu(b.concat({a, wide, tall}, "cat"));
         const int reduced = b.conv2d(joined, 4, 3, 2, Padding::kValid, "reduce", false);
         return b.finish(b.dense(b.flatten(b.relu(reduced)), 3, "fc"));
       }},
      {"residual_add", nn::Op::kAdd,
       [] {
         GraphBuilder b("parity", {4, 6, 6}, 3);
         const int a = b.conv2d(b.input(), 4, 3, 1, 1, "conv1");
         const int c = b.conv2d(b.relu(a), 4, 3, 1, 1, "conv2");
         return b.finish(b.dense(b.flatten(b.relu(b.add(a, c, "add"))), 3, "fc"));
       }},
      {"concat", nn::Op::kConcat,
       [] {
         // Densenet's block (the input beside a convolution of it) and an unaligned three-way.
         GraphBuilder b("parity", {5, 6, 6}, 3);
         const int a = b.relu(b.batch_norm(b.conv2d(b.input(), 16, 3, 1, 1, "conv1"), "bn"));
         const int c = b.conv2d(a, 12, 3, 1, 1, "conv2");
         const int d = b.concat({a, c}, "cat1");
         const int e = b.concat({b.input(), d, b.conv2d(d, 3, 1, 1, 0, "conv3")}, "cat2");
         return b.finish(b.dense(b.flatten(b.relu(e)), 3, "fc"));
       }},
      {"lrn", nn::Op::kLrn,
       [] {
         GraphBuilder b("parity", {3, 6, 6}, 3);
         const int x =
             b.lrn(b.relu(b.conv2d(b.input(), 12, 3, 1, 1, "conv")), 9, 0.009, 0.75, 1.0, "lrn");
         return b.finish(b.dense(b.flatten(x), 3, "fc"));
       }},
      {"dropout", nn::Op::kDropout,
       [] {
         // The masks come from the forward's seed, so every backend must draw the same ones.
         GraphBuilder b("parity", {16, 1, 1}, 4);
         return b.finish(b.dense(b.dropout(b.relu(b.dense(b.input(), 20, "fc1")), 0.3), 4, "fc2"));
       }},
  };
}

struct Outcome {
  double loss = 0;
  std::vector<std::vector<float>> activations;
  std::vector<float> gradients, state;
};

constexpr int kBatch = 5;

Outcome run_case(const OpCase& test, nn::Backend& backend) {
  nn::Network net(test.graph(), backend);
  net.initialize(11);
  Rng rng(23);
  {
    // Through a host view: the state is device memory on a GPU backend.
    nn::HostView state = net.host_state();
    for (auto& value : state.values()) value = static_cast<float>(0.5 + rng.uniform());
    state.write_back();
  }
  std::vector<float> images(static_cast<std::size_t>(kBatch * net.graph().input().size()));
  for (auto& value : images) value = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[i] = i % net.graph().num_classes();
  Outcome outcome;
  outcome.loss = net.forward(images.data(), labels.data(), kBatch, true, 7).loss_sum;
  net.backward(1.0 / kBatch);
  for (int node = 1; node < static_cast<int>(net.graph().nodes().size()); ++node) {
    outcome.activations.push_back(net.activation(node));
  }
  const nn::HostView gradients = net.host_gradients();
  const nn::HostView state = net.host_state();
  outcome.gradients.assign(gradients.values().begin(), gradients.values().end());
  outcome.state.assign(state.values().begin(), state.values().end());
  return outcome;
}

// Float32 on another backend or thread count adds in other orders; 1e-4 of the tensor's scale
// is far above that (about 1e-6 here) and far below what a wrong index or missing term gives.
constexpr double kTolerance = 1e-4;

// Below fp32 (--precision) a convolution or dense product rounds its operands to the format's
// precision, unit roundoff u = 2^-11 for TF32's 10-bit mantissa and 2^-8 for bf16's 7 bits (bf16
// also rounds the convolutions' results: a third u), and sums in fp32. The forward pass is
// continuous in those roundings: each product is off by about 2u to 3u of its scale, the largest
// error over a tensor a few times that, and 16u bounds every activation, the loss and the
// batch-norm state (tf32: 7.8e-3, bf16: 6.3e-2; tests/gpu/emulate_precision.py emulates these
// roundings on conv_same_relu: at most 2.5u over 300 random draws). The backward pass is not: a
// ReLU input or a max-pool candidate within rounding distance of its kink takes the other
// branch, and the gradients then differ by a whole term, whatever u is (the same emulation: at
// most 0.041 of the gradients' scale at tf32, 0.070 at bf16), so their bound is 0.15 at both.
// Either bound is far below the O(1) error of a wrong index, a transposed operand, a missing cast
// or a missing term.
constexpr double kTf32Tolerance = 16 * 0x1p-11;
constexpr double kBf16Tolerance = 16 * 0x1p-8;
constexpr double kKinkTolerance = 0.15;

struct Candidate {
  std::string label;
  std::function<std::unique_ptr<nn::Backend>()> make;
  double tolerance = kTolerance;           ///< activations, loss, batch-norm state
  double gradient_tolerance = kTolerance;  ///< parameter gradients
};

std::vector<Candidate> candidates() {
  std::vector<Candidate> list{{"cpu_2_threads", [] { return make_cpu_backend(2); }}};
  for (const std::string& name : available_backends()) {
    if (name == "cpu") continue;
    list.push_back({name, [name] { return make_backend(name, 0); }});
    list.push_back({name + "_tf32", [name] { return make_backend(name, 0, nn::Precision::kTf32); },
                    kTf32Tolerance, kKinkTolerance});
    list.push_back({name + "_bf16", [name] { return make_backend(name, 0, nn::Precision::kBf16); },
                    kBf16Tolerance, kKinkTolerance});
  }
  return list;
}

class BackendParity : public ::testing::TestWithParam<std::tuple<Candidate, OpCase>> {};

TEST_P(BackendParity, MatchesTheCpuReference) {
  const auto& [candidate, test] = GetParam();
  Outcome reference;
  {
    auto cpu = make_cpu_backend(1);  // built and dropped first: it sets OpenMP's thread count
    reference = run_case(test, *cpu);
  }
  std::unique_ptr<nn::Backend> backend;
  try {
    backend = candidate.make();
  } catch (const Error& error) {
    // A GPU older than Ampere has no TF32 or bf16 tensor cores: refused with a usage error.
    if (error.code() != ExitCode::kUsage) throw;
    GTEST_SKIP() << error.what();
  }
  const double tolerance = candidate.tolerance;
  if (!backend->supports(test.op)) {
    GTEST_SKIP() << backend->description() << " has no " << nn::op_name(test.op);
  }
  const Outcome outcome = run_case(test, *backend);
  EXPECT_NEAR(outcome.loss, reference.loss, tolerance * std::max(1.0, std::fabs(reference.loss)));
  ASSERT_EQ(outcome.activations.size(), reference.activations.size());
  for (std::size_t node = 0; node < reference.activations.size(); ++node) {
    ASSERT_EQ(outcome.activations[node].size(), reference.activations[node].size());
    EXPECT_LE(normalised_error(outcome.activations[node], reference.activations[node]), tolerance)
        << "activation of node " << node + 1;
  }
  ASSERT_EQ(outcome.gradients.size(), reference.gradients.size());
  EXPECT_LE(normalised_error(outcome.gradients, reference.gradients), candidate.gradient_tolerance)
      << "gradients";
  EXPECT_LE(normalised_error(outcome.state, reference.state), tolerance) << "batch-norm state";
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendParity,
                         ::testing::Combine(::testing::ValuesIn(candidates()),
                                            ::testing::ValuesIn(op_cases())),
                         [](const ::testing::TestParamInfo<BackendParity::ParamType>& param_info) {
                           return std::get<0>(param_info.param).label + "_" +
                                  std::get<1>(param_info.param).name;
                         });

// The parity suite is only as good as its sensitivity: a gradient off by one part in 1e3 must
// fail it.
TEST(BackendParityCheck, NoticesASmallError) {
  std::vector<float> reference{0.5f, -2.0f, 3.0f}, off = reference;
  off[1] *= 1.001f;
  EXPECT_GT(normalised_error(off, reference), kTolerance);
  EXPECT_EQ(normalised_error(reference, reference), 0.0);
}

}  // namespace
}  // namespace mbkit::backend
