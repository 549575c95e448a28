// The model zoo: every model against PyTorch (golden/models.h5, written by
// golden/make_model_golden.py, which rebuilds each architecture from torch.nn layers), and
// structural checks that need no reference: parameter counts, shapes, error messages, settings.
//
// Parameters, running statistics and inputs are not stored: both sides compute them from the
// same formulas (double precision, rounded to float32), described in the script's docstring:
//
//   phase(i, t) = 0.37 i + 1e-4 i^2 + 1.3 t + 0.1   (i: index in the tensor, t: its index)
//   parameter tensor t: weights (2+ dimensions)  2 / sqrt(fan_in) sin(phase(i, t))
//                       batch-norm weights       1 + 0.1 sin(phase(i, t))
//                       biases                   0.1 sin(phase(i, t))
//   state array s:      running_mean             0.1 sin(phase(i, s))
//                       running_var              1 + 0.5 |sin(phase(i, s))|
//   images (flat NCHW index k): cos(0.11 k + 3e-5 k^2 + 0.7 seed); label of sample b: b % classes
//
// The seed of a case (attribute input_seed) is the first that keeps every ReLU input and every
// max-pooling window's runner-up at least 8 float32 errors (of PyTorch, on that tensor) from the
// kink, in float64: closer than that, float32 rounding alone decides which side a unit is on,
// any two correct float32 implementations may disagree, and the gradients below a flipped unit
// differ by far more than the tolerances (resnet20 on 32x32 images did, on an AVX2 machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::models {
namespace {

constexpr const char* kGolden = MBKIT_TEST_DATA_DIR "/models/golden/models.h5";
constexpr std::size_t kHead = 8;  ///< gradient entries stored per parameter tensor

double phase(std::size_t index, std::size_t tensor) {
  const auto i = static_cast<double>(index);
  return 0.37 * i + 1e-4 * (i * i) + 1.3 * static_cast<double>(tensor) + 0.1;
}

void fill_parameters(nn::Network& net) {
  const auto specs = net.graph().parameters();
  for (std::size_t t = 0; t < specs.size(); ++t) {
    const nn::ParamSpec& spec = *specs[t];
    auto values = net.parameters().subspan(spec.offset, static_cast<std::size_t>(spec.size()));
    const double weight_scale = 2.0 / std::sqrt(static_cast<double>(spec.fan_in));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double wave = std::sin(phase(i, t));
      double value = 0.1 * wave;  // a bias or a batch-norm shift
      if (spec.shape.size() >= 2) {
        value = weight_scale * wave;
      } else if (ends_with(spec.name, ".weight")) {
        value = 1.0 + 0.1 * wave;  // a batch-norm scale
      }
      values[i] = static_cast<float>(value);
    }
  }
}

void fill_state(nn::Network& net) {
  const auto specs = net.graph().state_arrays();
  for (std::size_t s = 0; s < specs.size(); ++s) {
    const nn::ParamSpec& spec = *specs[s];
    const bool mean = ends_with(spec.name, ".running_mean");
    ASSERT_TRUE(mean || ends_with(spec.name, ".running_var")) << spec.name;
    auto values = net.state().subspan(spec.offset, static_cast<std::size_t>(spec.size()));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double wave = std::sin(phase(i, s));
      values[i] = static_cast<float>(mean ? 0.1 * wave : 1.0 + 0.5 * std::fabs(wave));
    }
  }
}

std::vector<float> input_images(int batch, nn::Dims input, std::int64_t seed) {
  std::vector<float> images(static_cast<std::size_t>(batch * input.size()));
  for (std::size_t k = 0; k < images.size(); ++k) {
    const auto x = static_cast<double>(k);
    images[k] =
        static_cast<float>(std::cos(0.11 * x + 3e-5 * (x * x) + 0.7 * static_cast<double>(seed)));
  }
  return images;
}

// ---------------------------------------------------------------------------------------------
// Reference values.
//
// The reference is PyTorch in float64 on the same float32 parameters and inputs, so what
// differs is the engine's float32 rounding (and any bug). Float32 PyTorch is within 1.3e-6 of it
// on the logits, 2.2e-5 on the gradients, of every model but resnet50 (the generator prints
// these), so the default tolerances leave a wide margin over rounding and none for a wrong
// layer:
//   logits       1e-4 of the largest |logit| (single logits may be near zero)
//   losses       1e-4 relative
//   gradients    each of a tensor's first entries 1e-3 of the tensor's root mean square, its
//                sum 1e-3 of the sum of |entries| (a sum may cancel to near zero), its sum of
//                squares 2e-3 relative: a gradient is a long chain of float32 sums, and an
//                entry far below its tensor's typical size still carries the rounding of the
//                large ones
//   running statistics after the training pass: 1e-4 of max(1, |value|)
// resnet18 and resnet50 are too wide for an input seed to keep their kinks clear (the
// generator records how close they come, attribute kink_clearance, in float32 errors: 0.1 and
// 0.0): their gradients are compared only where no near kink lies between the layer and the
// loss (grad_compared: their fc layers). Which side the others' near units fall on is a
// lottery between float32 implementations (resnet18 at ONEDNN_MAX_CPU_ISA=SSE41: 1.4e-2 of the
// rms on a batch-norm weight).
// resnet50 is ill-conditioned in float32, in PyTorch as much as in mbkit: among its ~1.5 M
// pre-activations (49 ReLUs) a few lie within float32 rounding of zero, their sign differs
// between any two float32 implementations, and the gradient of each flipped unit spreads
// through every layer below (float32 PyTorch is up to 4e-2 of the rms away from float64 on
// the gradients, 9e-5 on the logits, whatever its thread count or kernels). Its tolerances
// catch wrong layers (a torchvision-style stem pool is off by 1 on the logits), not rounding.

struct Tolerance {
  double logits = 1e-4;
  double loss = 1e-4;
  double gradient = 1e-3;
  double gradient_sum = 1e-3;
  double gradient_squares = 2e-3;
  double state = 1e-4;
};

