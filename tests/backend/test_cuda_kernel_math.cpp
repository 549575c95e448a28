// The CUDA kernels' per-element arithmetic (mbkit/backend/cuda/kernel_math.hpp), run on the host
// against the CPU backend: pooling outputs for every padding rule the graphs make, their
// gradients against a scatter of the output gradients, and dropout's masks drawn from the same
// random numbers. What the GPU adds (launching the loops) is tests/gpu/run-all's.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/cuda/kernel_math.hpp"
#include "mbkit/backend/cuda/launch.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::backend::cuda {
namespace {

using nn::GraphBuilder;
using nn::Padding;

struct PoolCase {
  std::string name;
  nn::Dims input;
  std::function<int(GraphBuilder&, int)> pool;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"max 3x3/2 pad 1",
       {3, 8, 8},
       [](GraphBuilder& b, int x) { return b.max_pool(x, 3, 2, 1, "p"); }},
      {"max 3x3/2 SAME, one more row below",
       {2, 8, 9},
       [](GraphBuilder& b, int x) { return b.max_pool(x, 3, 2, Padding::kSame, "p"); }},
      {"max 2x2/2 VALID on odd",
       {2, 7, 7},
       [](GraphBuilder& b, int x) { return b.max_pool(x, 2, 2, Padding::kValid, "p"); }},
      {"avg 2x2/2 VALID",
       {3, 8, 6},
       [](GraphBuilder& b, int x) { return b.avg_pool(x, 2, 2, Padding::kValid, "p"); }},
      {"avg 3x3/2 SAME",
       {2, 8, 9},
       [](GraphBuilder& b, int x) { return b.avg_pool(x, 3, 2, Padding::kSame, "p"); }},
      {"avg 3x3/1 SAME",
       {2, 5, 6},
       [](GraphBuilder& b, int x) { return b.avg_pool(x, 3, 1, Padding::kSame, "p"); }},
      {"global avg", {4, 5, 3}, [](GraphBuilder& b, int x) { return b.global_avg_pool(x, "p"); }},
  };
}

constexpr int kBatch = 3;

PoolGeometry geometry(const nn::Node& node, nn::Dims in) {
  PoolGeometry g;
  g.batch = kBatch;
  g.channels = in.c;
  g.in_h = in.h;
  g.in_w = in.w;
  g.out_h = node.output.h;
  g.out_w = node.output.w;
  g.kernel_h = node.kernel_h;
  g.kernel_w = node.kernel_w;
  g.stride_h = node.stride_h;
  g.stride_w = node.stride_w;
  g.pad_top = node.pad_top;
  g.pad_left = node.pad_left;
  return g;
}

std::vector<float> random_values(std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (auto& value : values) value = static_cast<float>(rng.normal());
  return values;
}

TEST(CudaKernelMath, PoolingOutputsAreTheCpuBackends) {
  auto cpu = make_cpu_backend(1);
  for (const PoolCase& test : pool_cases()) {
    SCOPED_TRACE(test.name);
    GraphBuilder b("pool", test.input, 2);
    const int pool = test.pool(b, b.input());
    nn::Network net(b.finish(b.dense(b.flatten(pool), 2, "fc")), *cpu);
    net.initialize(1);
    const std::vector<float> x = random_values(kBatch * test.input.size(), 9);
    const std::vector<std::int32_t> labels(kBatch, 0);
    net.forward(x.data(), labels.data(), kBatch, true, 0);
    const std::vector<float> expected = net.activation(pool);
    const nn::Node& node = net.graph().node(pool);
    const PoolGeometry g = geometry(node, test.input);
    ASSERT_EQ(static_cast<std::int64_t>(expected.size()), g.outputs());
    for (std::int64_t i = 0; i < g.outputs(); ++i) {
      int where = -1;
      if (node.op == nn::Op::kMaxPool) {
        ASSERT_EQ(max_pool_at(i, x.data(), g, where), expected[i]) << "output " << i;
        ASSERT_GE(where, 0);
      } else {
        ASSERT_NEAR(avg_pool_at(i, x.data(), g), expected[i], 1e-6) << "output " << i;
      }
    }
  }
}

TEST(CudaKernelMath, PoolingGradientsGatherWhatAScatterAdds) {
  for (const PoolCase& test : pool_cases()) {
    SCOPED_TRACE(test.name);
    GraphBuilder b("pool", test.input, 2);
    const int pool = test.pool(b, b.input());
    const nn::Graph graph = b.finish(b.dense(b.flatten(pool), 2, "fc"));
    const nn::Node& node = graph.node(pool);
    const PoolGeometry g = geometry(node, test.input);
    const std::vector<float> x = random_values(static_cast<std::size_t>(g.inputs()), 3);
    const std::vector<float> dy = random_values(static_cast<std::size_t>(g.outputs()), 4);
    // The reference scatters each output's gradient to its window, outputs in order: for any
    // input the same additions in the same order as the gather.
    std::vector<float> scattered(x.size(), 0.0f);
    std::vector<std::int32_t> argmax(dy.size());
    const std::int64_t plane_in = static_cast<std::int64_t>(g.in_h) * g.in_w;
    const std::int64_t plane_out = static_cast<std::int64_t>(g.out_h) * g.out_w;
    for (std::int64_t o = 0; o < g.outputs(); ++o) {
      const std::int64_t base = o / plane_out * plane_in;
      if (node.op == nn::Op::kMaxPool) {
        int where = -1;
        max_pool_at(o, x.data(), g, where);
        argmax[o] = where;
        scattered[base + where] += dy[o];
        continue;
      }
      const int oy = static_cast<int>(o % plane_out / g.out_w);
      const int ox = static_cast<int>(o % g.out_w);
      const float share = dy[o] / static_cast<float>(window_pixels(oy, ox, g));
      for (int ky = 0; ky < g.kernel_h; ++ky) {
        for (int kx = 0; kx < g.kernel_w; ++kx) {
          const int y = oy * g.stride_h - g.pad_top + ky, xx = ox * g.stride_w - g.pad_left + kx;
          if (y >= 0 && y < g.in_h && xx >= 0 && xx < g.in_w) {
            scattered[base + y * g.in_w + xx] += share;
          }
        }
      }
    }
    for (std::int64_t i = 0; i < g.inputs(); ++i) {
      const float gathered = node.op == nn::Op::kMaxPool
                                 ? max_pool_grad_at(i, dy.data(), argmax.data(), g)
                                 : avg_pool_grad_at(i, dy.data(), g);
      ASSERT_EQ(gathered, scattered[i]) << "input " << i;
    }
  }
}

