// The CUDA backend on a GPU, against the CPU backend: the fused optimizer kernels bit for bit
// against the CPU's loops, and tensor copies. Each test skips, saying why, where no GPU is
// visible (or the build has no CUDA); tests/gpu/run-all runs them on a machine with one. The op
// and model suites are test_backend_parity.cpp and test_cuda_models.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/cuda_plugin.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {
namespace {

/// The CUDA backend on GPU 0 straight from the plugin, or why there is none.
std::unique_ptr<nn::Backend> gpu_backend(std::string& why_not) {
  const CudaPluginApi* plugin = cuda_plugin(&why_not);
  if (plugin == nullptr) return nullptr;
  if (plugin->device_count() == 0) {
    why_not = "no CUDA GPU is visible to this process";
    return nullptr;
  }
  return std::unique_ptr<nn::Backend>(plugin->make_backend(0));
}

class CudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why_not;
    gpu_ = gpu_backend(why_not);
    if (!gpu_) GTEST_SKIP() << "CUDA backend not run: " << why_not;
    cpu_ = make_cpu_backend(1);
  }
  std::unique_ptr<nn::Backend> gpu_, cpu_;
};

std::vector<float> random_values(std::size_t count, std::uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (auto& value : values) value = static_cast<float>(scale * rng.normal());
  return values;
}

/// The buffers of one optimizer on one backend.
struct OptimizerBuffers {
  std::unique_ptr<nn::Buffer> params, grads, state0, state1;
  OptimizerBuffers(nn::Backend& backend, const std::vector<float>& p, const std::vector<float>& g,
                   float state0_start) {
    params = backend.make_buffer(p.size());
    grads = backend.make_buffer(p.size());
    state0 = backend.make_buffer(p.size());
    state1 = backend.make_buffer(p.size());
    backend.copy_from_host(p, *params, 0);
    backend.copy_from_host(g, *grads, 0);
    backend.fill(*state0, 0, p.size(), state0_start);
  }
  nn::OptimizerUpdate update(nn::OptimizerUpdate update) const {
    update.count = params->size();
    update.params = params->data();
    update.grads = grads->data();
    update.state = {state0->data(), state1->data()};
    return update;
  }
};

std::vector<float> read(nn::Backend& backend, const nn::Buffer& buffer) {
  std::vector<float> host(buffer.size());
  backend.copy_to_host(buffer, 0, host);
  return host;
}

/// "" when equal bit for bit, else where they first differ and how many differ.
std::string difference(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  std::size_t first = gpu.size(), count = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0) {
      if (count++ == 0) first = i;
    }
  }
  if (count == 0) return "";
  return cat(count, " of ", gpu.size(), " differ, first at ", first, ": gpu ", gpu[first], " cpu ",
             cpu[first]);
}

struct RuleCase {
  std::string name;
  nn::OptimizerUpdate update;  ///< the scalars; pointers and count are filled per backend
  float state0_start = 0;      ///< rmsprop's mean square starts at 1 (TF1)
  bool adam = false;           ///< lr gets the bias corrections of step t
};

std::vector<RuleCase> rule_cases() {
  using Rule = nn::OptimizerUpdate::Rule;
  std::vector<RuleCase> cases;
  for (float decay : {0.0f, 5e-4f}) {
    const std::string suffix = decay == 0.0f ? "" : " with weight decay";
    nn::OptimizerUpdate u;
    u.lr = 0.05f;
    u.weight_decay = decay;
    u.rule = Rule::kSgd;
    cases.push_back({"sgd" + suffix, u});
    u.rule = Rule::kMomentum;
    u.momentum = 0.9f;
    cases.push_back({"momentum" + suffix, u});
    u.rule = Rule::kNesterov;
    cases.push_back({"nesterov" + suffix, u});
    u.rule = Rule::kRmsProp;
    u.momentum = 0.1f;
    u.beta2 = 0.9f;
    u.one_minus_beta2 = static_cast<float>(1.0 - 0.9);
    u.epsilon = 1e-10f;
    cases.push_back({"rmsprop" + suffix, u, 1.0f});
    u.rule = Rule::kAdam;
    u.beta1 = 0.9f;
    u.one_minus_beta1 = static_cast<float>(1.0 - 0.9);
    u.beta2 = 0.999f;
    u.one_minus_beta2 = static_cast<float>(1.0 - 0.999);
    u.epsilon = 1e-8f;
    cases.push_back({"adam" + suffix, u, 0.0f, true});
  }
  return cases;
}

// More than a grid of kMaxBlocks x kThreads elements, so that the grid-stride loop goes round.
constexpr std::size_t kCount = (std::size_t{1} << 24) + 4099;

TEST_F(CudaGpu, FusedOptimizersEqualTheCpuBitForBit) {
  const std::vector<float> p = random_values(kCount, 1, 1.0);
  const std::vector<float> g = random_values(kCount, 2, 0.1);
  for (const RuleCase& test : rule_cases()) {
    SCOPED_TRACE(test.name);
    OptimizerBuffers on_gpu(*gpu_, p, g, test.state0_start), on_cpu(*cpu_, p, g, test.state0_start);
    for (int step = 1; step <= 3; ++step) {
      nn::OptimizerUpdate scalars = test.update;
      if (test.adam) {  // as optim/ folds them: in double, then rounded once
        scalars.lr = static_cast<float>(0.05 * std::sqrt(1.0 - std::pow(0.999, step)) /
                                        (1.0 - std::pow(0.9, step)));
      }
      gpu_->optimizer_step(on_gpu.update(scalars));
      cpu_->optimizer_step(on_cpu.update(scalars));
    }
    EXPECT_EQ(difference(read(*gpu_, *on_gpu.params), read(*cpu_, *on_cpu.params)), "")
        << "parameters";
    EXPECT_EQ(difference(read(*gpu_, *on_gpu.state0), read(*cpu_, *on_cpu.state0)), "")
        << "first state array";
    EXPECT_EQ(difference(read(*gpu_, *on_gpu.state1), read(*cpu_, *on_cpu.state1)), "")
        << "second state array";
  }
}

TEST_F(CudaGpu, TensorsGoThereAndBackAndAccumulate) {
  const nn::Dims dims{3, 5, 7};
  auto empty = gpu_->make_tensor(4, dims);
  auto a = gpu_->make_tensor_like(*empty);
  auto b = gpu_->make_tensor_like(*empty);
  const std::vector<float> x = random_values(4 * dims.size(), 3, 1.0);
  const std::vector<float> y = random_values(4 * dims.size(), 4, 1.0);
  gpu_->write(*a, x.data());
  gpu_->write(*b, y.data());
  gpu_->accumulate(*a, *b);
  std::vector<float> sum(x.size());
  gpu_->read(*a, sum.data());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(sum[i], x[i] + y[i]) << i;
}

TEST_F(CudaGpu, OverlappingCopiesWithinABufferAreMemmoves) {
  auto buffer = gpu_->make_buffer(6);
  gpu_->copy_from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, *buffer, 0);
  gpu_->copy(*buffer, 0, *buffer, 2, 4);  // 1 2 1 2 3 4
  EXPECT_EQ(read(*gpu_, *buffer), (std::vector<float>{1, 2, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace mbkit::backend