struct ReferenceCase {
  std::string name;  ///< group under /cases
  Tolerance tolerance;
  /// False where the case's gradients are a float32 lottery (printed, not compared).
  bool gradients = true;
};

void PrintTo(const ReferenceCase& test, std::ostream* out) {
  *out << test.name;
}

/// The largest error of one quantity over a case, and where it is: one failure message per
/// quantity, not one per entry.
struct Largest {
  double error = 0;
  std::string where;
  void note(double candidate, const std::function<std::string()>& describe) {
    if (candidate > error || where.empty()) {
      error = candidate;
      where = describe();
    }
  }
};

struct Errors {
  Largest logits, loss, gradient, gradient_sum, gradient_squares, state;
};

void compare_logits(const nn::Network& net, const io::Group& golden, const std::string& dataset,
                    Largest& largest) {
  const auto actual = net.activation(net.graph().logits());
  const auto expected = golden.open_dataset(dataset).read<float>();
  ASSERT_EQ(actual.size(), expected.size()) << dataset;
  double scale = 0;
  for (const float value : expected) scale = std::max(scale, std::fabs(double{value}));
  for (std::size_t i = 0; i < actual.size(); ++i) {
    largest.note(std::fabs(double{actual[i]} - expected[i]) / scale,
                 [&] { return cat(dataset, "[", i, "]: ", actual[i], " vs ", expected[i]); });
  }
}

void compare_loss(double actual, const io::Group& golden, const std::string& dataset,
                  Largest& largest) {
  const double expected = golden.open_dataset(dataset).read<double>().at(0);
  largest.note(std::fabs(actual - expected) / std::fabs(expected),
               [&] { return cat(dataset, ": ", actual, " vs ", expected); });
}

/// The gradient of each parameter tensor: its sum, sum of squares and first entries.
void compare_gradients(const nn::Network& net, const io::Group& golden, Errors& errors) {
  const auto sums = golden.open_dataset("grad_sum").read<double>();
  const auto sums_abs = golden.open_dataset("grad_sum_abs").read<double>();
  const auto sums_squares = golden.open_dataset("grad_sum_squares").read<double>();
  const auto heads = golden.open_dataset("grad_head").read<float>();
  const auto params = net.graph().parameters();
  // Where no input seed keeps the kinks clear (resnet18, resnet50), only the gradients no near
  // kink reaches are compared: those of the layers after the last near kink. Gradients that
  // are 0 in exact arithmetic (densenet40's convolution biases, which batch norm undoes) are
  // rounding noise on both sides and not compared either.
  const auto compared = golden.has("grad_compared")
                            ? golden.open_dataset("grad_compared").read<std::int64_t>()
                            : std::vector<std::int64_t>(params.size(), 1);
  ASSERT_EQ(compared.size(), params.size());
  ASSERT_GT(std::count(compared.begin(), compared.end(), 1), 0);
  ASSERT_EQ(sums.size(), params.size());
  ASSERT_EQ(heads.size(), params.size() * kHead);
  for (std::size_t t = 0; t < params.size(); ++t) {
    if (compared[t] == 0) continue;
    const nn::ParamSpec& spec = *params[t];
    const auto gradient =
        net.gradients().subspan(spec.offset, static_cast<std::size_t>(spec.size()));
    double sum = 0, sum_squares = 0;
    for (const float g : gradient) {
      sum += g;
      sum_squares += double{g} * g;
    }
    errors.gradient_sum.note(std::fabs(sum - sums[t]) / sums_abs[t],
                             [&] { return cat(spec.name, " sum: ", sum, " vs ", sums[t]); });
    errors.gradient_squares.note(std::fabs(sum_squares / sums_squares[t] - 1.0), [&] {
      return cat(spec.name, " sum of squares: ", sum_squares, " vs ", sums_squares[t]);
    });
    const double rms = std::sqrt(sums_squares[t] / static_cast<double>(gradient.size()));
    for (std::size_t i = 0; i < kHead; ++i) {
      const float expected = heads[t * kHead + i];
      errors.gradient.note(std::fabs(double{gradient[i]} - expected) / rms, [&] {
        return cat(spec.name, "[", i, "]: ", gradient[i], " vs ", expected, " (rms ", rms, ")");
      });
    }
  }
}

/// The running statistics after the training pass (PyTorch's update: momentum, unbiased
/// variance).
void compare_state(const nn::Network& net, const io::Group& golden, Largest& largest) {
  const auto arrays = net.graph().state_arrays();
  if (arrays.empty()) return;
  const auto sums = golden.open_dataset("state_after_sum").read<double>();
  const auto heads = golden.open_dataset("state_after_head").read<float>();
  ASSERT_EQ(heads.size(), arrays.size() * kHead);
  for (std::size_t s = 0; s < arrays.size(); ++s) {
    const nn::ParamSpec& spec = *arrays[s];
    const auto values = net.state().subspan(spec.offset, static_cast<std::size_t>(spec.size()));
    double sum = 0, sum_abs = 0;
    for (const float v : values) {
      sum += v;
      sum_abs += std::fabs(v);
    }
    largest.note(std::fabs(sum - sums[s]) / std::max(1.0, sum_abs),
                 [&] { return cat(spec.name, " sum: ", sum, " vs ", sums[s]); });
    for (std::size_t i = 0; i < kHead; ++i) {
      const float expected = heads[s * kHead + i];
      largest.note(std::fabs(double{values[i]} - expected) / std::max(1.0f, std::fabs(expected)),
                   [&] { return cat(spec.name, "[", i, "]: ", values[i], " vs ", expected); });
    }
  }
}