TEST(CudaKernelMath, DropoutStreamIsTheCpuRng) {
  for (const std::uint64_t seed : {0ULL, 7ULL, 0xdeadbeefcafef00dULL}) {
    for (const std::uint64_t stream : {0ULL, 1ULL, 31ULL}) {
      Rng cpu(seed, stream);
      DropoutStream gpu(seed, stream);
      for (int i = 0; i < 5000; ++i) ASSERT_EQ(gpu.next_u32(), cpu.next_u32()) << i;
    }
  }
}

TEST(CudaKernelMath, DropoutMasksAreTheCpuBackends) {
  // 300 samples of 16 features: two blocks of kDropoutBlock draws, the second partial.
  constexpr int kSamples = 300;
  constexpr double kRate = 0.3;
  GraphBuilder b("dropout", {16, 1, 1}, 2);
  const int dropped = b.dropout(b.input(), kRate);
  auto cpu = make_cpu_backend(2);
  nn::Network net(b.finish(b.dense(dropped, 2, "fc")), *cpu);
  net.initialize(1);
  const std::vector<float> x = random_values(kSamples * 16, 5);
  const std::vector<std::int32_t> labels(kSamples, 1);
  constexpr std::uint64_t kStepSeed = 42;
  net.forward(x.data(), labels.data(), kSamples, true, kStepSeed);
  const std::vector<float> expected = net.activation(dropped);
  // The seed the Network hands the node (nn/network.cpp), and the kernel's draws from it.
  std::uint64_t mixer = kStepSeed ^ (0x9e3779b97f4a7c15ULL * (dropped + 1));
  const std::uint64_t node_seed = splitmix64(mixer);
  const auto threshold = static_cast<std::uint64_t>(kRate * 4294967296.0);
  const auto scale = static_cast<float>(1.0 / (1.0 - kRate));
  const auto count = static_cast<std::int64_t>(x.size());
  ASSERT_EQ(dropout_streams(count), 2);
  std::int64_t kept = 0;
  for (std::int64_t block = 0; block < dropout_streams(count); ++block) {
    DropoutStream rng(node_seed, static_cast<std::uint64_t>(block));
    for (std::int64_t i = block * kDropoutBlock; i < std::min(count, (block + 1) * kDropoutBlock);
         ++i) {
      const bool keep = rng.next_u32() >= threshold;
      kept += keep;
      ASSERT_EQ(keep ? x[i] * scale : 0.0f, expected[i]) << "element " << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / count, 1.0 - kRate, 0.03);
}

TEST(CudaKernelMath, SoftmaxCrossEntropyIsTheCpuBackends) {
  // Logits straight from the input (a 10-class "model" of its own flattened input), with a
  // large offset on some rows (exp must not overflow) and ties (the first top class counts).
  constexpr int kSamples = 6, kClasses = 10;
  GraphBuilder b("loss", {kClasses, 1, 1}, kClasses);
  auto cpu = make_cpu_backend(1);
  nn::Network net(b.finish(b.flatten(b.input())), *cpu);
  net.initialize(1);
  std::vector<float> logits = random_values(kSamples * kClasses, 8);
  for (int k = 0; k < kClasses; ++k) logits[kClasses + k] += 80.0f;
  logits[2 * kClasses + 3] = logits[2 * kClasses + 7] = 9.0f;  // tie: class 3 is the top one
  const std::vector<std::int32_t> labels = {0, 4, 3, 9, 7, 2};
  const nn::Network::Result result = net.forward(logits.data(), labels.data(), kSamples, true, 0);
  const std::vector<float> expected = net.probabilities();
  double loss = 0.0;
  std::int64_t correct = 0;
  std::vector<float> p(kClasses);
  for (int n = 0; n < kSamples; ++n) {
    bool hit = false;
    loss +=
        softmax_cross_entropy_row(logits.data() + n * kClasses, kClasses, labels[n], p.data(), hit);
    correct += hit;
    for (int k = 0; k < kClasses; ++k) {
      // The CPU backend's exp differs by instruction set (ONEDNN_MAX_CPU_ISA=SSE41: 1.2e-6 on a
      // probability of 0.32): 1e-5 relative (1e-6 at least) holds at every level.
      ASSERT_NEAR(p[k], expected[n * kClasses + k],
                  std::max(1e-6f, 1e-5f * expected[n * kClasses + k]))
          << "sample " << n << " class " << k;
    }
  }
  EXPECT_NEAR(loss, result.loss_sum, 1e-5 * result.loss_sum);
  EXPECT_EQ(correct, result.correct);
  EXPECT_GE(correct, 1);  // sample 2's tie, won by its label
}

}  // namespace
}  // namespace mbkit::backend::cuda
