// Finite-difference gradient checks for every layer, through small networks on the CPU backend.
//
// Each case puts the layer under test between a parameterised layer before it (so the check also
// covers the gradient the layer passes back to its input) and a dense read-out with the
// softmax cross-entropy loss. Central differences of the loss in every checked parameter are
// compared with the backward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::nn {
namespace {

struct Case {
  std::string name;
  Dims input;
  int batch = 3;
  std::function<int(GraphBuilder&, int)> body;  ///< adds layers after the pre-layer
};

// Gradient of the mean loss by central differences, compared at up to `samples` entries of
// every parameter.
void check_gradients(const Case& test, double step = 1e-3, double tolerance = 3e-3) {
  auto backend = backend::make_cpu_backend(1);
  GraphBuilder builder("check-" + test.name, test.input, 4);
  int x = test.input.flat() ? builder.dense(builder.input(), test.input.c + 2, "pre")
                            : builder.conv2d(builder.input(), test.input.c + 1, 1, 1, 0, "pre");
  x = test.body(builder, x);
  x = builder.dense(x, 4, "readout");
  Network net(builder.finish(x), *backend);
  net.initialize(7);

  Rng rng(11);
  const auto pixels = static_cast<std::size_t>(test.input.size());
  std::vector<float> images(static_cast<std::size_t>(test.batch) * pixels);
  for (auto& v : images) v = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(static_cast<std::size_t>(test.batch));
  for (auto& label : labels) label = static_cast<std::int32_t>(rng.below(4));

  const double loss_scale = 1.0 / test.batch;
  const std::uint64_t seed = 99;  // dropout masks identical in every evaluation
  net.forward(images.data(), labels.data(), test.batch, true, seed);
  net.backward(loss_scale);
  const std::vector<float> analytic(net.gradients().begin(), net.gradients().end());

  auto loss = [&] {
    return net.forward(images.data(), labels.data(), test.batch, true, seed).loss_sum * loss_scale;
  };
  auto params = net.parameters();
  int checked = 0, kinks = 0;
  for (const auto* spec : net.graph().parameters()) {
    const auto size = static_cast<std::size_t>(spec->size());
    const std::size_t stride = std::max<std::size_t>(1, size / 12);
    for (std::size_t k = 0; k < size; k += stride) {
      const std::size_t index = spec->offset + k;
      const float saved = params[index];
      auto central_difference = [&](double h) {
        params[index] = static_cast<float>(saved + h);
        const double plus = loss();
        params[index] = static_cast<float>(saved - h);
        const double minus = loss();
        params[index] = saved;
        return (plus - minus) / (2 * h);
      };
      const double coarse = central_difference(step);
      const double numeric = central_difference(step / 4);
      const double expected = analytic[index];
      const double scale = tolerance * std::max({1.0, std::fabs(expected), std::fabs(numeric)});
      // Where the two step sizes disagree, a ReLU or max-pool kink lies within the step:
      // the loss is not smooth there and finite differences say nothing (Caffe's kink rule).
      if (std::fabs(coarse - numeric) > scale) {
        ++kinks;
        continue;
      }
      EXPECT_NEAR(expected, numeric, scale) << test.name << ": " << spec->name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10) << test.name;
  EXPECT_LE(kinks, checked / 4) << test.name << ": too many entries at kinks";
}

TEST(Gradients, Dense) {
  check_gradients(
      {"dense", {6, 1, 1}, 4, [](GraphBuilder& b, int x) { return b.dense(x, 5, "fc"); }});
  check_gradients({"dense-no-bias", {6, 1, 1}, 4, [](GraphBuilder& b, int x) {
                     return b.dense(x, 5, "fc", false);
                   }});
}

TEST(Gradients, Conv2d) {
  check_gradients({"conv3x3", {2, 6, 6}, 2, [](GraphBuilder& b, int x) {
                     return b.conv2d(x, 4, 3, 1, 1, "conv");
                   }});
  check_gradients({"conv-stride2-same-no-bias", {2, 7, 7}, 2, [](GraphBuilder& b, int x) {
                     return b.conv2d(x, 5, 3, 2, Padding::kSame, "conv", false);
                   }});
  check_gradients({"conv5x5-valid", {3, 8, 8}, 2, [](GraphBuilder& b, int x) {
                     return b.conv2d(x, 16, 5, 1, Padding::kValid, "conv");
                   }});
  check_gradients({"conv1x1-stride2", {16, 6, 6}, 2, [](GraphBuilder& b, int x) {
                     return b.conv2d(x, 32, 1, 2, 0, "conv", false);
                   }});
}

TEST(Gradients, Pooling) {
  check_gradients({"max-pool", {3, 6, 6}, 2, [](GraphBuilder& b, int x) {
                     return b.max_pool(x, 2, 2, Padding::kValid, "pool");
                   }});
  check_gradients({"max-pool-same-odd", {3, 5, 5}, 2, [](GraphBuilder& b, int x) {
                     return b.max_pool(x, 2, 2, Padding::kSame, "pool");
                   }});
  check_gradients({"max-pool-k3-s1-same", {3, 5, 5}, 2, [](GraphBuilder& b, int x) {
                     return b.max_pool(x, 3, 1, Padding::kSame, "pool");
                   }});
  check_gradients({"max-pool-16-channels", {16, 5, 5}, 2, [](GraphBuilder& b, int x) {
                     return b.max_pool(x, 2, 2, Padding::kSame, "pool");
                   }});
  check_gradients({"avg-pool-same", {3, 5, 5}, 2, [](GraphBuilder& b, int x) {
                     return b.avg_pool(x, 3, 2, Padding::kSame, "pool");
                   }});
  // inception3's branch pooling: 3x3, stride 1, SAME (the border windows divide by fewer).
  check_gradients({"avg-pool-k3-s1-same", {3, 4, 4}, 2, [](GraphBuilder& b, int x) {
                     return b.avg_pool(x, 3, 1, Padding::kSame, "pool");
                   }});
  check_gradients({"global-avg-pool", {16, 4, 4}, 3, [](GraphBuilder& b, int x) {
                     return b.global_avg_pool(x, "gap");
                   }});
}

TEST(Gradients, BatchNorm) {
  check_gradients({"batch-norm-2d", {3, 4, 4}, 4, [](GraphBuilder& b, int x) {
                     return b.batch_norm(x, "bn");
                   }});
  check_gradients({"batch-norm-1d", {5, 1, 1}, 6, [](GraphBuilder& b, int x) {
                     return b.batch_norm(x, "bn");
                   }});
  // tf_cnn_benchmarks' batch norm, a shift without a scale, after a bias-free convolution of
  // 16 channels (oneDNN's blocked layout), then a ReLU, as its inception3 runs it; and flat.
  check_gradients({"batch-norm-2d-no-scale", {3, 4, 4}, 4, [](GraphBuilder& b, int x) {
                     const int conv = b.conv2d(x, 16, 3, 1, Padding::kSame, "conv", false);
                     return b.relu(b.batch_norm(conv, "bn", 1e-3, 1e-3, false));
                   }});
  check_gradients({"batch-norm-1d-no-scale", {5, 1, 1}, 6, [](GraphBuilder& b, int x) {
                     return b.batch_norm(x, "bn", 1e-5, 0.1, false);
                   }});
}

TEST(Gradients, Activations) {
  check_gradients({"relu", {3, 4, 4}, 2, [](GraphBuilder& b, int x) { return b.relu(x); }});
  check_gradients({"sigmoid", {6, 1, 1}, 3, [](GraphBuilder& b, int x) { return b.sigmoid(x); }});
  check_gradients({"tanh", {3, 4, 4}, 2, [](GraphBuilder& b, int x) { return b.tanh(x); }});
}

TEST(Gradients, DropoutFlattenAdd) {
  check_gradients(
      {"dropout", {8, 1, 1}, 4, [](GraphBuilder& b, int x) { return b.dropout(x, 0.4); }});
  check_gradients({"flatten", {3, 4, 4}, 2, [](GraphBuilder& b, int x) { return b.flatten(x); }});
  check_gradients({"residual-add", {16, 4, 4}, 2, [](GraphBuilder& b, int x) {
                     const int branch = b.conv2d(x, 17, 3, 1, 1, "branch");
                     return b.relu(b.add(branch, x, "sum"));
                   }});
  check_gradients({"projection-shortcut", {16, 6, 6}, 2, [](GraphBuilder& b, int x) {
                     const int main = b.batch_norm(b.conv2d(x, 32, 3, 2, 1, "c1", false), "b1");
                     const int shortcut = b.batch_norm(b.conv2d(x, 32, 1, 2, 0, "sc", false), "bs");
                     return b.relu(b.add(main, shortcut, "sum"));
                   }});
}

// Concat's backward hands each input its channel range of the gradient in the input's own
// layout: inputs that start on a channel block (16 + 16 after convolutions: the blocked output
// layout) and inputs that do not (5 + 17 + 3, the network's plain input among them:
// channels-last), each read by two layers so that a wrong range shows in the pre-layer.
TEST(Gradients, Concat) {
  check_gradients({"concat-aligned", {3, 5, 5}, 2, [](GraphBuilder& b, int x) {
                     const int left = b.conv2d(x, 16, 3, 1, 1, "left");
                     const int right = b.conv2d(x, 16, 1, 1, 0, "right");
                     return b.relu(b.concat({left, right}, "cat"));
                   }});
  check_gradients({"concat-misaligned", {3, 4, 4}, 2, [](GraphBuilder& b, int x) {
                     const int wide = b.conv2d(x, 17, 3, 1, 1, "wide");
                     const int narrow = b.conv2d(x, 3, 1, 1, 0, "narrow");
                     return b.tanh(b.concat({x, wide, narrow}, "cat"));
                   }});
  // Densenet's pattern: the block's input beside what it made of it.
  check_gradients({"concat-dense-block", {12, 4, 4}, 2, [](GraphBuilder& b, int x) {
                     const int bn = b.relu(b.batch_norm(x, "bn"));
                     const int grown = b.conv2d(bn, 12, 3, 1, 1, "grow");
                     return b.concat({x, grown}, "cat");
                   }});
}

// TensorFlow's alexnet LRN (depth radius 4: 9 channels) on fewer and more channels than its
// window, and non-square convolution kernels (inception's 1x7 and 7x1, SAME).
TEST(Gradients, LrnAndRectangularKernels) {
  check_gradients({"lrn-9-of-5", {4, 3, 3}, 2, [](GraphBuilder& b, int x) {
                     return b.lrn(x, 9, 0.5, 0.75, 1.0, "lrn");
                   }});
  check_gradients({"lrn-5-of-16", {15, 3, 3}, 2, [](GraphBuilder& b, int x) {
                     return b.lrn(x, 5, 2.0, 0.75, 2.0, "lrn");
                   }});
  check_gradients({"conv1x7-7x1", {3, 7, 8}, 2, [](GraphBuilder& b, int x) {
                     const int wide = b.conv2d(x, 5, 1, 7, 1, Padding::kSame, "wide");
                     return b.conv2d(wide, 4, 7, 1, 2, Padding::kSame, "tall");
                   }});
}

// Two copies of a small network on the same batch: one left as it is, one whose gradient
// buffer a test rearranges (a tail after it, or storage elsewhere).
class GradientBuffer : public ::testing::Test {
 protected:
  static Graph small_graph() {
    GraphBuilder builder("buffer", {3, 2, 2}, 4);
    return builder.finish(builder.dense(builder.flatten(builder.input()), 4, "fc"));
  }
  GradientBuffer() {
    plain.initialize(7);
    changed.initialize(7);
    Rng rng(11);
    for (auto& v : images) v = static_cast<float>(rng.normal());
  }
  void backward(Network& net, bool accumulate = false) {
    net.forward(images.data(), labels.data(), 2, true);
    net.backward(0.5, accumulate);
  }
  // A step of two micro-batches, accumulated, on both networks.
  void accumulate_on_both() {
    for (Network* net : {&plain, &changed}) {
      backward(*net);
      backward(*net, /*accumulate=*/true);
    }
  }
  static std::vector<float> values(std::span<const float> span) {
    return std::vector<float>(span.begin(), span.end());
  }

  std::unique_ptr<Backend> backend = backend::make_cpu_backend(1);
  const Graph graph = small_graph();
  Network plain{graph, *backend}, changed{graph, *backend};
  std::vector<float> images = std::vector<float>(2 * 12);
  const std::vector<std::int32_t> labels = {1, 3};
  const std::size_t count = plain.gradients().size();
};

// A tail reserved after the gradients (the exchange's per-step values) changes neither the
// gradients nor what backward writes, with or without accumulation, and is left alone.
TEST_F(GradientBuffer, TailFollowsTheGradientsAndIsLeftAlone) {
  backward(changed);
  const std::vector<float> before = values(changed.gradients());
  const std::span<float> tail = changed.gradient_tail(5);
  ASSERT_EQ(tail.size(), 5u);
  EXPECT_EQ(changed.gradients().size(), count);
  EXPECT_EQ(tail.data(), changed.gradients().data() + count);  // one allocation, in order
  EXPECT_EQ(values(changed.gradients()), before);
  for (float v : tail) EXPECT_EQ(v, 0.0f);

  std::fill(tail.begin(), tail.end(), 9.0f);
  accumulate_on_both();
  EXPECT_EQ(values(changed.gradients()), values(plain.gradients()));
  for (float v : tail) EXPECT_EQ(v, 9.0f);
}

// Gradients moved to outside storage (a shared-memory exchange's window) take their values
// along, and backward writes there from then on.
TEST_F(GradientBuffer, MovedToOutsideStorageAreWrittenThere) {
  backward(changed);
  const std::vector<float> before = values(changed.gradients());
  changed.gradient_tail(3);
  std::vector<float> storage(count + 3, -1.0f);
  EXPECT_THROW(changed.move_gradients_to(std::span<float>(storage).first(count)), mbkit::Error);
  changed.move_gradients_to(storage);
  EXPECT_EQ(changed.gradients().data(), storage.data());
  EXPECT_EQ(changed.gradient_buffer().size(), storage.size());
  EXPECT_EQ(values(std::span<const float>(storage).first(count)), before);
  EXPECT_THROW(changed.gradient_tail(4), mbkit::Error);  // the storage's size is fixed now
  const std::span<float> tail = changed.gradient_tail(3);
  EXPECT_EQ(tail.data(), storage.data() + count);
  std::fill(tail.begin(), tail.end(), 9.0f);

  accumulate_on_both();
  EXPECT_EQ(values(std::span<const float>(storage).first(count)), values(plain.gradients()));
  for (std::size_t i = count; i < storage.size(); ++i) EXPECT_EQ(storage[i], 9.0f);
}

// The backward pass hands out its gradients from the end as layers finish (a bucketed
// exchange sums them meanwhile): every part it calls final already holds its final values, the
// part only grows, and the last call covers everything.
TEST(GradientsReady, EachPartIsFinalWhenHandedOut) {
  GraphBuilder b("layers", {2, 4, 4}, 3);
  int x = b.relu(b.batch_norm(b.conv2d(b.input(), 4, 3, 1, 1, "c1", true), "bn1"));
  x = b.relu(b.dense(b.flatten(x), 6, "fc1"));
  const Graph graph = b.finish(b.dense(x, 3, "fc2"));
  auto backend = backend::make_cpu_backend(1);
  Network net(graph, *backend);
  net.initialize(3);
  std::vector<float> images(2 * 32);
  Rng rng(5);
  for (auto& v : images) v = static_cast<float>(rng.normal());
  const std::vector<std::int32_t> labels = {0, 2};
  const std::size_t count = net.gradients().size();

  struct Handed {
    std::size_t from;
    std::vector<float> values;
  };
  std::vector<Handed> handed;
  net.forward(images.data(), labels.data(), 2, true);
  std::fill(net.gradients().begin(), net.gradients().end(), std::nanf(""));
  net.backward(0.5, false, [&](std::size_t from) {
    ASSERT_LE(from, count);
    const auto part = net.gradients().subspan(from);
    handed.push_back({from, std::vector<float>(part.begin(), part.end())});
  });
  ASSERT_GE(handed.size(), 4u);  // c1, bn1, fc1, fc2 and the end
  EXPECT_GT(handed.front().from, 0u);
  EXPECT_LT(handed.front().from, count);  // fc2 is final before the rest is computed
  EXPECT_EQ(handed.back().from, 0u);
  const std::vector<float> final_values(net.gradients().begin(), net.gradients().end());
  for (float v : final_values) ASSERT_FALSE(std::isnan(v));
  for (std::size_t k = 0; k < handed.size(); ++k) {
    if (k > 0) {
      EXPECT_LE(handed[k].from, handed[k - 1].from);
    }
    EXPECT_EQ(handed[k].values,
              std::vector<float>(final_values.begin() + static_cast<std::ptrdiff_t>(handed[k].from),
                                 final_values.end()))
        << "part from " << handed[k].from;
  }
  EXPECT_THROW(net.backward(0.5, true, [](std::size_t) {}), mbkit::Error);
}

}  // namespace
}  // namespace mbkit::nn