/// The model of a case, after checking that both sides name the same parameters and state
/// arrays, of the same sizes, in the same order.
nn::Graph build_case(const io::Group& golden) {
  const ModelConfig config = ModelConfig::from_map(
      golden.string_attribute("model"), {{"hidden", golden.string_attribute("hidden")},
                                         {"activation", golden.string_attribute("activation")}});
  const auto shape = golden.int_array_attribute("input");
  EXPECT_EQ(shape.size(), 3u);
  nn::Graph graph = build_model(
      config,
      {static_cast<int>(shape.at(0)), static_cast<int>(shape.at(1)), static_cast<int>(shape.at(2))},
      static_cast<int>(golden.int_attribute("classes")));
  const auto params = graph.parameters();
  const auto names = golden.open_dataset("param_names").read_strings();
  const auto sizes = golden.open_dataset("param_sizes").read<std::int64_t>();
  EXPECT_EQ(params.size(), names.size());
  for (std::size_t t = 0; t < std::min(params.size(), names.size()); ++t) {
    EXPECT_EQ(params[t]->name, names[t]) << "parameter " << t;
    EXPECT_EQ(params[t]->size(), sizes.at(t)) << params[t]->name;
  }
  const auto arrays = graph.state_arrays();
  const auto state_names = golden.has("state_names")
                               ? golden.open_dataset("state_names").read_strings()
                               : std::vector<std::string>{};
  EXPECT_EQ(arrays.size(), state_names.size());
  for (std::size_t s = 0; s < std::min(arrays.size(), state_names.size()); ++s) {
    EXPECT_EQ(arrays[s]->name, state_names[s]);
  }
  return graph;
}

class Reference : public testing::TestWithParam<ReferenceCase> {};

TEST_P(Reference, MatchesPyTorch) {
  const ReferenceCase& test = GetParam();
  const auto file = io::File::open(kGolden);
  const auto golden = file.open_group("cases").open_group(test.name);
  auto backend = backend::make_cpu_backend(1);
  nn::Network net(build_case(golden), *backend);
  ASSERT_FALSE(HasFailure()) << "the models differ";
  fill_parameters(net);
  fill_state(net);
  const nn::Dims input = net.graph().input();
  const int classes = net.graph().num_classes();
  const auto batch = static_cast<int>(golden.int_attribute("batch"));
  const auto images = input_images(batch, input, golden.int_attribute("input_seed"));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) labels[static_cast<std::size_t>(b)] = b % classes;
  Errors errors;

  // Evaluation first: the training pass moves the running statistics.
  auto result = net.forward(images.data(), labels.data(), batch, /*training=*/false);
  compare_logits(net, golden, "eval_logits", errors.logits);
  compare_loss(result.loss_sum / batch, golden, "eval_loss", errors.loss);
  const bool training = golden.int_attribute("training") != 0;
  if (training) {
    result = net.forward(images.data(), labels.data(), batch, /*training=*/true, /*seed=*/1);
    compare_logits(net, golden, "train_logits", errors.logits);
    compare_loss(result.loss_sum / batch, golden, "train_loss", errors.loss);
    net.backward(1.0 / batch);
    compare_gradients(net, golden, errors);
    compare_state(net, golden, errors.state);
  }

  const Tolerance& tolerance = test.tolerance;
  EXPECT_LE(errors.logits.error, tolerance.logits) << errors.logits.where;
  EXPECT_LE(errors.loss.error, tolerance.loss) << errors.loss.where;
  // A gradient off by far more than rounding on a conditioned case is a wrong layer, not a unit
  // that float32 put on the other side of its kink: the generator kept them all this far away.
  const std::string conditioning =
      training
          ? cat(" (input seed ", golden.int_attribute("input_seed"),
                ": every ReLU input and "
                "max-pooling runner-up ",
                golden.double_attribute("kink_clearance"), " float32 errors or more from its kink)")
          : std::string{};
  if (test.gradients) {
    EXPECT_LE(errors.gradient.error, tolerance.gradient) << errors.gradient.where << conditioning;
    EXPECT_LE(errors.gradient_sum.error, tolerance.gradient_sum)
        << errors.gradient_sum.where << conditioning;
    EXPECT_LE(errors.gradient_squares.error, tolerance.gradient_squares)
        << errors.gradient_squares.where << conditioning;
  }
  EXPECT_LE(errors.state.error, tolerance.state) << errors.state.where;
  std::printf("%s: largest errors: logits %.1e, loss %.1e", test.name.c_str(), errors.logits.error,
              errors.loss.error);
  if (training) {
    std::printf(", gradient entries %.1e, sums %.1e, sums of squares %.1e", errors.gradient.error,
                errors.gradient_sum.error, errors.gradient_squares.error);
    if (net.graph().state_count() > 0) std::printf(", running statistics %.1e", errors.state.error);
  }
  std::printf("\n");
}

// cifar10-cnn is compared in evaluation mode only: its dropout masks cannot be reproduced in
// PyTorch (tests/nn/test_gradients.cpp checks the training path of every layer). So are vgg16
// (dropout) and inception3, on its smallest input (3x75x75, batch 2): its last modules see 1x1
// maps, where training-mode batch norm normalises 2 values and the gradients turn on their
// difference (densenet40's lottery, below); the finite-difference checks of tests/nn cover its
// batch norm without scale, SAME average pooling and 1x7 kernels, the parity suite too.
const Tolerance kResnet50{.logits = 1e-3,
                          .loss = 1e-3,
                          .gradient = 0.15,
                          .gradient_sum = 1e-2,
                          .gradient_squares = 5e-2,
                          .state = 1e-3};

// densenet40 runs on 4x4 images (on 8x8 no input seed below 200 keeps every ReLU 8 float32
// errors from its kink): its third block sees 1x1 maps of 2 samples, where batch norm divides
// by the difference of two values, and float32 PyTorch is itself 0.14 of the rms from float64
// on gradient entries (5e-3 on sums, 2.7e-2 on sums of squares), ours 0.03 with oneDNN's
// default kernels and 0.26 at ONEDNN_MAX_CPU_ISA=SSE41: which way those divisions round decides
// the gradients, so they are printed, not compared (a better-conditioned case, 8x8 images at
// batch 4, is left to a regeneration of models.h5). Its logits, losses and running statistics
// are compared with resnet50's tolerances; the gradients of each of its layers are checked by
// finite differences (tests/nn: Gradients.Concat, the convolution and batch-norm cases) and
// against another backend by the parity suite.
const Tolerance kDensenet40 = kResnet50;

