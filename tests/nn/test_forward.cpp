// Forward passes of the CPU kernels against naive reference implementations (plain loops over
// NCHW arrays), layer by layer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::nn {
namespace {

std::vector<float> random_values(std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (auto& v : values) v = static_cast<float>(rng.normal());
  return values;
}

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double error =
        std::fabs(actual[i] - expected[i]) / std::max(1.0, std::fabs(double{expected[i]}));
    if (error > worst) {
      worst = error;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": worst at " << worst_index << ": " << actual[worst_index]
                              << " vs " << expected[worst_index];
}

// Runs `graph` on random input and returns (input, output of `node`, parameters).
struct Run {
  std::vector<float> input, output, params, state;
};

Run run(Graph graph, int node, int batch, bool training = false, bool random_params = false) {
  auto backend = backend::make_cpu_backend(2);
  Network net(std::move(graph), *backend);
  net.initialize(3);
  // Make batch-norm statistics and shifts non-trivial.
  Rng rng(5);
  for (auto& v : net.state()) v = static_cast<float>(0.5 + rng.uniform());
  // Batch norm starts with scale 1 and shift 0, which would hide which one is which.
  if (random_params) {
    for (auto& v : net.parameters()) v = static_cast<float>(0.5 + rng.uniform());
  }
  Run result;
  result.input = random_values(static_cast<std::size_t>(batch * net.graph().input().size()), 17);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch), 0);
  result.state.assign(net.state().begin(), net.state().end());
  net.forward(result.input.data(), labels.data(), batch, training);
  result.output = net.activation(node);
  result.params.assign(net.parameters().begin(), net.parameters().end());
  return result;
}

struct Geometry {
  int n, c, h, w;
  float at(const std::vector<float>& x, int b, int ch, int y, int xx) const {
    return x[((static_cast<std::size_t>(b) * c + ch) * h + y) * w + xx];
  }
};

TEST(Forward, Conv2dMatchesDirectConvolution) {
  for (const auto& [kernel, stride, padding, bias] :
       {std::tuple{3, 1, Padding::kSame, true}, std::tuple{5, 2, Padding::kSame, false},
        std::tuple{3, 2, Padding::kValid, true}}) {
    GraphBuilder b("conv", {3, 9, 7}, 2);
    const int conv = b.conv2d(b.input(), 20, kernel, stride, padding, "conv", bias);
    const Node node = b.finish(b.dense(conv, 2, "fc")).node(conv);
    GraphBuilder again("conv", {3, 9, 7}, 2);
    const int index = again.conv2d(again.input(), 20, kernel, stride, padding, "conv", bias);
    const auto result = run(again.finish(again.dense(index, 2, "fc")), index, 2);
    const Geometry in{2, 3, 9, 7};
    std::vector<float> expected;
    for (int n = 0; n < 2; ++n) {
      for (int o = 0; o < 20; ++o) {
        for (int y = 0; y < node.output.h; ++y) {
          for (int x = 0; x < node.output.w; ++x) {
            double sum =
                bias ? result.params[node.params[1].offset + static_cast<std::size_t>(o)] : 0.0;
            for (int i = 0; i < 3; ++i) {
              for (int ky = 0; ky < kernel; ++ky) {
                for (int kx = 0; kx < kernel; ++kx) {
                  const int sy = y * stride + ky - node.pad_top,
                            sx = x * stride + kx - node.pad_left;
                  if (sy < 0 || sy >= 9 || sx < 0 || sx >= 7) continue;
                  const std::size_t w_index =
                      node.params[0].offset +
                      ((static_cast<std::size_t>(o) * 3 + i) * kernel + ky) * kernel + kx;
                  sum += result.params[w_index] * in.at(result.input, n, i, sy, sx);
                }
              }
            }
            expected.push_back(static_cast<float>(sum));
          }
        }
      }
    }
    expect_close(result.output, expected, 1e-5, cat("conv k", kernel, " s", stride));
  }
}

