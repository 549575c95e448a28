// No layer of any zoo model runs one of oneDNN's reference implementations ("ref:any") in a
// training step or an evaluation: they are correct but 10 to 1000 times slower than its jit
// kernels, and whether oneDNN offers one depends on the CPU's instruction set and on the memory
// formats asked for (the AVX2 weight-gradient kernel wants channel-blocked sources; SSE4.1 has
// jit backward kernels only through gemm, on plain layouts). The test checks the level this
// process runs at; CI runs the binary again under ONEDNN_MAX_CPU_ISA=AVX2, SSE41, ... to
// emulate older CPUs. A Network builds every primitive when it prepares a batch size, before
// anything runs, so the zoo's models are checked without running them (a step of vgg16 at
// SSE41 takes seconds); that a step then builds nothing more is checked on models that have
// every kind of layer.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::backend {
namespace {

struct Built {
  std::vector<PrimitiveImpl> primitives;
  std::string backend;  ///< its description: oneDNN's version, the ISA level, the threads
};

/// A network of the zoo's `model` on a fresh CPU backend (parameters not initialised).
struct Fixture {
  Fixture(const std::string& model, int threads)
      : usual(test::usual_input(model)),
        backend(make_cpu_backend(threads)),
        net(build(model, usual), *backend) {}
  static nn::Graph build(const std::string& model, const test::UsualInput& usual) {
    models::ModelConfig config;
    config.name = model;
    return models::build_model(config, usual.input, usual.classes);
  }
  Built built() const { return {implementations(*backend), backend->description()}; }

  test::UsualInput usual;
  std::unique_ptr<nn::Backend> backend;
  nn::Network net;
};

/// What a training step at `batch` and evaluations at `batch` and at 1 (the last, short batch
/// of an evaluation) need, built without running anything.
Built built_for_a_step(const std::string& model, int threads, int batch) {
  Fixture fixture(model, threads);
  fixture.net.prepare(batch);
  fixture.net.prepare(1);
  return fixture.built();
}

/// A training step at `batch`, then evaluations at `batch` and at 1, run.
Built built_by_a_step(const std::string& model, int threads, int batch) {
  Fixture fixture(model, threads);
  const test::UsualInput& usual = fixture.usual;
  nn::Network& net = fixture.net;
  net.initialize(1);
  Rng rng(2);
  std::vector<float> images(static_cast<std::size_t>(batch * usual.input.size()));
  for (auto& value : images) value = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(usual.classes));
  }
  net.forward(images.data(), labels.data(), batch, /*training=*/true, 3);
  net.backward(1.0 / batch);
  net.forward(images.data(), labels.data(), batch, /*training=*/false);
  net.forward(images.data(), labels.data(), 1, /*training=*/false);
  return fixture.built();
}

std::set<std::string> listed(const Built& built) {
  std::set<std::string> entries;
  for (const PrimitiveImpl& impl : built.primitives) {
    entries.insert(cat(impl.layer, ": ", impl.primitive, " at ", impl.batch, ", ", impl.impl));
  }
  return entries;
}

class NoReferenceKernels : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(NoReferenceKernels, InATrainingStepAndAnEvaluation) {
  const auto& [model, threads] = GetParam();
  // resnet50 and vgg16 take ImageNet-sized images: a smaller batch keeps the step short.
  const int batch = model == "resnet50" || model == "vgg16" ? 2 : 8;
  const Built built = built_for_a_step(model, threads, batch);
  ASSERT_FALSE(built.primitives.empty()) << model;
  for (const PrimitiveImpl& impl : built.primitives) {
    EXPECT_FALSE(impl.reference) << model << ", layer " << impl.layer << ", " << impl.primitive
                                 << " at batch " << impl.batch << ": oneDNN's " << impl.impl << " ("
                                 << built.backend << ")";
  }
}

std::string test_name(const testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  std::string name = std::get<0>(info.param);
  for (char& c : name) c = c == '-' ? '_' : c;
  return cat(name, "_threads", std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Zoo, NoReferenceKernels,
                         testing::Combine(testing::ValuesIn(models::model_names()),
                                          testing::Values(1, 2)),
                         test_name);

TEST(NoReferenceKernels, AStepBuildsNothingThePreparedNetworkLacks) {
  // Convolutions with and without an input gradient, pooling, batch norm, residual adds, LRN,
  // concatenation, dropout, dense layers and the loss: what the zoo's models are made of.
  for (const char* model : {"mnist-cnn", "resnet8", "alexnet", "densenet40"}) {
    EXPECT_EQ(listed(built_for_a_step(model, 1, 4)), listed(built_by_a_step(model, 1, 4))) << model;
  }
}

TEST(NoReferenceKernels, EveryPrimitiveIsRecordedWithItsLayer) {
  // mnist-cnn: the first convolution needs no input gradient, the second does; every
  // primitive of the step is listed under its layer.
  const Built built = built_by_a_step("mnist-cnn", 1, 4);
  std::set<std::string> seen;
  for (const PrimitiveImpl& impl : built.primitives) {
    EXPECT_FALSE(impl.impl.empty()) << impl.layer << " " << impl.primitive;
    EXPECT_EQ(impl.reference, is_reference_impl(impl.impl));
    EXPECT_TRUE(impl.batch == 4 || impl.batch == 1) << impl.batch;
    seen.insert(cat(impl.layer, ": ", impl.primitive));
  }
  for (const char* expected :
       {"conv1: convolution forward", "conv1: convolution backward weights",
        "conv2: convolution forward", "conv2: convolution backward weights",
        "conv2: convolution backward data", "pool1: pooling forward", "pool1: pooling backward",
        "relu1: relu forward", "relu1: relu backward", "loss: log-softmax"}) {
    EXPECT_TRUE(seen.count(expected)) << expected << " not recorded; recorded: " << [&] {
      std::string all;
      for (const auto& entry : seen) all += entry + "; ";
      return all;
    }();
  }
  EXPECT_FALSE(seen.count("conv1: convolution backward data")) << "the input needs no gradient";
}

TEST(NoReferenceKernels, ReferenceNamesAreRecognised) {
  EXPECT_TRUE(is_reference_impl("ref:any"));
  EXPECT_TRUE(is_reference_impl("ref_fused:any"));
  EXPECT_TRUE(is_reference_impl("bnorm_ref:any"));
  EXPECT_TRUE(is_reference_impl("lrn_ref:any"));
  EXPECT_FALSE(is_reference_impl("simple:any"));
  EXPECT_FALSE(is_reference_impl("jit:uni"));
  EXPECT_FALSE(is_reference_impl("jit:avx2"));
  EXPECT_FALSE(is_reference_impl("x64:gemm:jit"));
  EXPECT_FALSE(is_reference_impl("brg:avx512_core"));
}

}  // namespace
}  // namespace mbkit::backend