INSTANTIATE_TEST_SUITE_P(
    Zoo, Reference,
    testing::Values(ReferenceCase{"mlp", {}}, ReferenceCase{"mlp-relu-32-16", {}},
                    ReferenceCase{"mnist-cnn", {}}, ReferenceCase{"cifar10-cnn", {}},
                    ReferenceCase{"toy-fc", {}}, ReferenceCase{"toy-conv", {}},
                    ReferenceCase{"resnet20", {}}, ReferenceCase{"resnet18", {}},
                    ReferenceCase{"resnet50", kResnet50}, ReferenceCase{"alexnet", {}},
                    ReferenceCase{"vgg16", {}}, ReferenceCase{"densenet40", kDensenet40, false},
                    ReferenceCase{"inception3", {}}),
    [](const testing::TestParamInfo<ReferenceCase>& case_info) {
      std::string name = case_info.param.name;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// Layer by layer: every layer's training-mode output (batch statistics) against float64, on
// 256 evenly spread entries of it (golden: layer_sample, at j size / 256). mbkit's float32
// error there, root mean square relative to the layer's largest |float64 entry|, must be
// within 2x of float32 PyTorch's on the same entries (layer_torch32_rms_error, the largest of
// PyTorch's at the machine's level, AVX2 and SSE4.1: its convolutions sum in another order at
// each): no layer of ours may round more coarsely than PyTorch's (oneDNN's batch-norm
// statistics, summed in float, did at AVX2 and SSE4.1: 2.1x). The root mean square, not the
// largest error: on 256 entries the largest of a few ulps is too noisy for a factor of 2 (it is
// printed). Where PyTorch's
// error is exactly 0 (a layer that copies or picks entries), ours may be half an ulp of the
// largest entry: entries rounded on the other side of a tie by a differently ordered exact
// operation.
const std::vector<std::string> kLayerCases = {"mlp", "mnist-cnn", "resnet20"};

class Layers : public testing::TestWithParam<std::string> {};

TEST_P(Layers, RoundNoMoreThanTwicePyTorch) {
  const std::string& name = GetParam();
  const auto file = io::File::open(kGolden);
  const auto golden = file.open_group("cases").open_group(name);
  auto backend = backend::make_cpu_backend(1);
  nn::Network net(build_case(golden), *backend);
  ASSERT_FALSE(HasFailure()) << "the models differ";
  fill_parameters(net);
  fill_state(net);
  const auto batch = static_cast<int>(golden.int_attribute("batch"));
  const auto images = input_images(batch, net.graph().input(), golden.int_attribute("input_seed"));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    labels[static_cast<std::size_t>(b)] = b % net.graph().num_classes();
  }
  net.forward(images.data(), labels.data(), batch, /*training=*/true, /*seed=*/1);

  const auto names = golden.open_dataset("layer_names").read_strings();
  const auto sizes = golden.open_dataset("layer_sizes").read<std::int64_t>();
  const auto scales = golden.open_dataset("layer_scale").read<double>();
  const auto torch32 = golden.open_dataset("layer_torch32_error").read<double>();
  const auto torch32_rms = golden.open_dataset("layer_torch32_rms_error").read<double>();
  const auto samples = golden.open_dataset("layer_sample").read<double>();
  constexpr std::int64_t kSample = 256;
  constexpr double kHalfUlp = 0x1p-24;  // of the largest entry, relative to it
  std::size_t next = 0;                 // in samples
  for (std::size_t layer = 0; layer < names.size(); ++layer) {
    int node = -1;
    for (int i = 0; i < static_cast<int>(net.graph().nodes().size()); ++i) {
      if (net.graph().node(i).name == names[layer]) node = i;
    }
    ASSERT_GE(node, 0) << "no layer " << names[layer];
    const auto actual = net.activation(node);
    ASSERT_EQ(static_cast<std::int64_t>(actual.size()), sizes[layer]) << names[layer];
    const std::int64_t count = std::min(sizes[layer], kSample);
    double largest = 0, squares = 0;
    for (std::int64_t j = 0; j < count; ++j) {
      const auto i = static_cast<std::size_t>(j * sizes[layer] / count);
      const double e = double{actual[i]} - samples.at(next + static_cast<std::size_t>(j));
      largest = std::max(largest, std::fabs(e));
      squares += e * e;
    }
    next += static_cast<std::size_t>(count);
    largest /= scales[layer];
    const double rms = std::sqrt(squares / static_cast<double>(count)) / scales[layer];
    const double bound = torch32_rms[layer] > 0 ? 2 * torch32_rms[layer] : kHalfUlp;
    EXPECT_LE(rms, bound) << names[layer] << ": root mean square error " << rms
                          << ", float32 PyTorch's " << torch32_rms[layer];
    std::printf(
        "%s %-22s rms error: ours %.2e, float32 PyTorch %.2e (%.2fx); largest: %.2e, "
        "%.2e (%.2fx)\n",
        name.c_str(), names[layer].c_str(), rms, torch32_rms[layer],
        torch32_rms[layer] > 0 ? rms / torch32_rms[layer] : 0.0, largest, torch32[layer],
        torch32[layer] > 0 ? largest / torch32[layer] : 0.0);
  }
  EXPECT_EQ(next, samples.size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, Layers, testing::ValuesIn(kLayerCases),
                         [](const testing::TestParamInfo<std::string>& case_info) {
                           std::string name = case_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Layers, EveryCaseWithLayersIsCompared) {
  const auto cases = io::File::open(kGolden).open_group("cases");
  std::vector<std::string> with_layers;
  for (const auto& name : cases.member_names()) {
    if (cases.open_group(name).has("layer_names")) with_layers.push_back(name);
  }
  std::sort(with_layers.begin(), with_layers.end());
  auto expected = kLayerCases;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(with_layers, expected);
}

bool is_cifar_resnet(const std::string& model) {
  return starts_with(model, "resnet") && model != "resnet18" && model != "resnet50";
}

TEST(Reference, CoversEveryModel) {
  const auto cases = io::File::open(kGolden).open_group("cases");
  std::set<std::string> covered;
  for (const auto& name : cases.member_names()) {
    covered.insert(cases.open_group(name).string_attribute("model"));
  }
  // The other CIFAR ResNets repeat resnet20's blocks, densenet100 densenet40's layers (the
  // same builder, 32 dense layers per block instead of 12); their counts are checked below.
  for (const auto& model : model_names()) {
    if ((model != "resnet20" && is_cifar_resnet(model)) || model == "densenet100") continue;
    EXPECT_TRUE(covered.count(model)) << model << " has no reference values";
  }
}

// ---------------------------------------------------------------------------------------------
// Structure.

ModelConfig named(const std::string& name) {
  ModelConfig config;
  config.name = name;
  return config;
}

std::size_t count_of(const std::string& model, nn::Dims input, int classes) {
  return build_model(named(model), input, classes).parameter_count();
}

TEST(Zoo, ParameterCountsOnTheUsualInputs) {
  EXPECT_EQ(count_of("mlp", {1, 28, 28}, 10), 203'530u);  // 784*256+256 + 256*10+10
  EXPECT_EQ(count_of("mnist-cnn", {1, 28, 28}, 10), 3'274'634u);
  EXPECT_EQ(count_of("cifar10-cnn", {3, 32, 32}, 10), 4'607'178u);
  EXPECT_EQ(count_of("resnet20", {3, 32, 32}, 10), 272'474u);
  // 100-500-1000-500-10, each with biases.
  EXPECT_EQ(count_of("toy-fc", {1, 10, 10}, 10),
            100u * 500 + 500 + 500u * 1000 + 1000 + 1000u * 500 + 500 + 500u * 10 + 10);
  // 5x5x1x32 and 5x5x32x64 convolutions with biases; 10 -> 5 -> 3 pixels after the two SAME
  // poolings, so 64 * 3 * 3 = 576 features into the classifier.
  EXPECT_EQ(count_of("toy-conv", {1, 10, 10}, 10),
            25u * 32 + 32 + 25u * 32 * 64 + 64 + 576u * 10 + 10);
}

TEST(Zoo, ParameterCountsMatchPyTorch) {
  const auto counts = io::File::open(kGolden).open_group("parameter_counts");
  std::set<std::string> checked;
  for (const auto& model : counts.member_names()) {
    const auto entry = counts.open_group(model);
    const auto shape = entry.int_array_attribute("input");
    const nn::Dims input{static_cast<int>(shape.at(0)), static_cast<int>(shape.at(1)),
                         static_cast<int>(shape.at(2))};
    const auto classes = static_cast<int>(entry.int_attribute("classes"));
    EXPECT_EQ(count_of(model, input, classes),
              static_cast<std::size_t>(entry.int_attribute("count")))
        << model << " on " << input.text() << ", " << classes << " classes";
    checked.insert(model);
  }
  // The CIFAR ResNets PyTorch did not count are checked against the formula below, which
  // the counted ones anchor.
  for (const auto& model : model_names()) {
    EXPECT_TRUE(checked.count(model) || is_cifar_resnet(model)) << model;
  }
}

// Counted by hand, layer by layer (conv weights, batch-norm weight and bias, fc): stem 464;
// stage 1 4,672 per block; stage 2 14,528 for its first block (projection), 18,560 for each
// other; stage 3 57,728 and 73,984; fc 65 per class. So 97,216 n - 19,824 + 65 classes.
TEST(Zoo, CifarResnetsOfAnyDepth) {
  for (int n = 1; n <= 20; ++n) {
    if (n == 8) continue;  // resnet50 is the ImageNet ResNet-50
    const std::string model = cat("resnet", 6 * n + 2);
    for (const int classes : {10, 100}) {
      EXPECT_EQ(count_of(model, {3, 32, 32}, classes),
                static_cast<std::size_t>(97'216 * n - 19'824 + 65 * classes))
          << model << ", " << classes << " classes";
    }
  }
  EXPECT_EQ(count_of("resnet8", {3, 32, 32}, 10), 78'042u);
  EXPECT_EQ(count_of("resnet110", {3, 32, 32}, 10), 1'730'714u);
  // resnet20 is built as resnet<6n+2> with n = 3 (its PyTorch reference values above pin it).
  EXPECT_EQ(build_model(named("resnet26"), {3, 32, 32}, 10).model(), "resnet26");
  for (const char* bad : {"resnet21", "resnet2", "resnet08", "resnet", "resnet-20", "resnet20x"}) {
    EXPECT_MBKIT_ERROR(build_model(named(bad), {3, 32, 32}, 10), ExitCode::kUsage,
                       cat("unknown model '", bad, "'"));
  }
}

// tf_cnn_benchmarks' models, counted by hand layer by layer (weights + biases):
//   alexnet, CIFAR (3x32x32): conv1 5*5*3*64 + 64 = 4,864; conv2 5*5*64*64 + 64 = 102,464;
//     two SAME 3/2 pools leave 8x8x64 = 4,096 features; fc1 4,096*384 + 384 = 1,573,248;
//     fc2 384*192 + 192 = 73,920; fc3 193 per class: 1,754,496 + 193 classes.
//   alexnet, ImageNet (3x227x227): conv1 11*11*3*64 + 64 = 23,296; conv2 5*5*64*192 + 192 =
//     307,392; conv3 3*3*192*384 + 384 = 663,936; conv4 1,327,488; conv5 884,992; 227 -> 55 ->
//     27 -> 13 -> 6, so fc1 reads 256*6*6 = 9,216: 37,752,832; fc2 16,781,312; fc3 4,097 per
//     class: 57,741,248 + 4,097 classes.
//   vgg16 (3x224x224): 13 convolutions 14,714,688; fc1 25,088*4,096 + 4,096 = 102,764,544;
//     fc2 16,781,312; fc3 4,097 per class: 134,260,544 + 4,097 classes (torchvision's VGG-16:
//     138,357,544 on 1000 classes).
//   densenet40 (L = 12 dense layers per block, k = 12): stem 3*3*3*16 + 16 = 448; a dense
//     layer on c channels has batch norm 2c and a conv 9*12c + 12, 110c + 12 in all; c runs
//     16 .. 148 in block 1, 24 .. 156 in blocks 2 and 3 (the transitions give 2k = 24): the
//     dense layers sum to 346,272; the transitions (batch norm 2c, conv 24c + 24) on c = 160
//     and 168: 4,184 and 4,392; final batch norm on 168: 336; fc 169 per class:
//     355,632 + 169 classes.
//   inception3 (3x299x299; any input from 75x75 has the same count): each convolution has no
//     bias but a batch norm with a shift and no scale, kh*kw*in*out + out; stem 172,272;
//     mixed0 .. mixed2 (incept_v3_a, pool branch 32, 64, 64) 255,440, 276,976, 284,656;
//     mixed3 1,152,640; mixed4 .. mixed7 (incept_v3_c, n = 128, 160, 160, 192) 1,295,872,
//     1,689,280 twice, 2,140,032; mixed8 1,697,024; mixed9, mixed10 5,041,344 and 6,073,536
//     (their 'share' columns reuse layers, which are counted once); fc 2,049 per class:
//     21,768,352 + 2,049 classes, and 34,432 running statistics (17,216 channels). On 1000
//     classes that is 23,817,352, the trainable count Keras prints for its InceptionV3 (the
//     same layers, batch norm without scale, 34,432 non-trainable): tf_cnn_benchmarks'
//     ImageNet model has 1001 outputs, so TensorFlow counts 23,819,401 trainable variables and
//     23,853,834 in all (with the moving statistics and global_step).
// The seed's table (tf_cnn_benchmarks on CIFAR-10, TensorFlow 1.3) lists what TensorFlow
// counts: every variable of the graph, i.e. the trainable ones, batch norm's moving mean and
// variance (our state arrays) and global_step (1), on num_classes + 1 = 11 outputs (its
// models keep a class 0 for ImageNet's background): alexnet 1,756,620, densenet40_k12
// 364,772, densenet100_k12 2,259,652.
TEST(Zoo, TfCnnBenchmarksModelsHaveItsParameterCounts) {
  for (const int classes : {10, 11, 100}) {
    EXPECT_EQ(count_of("alexnet", {3, 32, 32}, classes), 1'754'496u + 193u * classes);
    EXPECT_EQ(count_of("alexnet", {3, 227, 227}, classes), 57'741'248u + 4'097u * classes);
    EXPECT_EQ(count_of("densenet40", {3, 32, 32}, classes), 355'632u + 169u * classes);
  }
  EXPECT_EQ(count_of("vgg16", {3, 224, 224}, 1000), 138'357'544u);
  EXPECT_EQ(count_of("vgg16", {3, 224, 224}, 10), 134'260'544u + 4'097u * 10);
  auto tensorflow_count = [](const std::string& model) {
    const nn::Graph graph = build_model(named(model), {3, 32, 32}, 11);
    return graph.parameter_count() + graph.state_count() + 1;
  };
  EXPECT_EQ(tensorflow_count("alexnet"), 1'756'620u);
  EXPECT_EQ(tensorflow_count("densenet40"), 364'772u);
  EXPECT_EQ(tensorflow_count("densenet100"), 2'259'652u);
  for (const int classes : {10, 1000, 1001}) {
    const nn::Graph graph = build_model(named("inception3"), {3, 299, 299}, classes);
    EXPECT_EQ(graph.parameter_count(), 21'768'352u + 2'049u * classes) << classes << " classes";
    EXPECT_EQ(graph.state_count(), 34'432u);
  }
  EXPECT_EQ(count_of("inception3", {3, 75, 75}, 1000), 23'817'352u);
  const nn::Graph imagenet = build_model(named("inception3"), {3, 299, 299}, 1001);
  EXPECT_EQ(imagenet.parameter_count() + imagenet.state_count() + 1, 23'853'834u);
}

// tf_cnn_benchmarks' inception3 at its size: the shapes its comments give (35x35x256 after
// mixed0, 17x17x768 after mixed3, 8x8x2048 after mixed10), no convolution bias, and batch
// norm without a scale (only "<layer>.bn.bias" among its parameters).
TEST(Zoo, Inception3IsTfCnnBenchmarksModel) {
  const nn::Graph graph = build_model(named("inception3"), {3, 299, 299}, 1001);
  std::map<std::string, nn::Dims> shapes;
  int convolutions = 0, batch_norms = 0;
  for (const nn::Node& node : graph.nodes()) {
    shapes[node.name] = node.output;
    if (node.op == nn::Op::kConv2d) {
      ++convolutions;
      EXPECT_FALSE(node.bias) << node.name;
    }
    if (node.op == nn::Op::kBatchNorm) {
      ++batch_norms;
      EXPECT_FALSE(node.scale) << node.name;
      ASSERT_EQ(node.params.size(), 1u) << node.name;
      EXPECT_TRUE(ends_with(node.params[0].name, ".bn.bias")) << node.name;
      EXPECT_DOUBLE_EQ(node.epsilon, 1e-3);
      EXPECT_DOUBLE_EQ(node.momentum, 1e-3);  // TensorFlow's decay 0.999
    }
  }
  EXPECT_EQ(convolutions, 94);
  EXPECT_EQ(batch_norms, 94);
  EXPECT_EQ(shapes.at("pool2"), (nn::Dims{192, 35, 35}));
  EXPECT_EQ(shapes.at("mixed0"), (nn::Dims{256, 35, 35}));
  EXPECT_EQ(shapes.at("mixed2"), (nn::Dims{288, 35, 35}));
  EXPECT_EQ(shapes.at("mixed3"), (nn::Dims{768, 17, 17}));
  EXPECT_EQ(shapes.at("mixed7"), (nn::Dims{768, 17, 17}));
  EXPECT_EQ(shapes.at("mixed8"), (nn::Dims{1280, 8, 8}));
  EXPECT_EQ(shapes.at("mixed10"), (nn::Dims{2048, 8, 8}));
  EXPECT_EQ(graph.node(graph.logits()).output, (nn::Dims{1001, 1, 1}));
  // Its last module pools with a max, the one before with an average.
  std::map<std::string, nn::Op> ops;
  for (const nn::Node& node : graph.nodes()) ops[node.name] = node.op;
  EXPECT_EQ(ops.at("mixed9.b6.pool"), nn::Op::kAvgPool);
  EXPECT_EQ(ops.at("mixed10.b6.pool"), nn::Op::kMaxPool);
}

// tf_cnn_benchmarks picks alexnet's variant by dataset (cifar10 or imagenet); mbkit by the
// images' size: the CIFAR-10 model up to 32x32, else the ImageNet one.
TEST(Zoo, AlexnetVariantFollowsTheInput) {
  auto has_lrn = [](const nn::Graph& graph) {
    return std::any_of(graph.nodes().begin(), graph.nodes().end(),
                       [](const nn::Node& node) { return node.op == nn::Op::kLrn; });
  };
  EXPECT_TRUE(has_lrn(build_model(named("alexnet"), {3, 32, 32}, 10)));
  EXPECT_TRUE(has_lrn(build_model(named("alexnet"), {1, 28, 28}, 10)));
  const nn::Graph imagenet = build_model(named("alexnet"), {3, 224, 224}, 1000);
  EXPECT_FALSE(has_lrn(imagenet));
  EXPECT_EQ(imagenet.node(1).kernel_h, 11);
  // Its initialisers: conv2 and the hidden dense layers start with biases of 0.1, conv1's 0.
  const nn::Graph cifar = build_model(named("alexnet"), {3, 32, 32}, 10);
  std::vector<float> params(cifar.parameter_count()), state(cifar.state_count());
  cifar.initialize(params, state, 1);
  for (const auto* spec : cifar.parameters()) {
    if (!ends_with(spec->name, ".bias")) continue;
    const float expected = spec->name == "conv1.bias" || spec->name == "fc3.bias" ? 0.0f : 0.1f;
    EXPECT_EQ(params[spec->offset], expected) << spec->name;
    EXPECT_EQ(params[spec->offset + static_cast<std::size_t>(spec->size()) - 1], expected)
        << spec->name;
  }
}

TEST(Zoo, EveryModelBuildsAConsistentGraph) {
  for (const auto& model : model_names()) {
    const test::UsualInput usual = test::usual_input(model);
    const nn::Graph graph = build_model(named(model), usual.input, usual.classes);
    EXPECT_EQ(graph.model(), model);
    EXPECT_EQ(graph.input(), usual.input);
    EXPECT_EQ(graph.node(graph.logits()).output, (nn::Dims{usual.classes, 1, 1})) << model;
    EXPECT_EQ(graph.node(graph.loss()).op, nn::Op::kSoftmaxCrossEntropy) << model;
    // Parameters tile the flat buffer in graph order, under unique names, in PyTorch's layouts.
    std::size_t offset = 0;
    std::set<std::string> names;
    for (const auto* spec : graph.parameters()) {
      EXPECT_EQ(spec->offset, offset) << model << ": " << spec->name;
      offset += static_cast<std::size_t>(spec->size());
      EXPECT_TRUE(names.insert(spec->name).second) << model << ": two " << spec->name;
      EXPECT_TRUE(ends_with(spec->name, ".weight") || ends_with(spec->name, ".bias")) << spec->name;
      EXPECT_TRUE(spec->shape.size() == 1 || spec->shape.size() == 2 || spec->shape.size() == 4)
          << spec->name;
    }
    EXPECT_EQ(offset, graph.parameter_count()) << model;
    std::size_t state = 0;
    for (const auto* spec : graph.state_arrays()) {
      EXPECT_EQ(spec->offset, state) << model << ": " << spec->name;
      state += static_cast<std::size_t>(spec->size());
    }
    EXPECT_EQ(state, graph.state_count()) << model;
  }
}

TEST(Zoo, ModelsTooDeepForTheirInputSaySo) {
  // Padding always makes room, but a layer that downsamples needs at least stride x stride
  // pixels: a model deeper than its images are large is refused, naming model and layer.
  EXPECT_MBKIT_ERROR(build_model(named("mnist-cnn"), {1, 2, 2}, 10), ExitCode::kUsage,
                     "model mnist-cnn cannot take 1x2x2 inputs: pool2 needs at least 2x2 pixels "
                     "to downsample, got 1x1");
  EXPECT_MBKIT_ERROR(build_model(named("resnet50"), {3, 8, 8}, 10), ExitCode::kUsage,
                     "model resnet50 cannot take 3x8x8 inputs: stage3.0");
  EXPECT_MBKIT_ERROR(build_model(named("cifar10-cnn"), {3, 8, 8}, 10), ExitCode::kUsage,
                     "model cifar10-cnn cannot take 3x8x8 inputs: pool4");
  // Models without downsampling take anything; the others take what is deep enough.
  for (const nn::Dims input : {nn::Dims{1, 1, 1}, nn::Dims{3, 1, 1}}) {
    for (const char* model : {"mlp", "toy-fc"}) {
      const nn::Graph graph = build_model(named(model), input, 10);
      EXPECT_EQ(graph.node(graph.logits()).output, (nn::Dims{10, 1, 1})) << model;
    }
  }
  EXPECT_MBKIT_ERROR(build_model(named("alexnet"), {3, 64, 64}, 10), ExitCode::kUsage,
                     "model alexnet cannot take 3x64x64 inputs: pool3 needs at least 3x3 pixels, "
                     "got 2x2");
  EXPECT_MBKIT_ERROR(build_model(named("vgg16"), {3, 16, 16}, 10), ExitCode::kUsage,
                     "model vgg16 cannot take 3x16x16 inputs: pool5 needs at least 2x2 pixels to "
                     "downsample, got 1x1");
  EXPECT_MBKIT_ERROR(build_model(named("densenet40"), {3, 2, 2}, 10), ExitCode::kUsage,
                     "model densenet40 cannot take 3x2x2 inputs: transition2.pool needs at least "
                     "2x2 pixels to downsample, got 1x1");
  // inception3's VALID stem and reductions need 75x75 (75 -> 37 -> 35 -> 17 -> 15 -> 7 -> 3 -> 1):
  // one line saying so, for either side too small.
  for (const nn::Dims input : {nn::Dims{3, 74, 74}, nn::Dims{3, 75, 74}, nn::Dims{3, 74, 299}}) {
    EXPECT_MBKIT_ERROR(build_model(named("inception3"), input, 10), ExitCode::kUsage,
                       "model inception3 cannot take " + input.text() +
                           " inputs: it needs at least 75x75 pixels (its ImageNet size is "
                           "299x299)");
  }
  const nn::Graph inception3 = build_model(named("inception3"), {3, 75, 75}, 10);
  EXPECT_EQ(inception3.node(inception3.logits() - 2).output, (nn::Dims{2048, 1, 1}));
  const nn::Graph resnet50 = build_model(named("resnet50"), {3, 32, 32}, 10);
  EXPECT_EQ(resnet50.node(resnet50.logits() - 2).output, (nn::Dims{2048, 1, 1}));
}

TEST(Zoo, InputsAModelCannotTakeNameTheModel) {
  EXPECT_MBKIT_ERROR(build_model(named("mnist-cnn"), {0, 28, 28}, 10), ExitCode::kUsage,
                     "model mnist-cnn: invalid input shape 0x28x28");
  EXPECT_MBKIT_ERROR(build_model(named("resnet50"), {3, 0, 224}, 10), ExitCode::kUsage,
                     "model resnet50: invalid input shape 3x0x224");
  EXPECT_MBKIT_ERROR(build_model(named("resnet20"), {3, 32, 32}, 1), ExitCode::kUsage,
                     "model resnet20: needs at least 2 classes");
  // The layer that cannot take its input is named with the model and the input shape.
  nn::GraphBuilder builder("tiny-net", {1, 3, 3}, 2);
  EXPECT_MBKIT_ERROR(builder.max_pool(builder.input(), 4, 4, nn::Padding::kValid, "pool1"),
                     ExitCode::kUsage,
                     "model tiny-net cannot take 1x3x3 inputs: pool1 needs at least 4x4 pixels");
}

TEST(Zoo, UnknownModelListsTheKnownOnes) {
  EXPECT_MBKIT_ERROR(
      build_model(named("vgg19"), {3, 32, 32}, 10), ExitCode::kUsage,
      "--model: unknown model 'vgg19' (known: " + known_models() + ", or any CIFAR resnet<6n+2>)");
  for (const auto& model : model_names()) {
    EXPECT_NE(known_models().find(model), std::string::npos) << model;
  }
  EXPECT_EQ(model_names().front(), "mlp");
  EXPECT_EQ(model_names().size(), 21u);
}

TEST(Zoo, MlpSettings) {
  ModelConfig config;
  config.hidden = {32, 16};
  config.activation = "relu";
  const nn::Graph graph = build_model(config, {1, 28, 28}, 10);
  EXPECT_EQ(graph.parameter_count(), 784u * 32 + 32 + 32u * 16 + 16 + 16u * 10 + 10);
  config.hidden = {};  // no hidden layer: logistic regression
  EXPECT_EQ(build_model(config, {1, 28, 28}, 10).parameter_count(), 7850u);

  config.hidden = {0};
  EXPECT_MBKIT_ERROR(build_model(config, {1, 28, 28}, 10), ExitCode::kUsage,
                     "--hidden: layer sizes must be positive");
  config.hidden = {8};
  config.activation = "gelu";
  EXPECT_MBKIT_ERROR(build_model(config, {1, 28, 28}, 10), ExitCode::kUsage,
                     "unknown activation 'gelu' (known: relu, sigmoid, tanh)");
}

TEST(ModelConfig, RoundTripsThroughItsMap) {
  for (const auto& [hidden, activation] :
       {std::pair{std::vector<int>{256}, "sigmoid"}, std::pair{std::vector<int>{32, 16}, "relu"},
        std::pair{std::vector<int>{}, "tanh"}}) {
    ModelConfig config;
    config.hidden = hidden;
    config.activation = activation;
    const auto map = config.to_map();
    const ModelConfig back = ModelConfig::from_map("mlp", map);
    EXPECT_EQ(back.name, "mlp");
    EXPECT_EQ(back.hidden, hidden);
    EXPECT_EQ(back.activation, activation);
    EXPECT_EQ(back.to_map(), map);
  }
  EXPECT_EQ((ModelConfig{.name = "mlp", .hidden = {32, 16}, .activation = "relu"}.to_map()),
            (std::map<std::string, std::string>{{"hidden", "32,16"}, {"activation", "relu"}}));
  // Models without settings have an empty map and come back by name alone.
  EXPECT_TRUE(named("resnet20").to_map().empty());
  EXPECT_EQ(ModelConfig::from_map("resnet20", {}).name, "resnet20");
}

TEST(ModelConfig, BadMapsAreDataErrors) {
  EXPECT_MBKIT_ERROR(ModelConfig::from_map("mlp", {{"hidden", "32,x"}}), ExitCode::kBadData,
                     "model configuration of mlp");
}

}  // namespace
}  // namespace mbkit::models