TEST(Forward, PoolingMatchesLoops) {
  for (const auto& [max, kernel, stride, padding] :
       {std::tuple{true, 2, 2, Padding::kValid}, std::tuple{true, 2, 2, Padding::kSame},
        std::tuple{true, 3, 2, Padding::kSame}, std::tuple{false, 3, 2, Padding::kSame},
        std::tuple{false, 2, 2, Padding::kValid}}) {
    GraphBuilder b("pool", {4, 5, 7}, 2);
    const int pool = max ? b.max_pool(b.input(), kernel, stride, padding, "pool")
                         : b.avg_pool(b.input(), kernel, stride, padding, "pool");
    const Graph graph = b.finish(b.dense(pool, 2, "fc"));
    const Node node = graph.node(pool);
    const auto result = run(graph, pool, 3);
    const Geometry in{3, 4, 5, 7};
    std::vector<float> expected;
    for (int n = 0; n < 3; ++n) {
      for (int c = 0; c < 4; ++c) {
        for (int y = 0; y < node.output.h; ++y) {
          for (int x = 0; x < node.output.w; ++x) {
            double best = -std::numeric_limits<double>::infinity(), sum = 0;
            int count = 0;
            for (int ky = 0; ky < kernel; ++ky) {
              for (int kx = 0; kx < kernel; ++kx) {
                const int sy = y * stride + ky - node.pad_top, sx = x * stride + kx - node.pad_left;
                if (sy < 0 || sy >= 5 || sx < 0 || sx >= 7) continue;
                const double v = in.at(result.input, n, c, sy, sx);
                best = std::max(best, v);
                sum += v;
                ++count;
              }
            }
            expected.push_back(static_cast<float>(max ? best : sum / count));
          }
        }
      }
    }
    expect_close(result.output, expected, 1e-6, cat(max ? "max" : "avg", " pool k", kernel));
  }
}

TEST(Forward, DenseActivationsAndGlobalPool) {
  GraphBuilder b("mix", {4, 3, 3}, 3);
  const int gap = b.global_avg_pool(b.input(), "gap");
  const int fc = b.dense(gap, 5, "fc");
  const int sig = b.sigmoid(fc);
  const int th = b.tanh(sig);
  const Graph graph = b.finish(b.dense(th, 3, "out"));
  const Node dense = graph.node(fc);
  const auto result = run(graph, th, 2);
  std::vector<float> expected;
  for (int n = 0; n < 2; ++n) {
    std::vector<double> pooled(4, 0.0);
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 9; ++i)
        pooled[static_cast<std::size_t>(c)] +=
            result.input[static_cast<std::size_t>((n * 4 + c) * 9 + i)] / 9.0;
    }
    for (int o = 0; o < 5; ++o) {
      double z = result.params[dense.params[1].offset + static_cast<std::size_t>(o)];
      for (int c = 0; c < 4; ++c)
        z += result.params[dense.params[0].offset + static_cast<std::size_t>(o * 4 + c)] *
             pooled[static_cast<std::size_t>(c)];
      expected.push_back(static_cast<float>(std::tanh(1.0 / (1.0 + std::exp(-z)))));
    }
  }
  expect_close(result.output, expected, 1e-5, "gap-dense-sigmoid-tanh");
}

// With a learned scale and without one (tf_cnn_benchmarks' batch norm: the shift alone).
TEST(Forward, BatchNormTrainingAndInference) {
  for (const bool scale : {true, false}) {
    for (const bool training : {true, false}) {
      GraphBuilder b("bn", {3, 2, 2}, 2);
      const int bn = b.batch_norm(b.input(), "bn", 1e-5, 0.1, scale);
      const Graph graph = b.finish(b.dense(bn, 2, "fc"));
      const Node node = graph.node(bn);
      ASSERT_EQ(node.params.size(), scale ? 2u : 1u);
      EXPECT_EQ(node.params.back().name, "bn.bias");
      const auto result = run(graph, bn, 4, training, /*random_params=*/true);
      const Geometry in{4, 3, 2, 2};
      std::vector<float> expected(result.output.size());
      for (int c = 0; c < 3; ++c) {
        double mean = 0, var = 0;
        if (training) {
          for (int n = 0; n < 4; ++n) {
            for (int i = 0; i < 4; ++i) mean += in.at(result.input, n, c, i / 2, i % 2) / 16.0;
          }
          for (int n = 0; n < 4; ++n) {
            for (int i = 0; i < 4; ++i)
              var += std::pow(in.at(result.input, n, c, i / 2, i % 2) - mean, 2) / 16.0;
          }
        } else {
          mean = result.state[node.state[0].offset + static_cast<std::size_t>(c)];
          var = result.state[node.state[1].offset + static_cast<std::size_t>(c)];
        }
        const double gamma =
            scale ? result.params[node.params[0].offset + static_cast<std::size_t>(c)] : 1.0;
        const double beta = result.params[node.params.back().offset + static_cast<std::size_t>(c)];
        for (int n = 0; n < 4; ++n) {
          for (int i = 0; i < 4; ++i) {
            const std::size_t index = static_cast<std::size_t>(((n * 3 + c) * 4) + i);
            expected[index] = static_cast<float>(
                gamma * (result.input[index] - mean) / std::sqrt(var + 1e-5) + beta);
          }
        }
      }
      expect_close(result.output, expected, 1e-4,
                   cat(training ? "bn training" : "bn inference", scale ? "" : " without scale"));
    }
  }
}

}  // namespace
}  // namespace mbkit::nn
