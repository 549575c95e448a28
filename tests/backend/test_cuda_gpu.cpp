// The CUDA backend on a GPU, against the CPU backend: the fused optimizer kernels bit for bit
// against the CPU's loops, and tensor copies. Each test skips, saying why, where no GPU is
// visible (or the build has no CUDA); tests/gpu/run-all runs them on a machine with one. The op
// and model suites are test_backend_parity.cpp and test_cuda_models.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/cuda/bf16.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {
namespace {

/// The CUDA backend on GPU 0 straight from the plugin, or why there is none.
std::unique_ptr<nn::Backend> gpu_backend(std::string& why_not) {
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin(&why_not);
  if (plugin == nullptr) return nullptr;
  if (plugin->device_count() == 0) {
    why_not = "no CUDA GPU is visible to this process";
    return nullptr;
  }
  return std::unique_ptr<nn::Backend>(backend::cuda_backend_maker()(0, 0));
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

/// An optimizer (optim/) and the buffers it updates, on one backend.
struct Training {
  std::unique_ptr<nn::Buffer> params, grads;
  std::unique_ptr<optim::Optimizer> optimizer;
  Training(nn::Backend& backend, const optim::OptimizerConfig& config, const std::vector<float>& p,
           const std::vector<float>& g) {
    params = backend.make_buffer(p.size());
    grads = backend.make_buffer(p.size());
    backend.copy_from_host(p, *params, 0);
    backend.copy_from_host(g, *grads, 0);
    optimizer = optim::make_optimizer(config, p.size(), backend);
  }
};

std::vector<optim::OptimizerConfig> configs() {
  std::vector<optim::OptimizerConfig> list;
  for (const double decay : {0.0, 5e-4}) {
    for (const char* name : {"sgd", "momentum", "nesterov", "rmsprop", "adam"}) {
      optim::OptimizerConfig config;
      config.name = name;
      if (config.name == "nesterov") {
        config.name = "momentum";
        config.nesterov = true;
      }
      config.weight_decay = decay;
      config.rmsprop_momentum = 0.1;
      list.push_back(config);
    }
  }
  return list;
}

// More than a grid of kMaxBlocks x kThreads elements, so that the grid-stride loop goes round.
constexpr std::size_t kCount = (std::size_t{1} << 24) + 4099;

TEST_F(CudaGpu, FusedOptimizersEqualTheCpuBitForBit) {
  const std::vector<float> p = random_values(kCount, 1, 1.0);
  const std::vector<float> g = random_values(kCount, 2, 0.1);
  for (const optim::OptimizerConfig& config : configs()) {
    SCOPED_TRACE(cat(config.name, config.nesterov ? " (nesterov)" : "", " weight decay ",
                     config.weight_decay));
    Training on_gpu(*gpu_, config, p, g), on_cpu(*cpu_, config, p, g);
    for (int step = 0; step < 3; ++step) {
      on_gpu.optimizer->step(*on_gpu.params, *on_gpu.grads, 0.05);
      on_cpu.optimizer->step(*on_cpu.params, *on_cpu.grads, 0.05);
    }
    EXPECT_EQ(difference(read(*gpu_, *on_gpu.params), read(*cpu_, *on_cpu.params)), "")
        << "parameters";
    const auto gpu_state = on_gpu.optimizer->state();
    const auto cpu_state = on_cpu.optimizer->state();
    ASSERT_EQ(gpu_state.size(), cpu_state.size());
    for (std::size_t k = 0; k < gpu_state.size(); ++k) {
      EXPECT_EQ(difference(read(*gpu_, *gpu_state[k].second), read(*cpu_, *cpu_state[k].second)),
                "")
          << gpu_state[k].first;
    }
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

TEST_F(CudaGpu, DeviceTimerCountsTheQueuedWorkNotTheHostsWait) {
  // The virtual clock's timer of a GPU: the device time between two events on its stream.
  const auto timer = gpu_->make_device_timer();
  ASSERT_NE(timer, nullptr);
  const auto buffer = gpu_->make_buffer(std::size_t{1} << 26);  // 256 MiB
  timer->start();
  for (int i = 0; i < 20; ++i) gpu_->fill(*buffer, 0, buffer->size(), static_cast<float>(i));
  const double device = timer->seconds();
  // 5 GiB written: about a millisecond or more on any GPU, far less than 10 s.
  EXPECT_GT(device, 1e-4);
  EXPECT_LT(device, 10.0);
  EXPECT_EQ(read(*gpu_, *buffer)[12345], 19.0f);
  timer->start();
  EXPECT_LT(timer->seconds(), device / 10);  // nothing queued in between
}

// --precision bf16's cast kernel against the host's reference (cuda/bf16.hpp, itself tested on
// known bit patterns in test_cuda_host.cpp): every value bit for bit, NaNs as NaNs (the device
// writes its canonical one). Ties both ways, subnormals, overflow, and a long random run through
// the grid-stride loop.
TEST_F(CudaGpu, Bf16CastRoundsAsTheHostReference) {
  std::vector<float> values;
  for (std::uint32_t bits :
       {0x3f800000u, 0x3f807fffu, 0x3f808000u, 0x3f808001u, 0x3f818000u, 0xbf818000u, 0x3fffffffu,
        0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x80000000u, 0x7f7f7fffu, 0x7f7fffffu,
        0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffbfffffu}) {
    values.push_back(std::bit_cast<float>(bits));
  }
  Rng rng(9);
  while (values.size() < kCount) {
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng.below(1ull << 32))));
  }
  const plugin::CudaPluginApi* plugin = plugin::cuda_plugin();
  ASSERT_NE(plugin, nullptr);
  std::vector<std::uint16_t> device(values.size());
  plugin->round_to_bf16(0, values.data(), device.data(), values.size());
  std::size_t wrong = 0, first = values.size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t host = cuda::bf16_bits(values[i]);
    const bool same = cuda::bf16_is_nan(host) ? cuda::bf16_is_nan(device[i]) : device[i] == host;
    if (!same && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << "first: " << std::hex << std::bit_cast<std::uint32_t>(values[first])
                       << " to " << device[first] << " on the GPU, "
                       << cuda::bf16_bits(values[first]) << " on the host";
}

}  // namespace
}  // namespace mbkit::backend
