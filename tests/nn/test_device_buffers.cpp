// The flat buffers on a backend whose memory the host cannot read: the fake device
// (tests/common/fake_device) trains the mlp for a few steps, as allreduce workers (gradients
// summed on the host and written back) and as ps workers with a server updating two shards, and
// must give the CPU backend's bits, copying exactly the bytes each scheme needs. On the CPU a
// training step copies nothing. A Network on the fake device refuses host spans, so every host
// access on these paths goes through a HostView or a counted copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "mbkit/backend/cpu.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::nn {
namespace {

constexpr int kBatch = 6;
const Dims kInput{1, 4, 4};
constexpr int kClasses = 3;

std::unique_ptr<Backend> make(const std::string& kind) {
  return kind == "cpu" ? backend::make_cpu_backend(1) : test::make_fake_device_backend(1);
}

std::unique_ptr<Network> mlp(Backend& backend) {
  models::ModelConfig config;
  config.name = "mlp";
  config.hidden = {7};
  auto net = std::make_unique<Network>(models::build_model(config, kInput, kClasses), backend);
  net->initialize(5);
  return net;
}

struct Batch {
  std::vector<float> images;
  std::vector<std::int32_t> labels;
};

Batch batch_for(std::uint64_t worker, std::uint64_t step) {
  Rng rng(17 + worker, step);
  Batch batch;
  batch.images.resize(static_cast<std::size_t>(kBatch * kInput.size()));
  for (auto& v : batch.images) v = static_cast<float>(rng.normal());
  for (int i = 0; i < kBatch; ++i) batch.labels.push_back(static_cast<std::int32_t>(rng.below(3)));
  return batch;
}

/// A worker's gradients of its batch, worker 1 in two micro-batches (summed in the backend).
void compute(Network& net, std::uint64_t worker, std::uint64_t step) {
  const Batch batch = batch_for(worker, step);
  if (worker == 1) {
    const int half = kBatch / 2;
    const auto pixels = static_cast<std::size_t>(kInput.size());
    net.forward(batch.images.data(), batch.labels.data(), half, true, step);
    net.backward(1.0 / kBatch);
    net.forward(batch.images.data() + half * pixels, batch.labels.data() + half, half, true, step);
    net.backward(1.0 / kBatch, /*accumulate=*/true);
  } else {
    net.forward(batch.images.data(), batch.labels.data(), kBatch, true, step);
    net.backward(1.0 / kBatch);
  }
}

std::vector<float> read(Backend& backend, const Buffer& buffer, std::size_t count) {
  std::vector<float> values(count);
  backend.copy_to_host(buffer, 0, values);
  return values;
}

optim::OptimizerConfig config_for(const std::string& name) {
  optim::OptimizerConfig config;
  config.name = name == "nesterov" ? "momentum" : name;
  config.nesterov = name == "nesterov";
  config.weight_decay = 0.01;
  return config;
}

struct Outcome {
  std::vector<std::vector<float>> parameters;  ///< per network at the end
  std::vector<CopyCounts> step_copies;         ///< bytes each step moved
};

// Allreduce-like: two workers, gradients summed on the host in worker order and written back,
// each worker updating its own copy.
Outcome allreduce(const std::string& kind, const std::string& optimizer, int steps) {
  auto backend = make(kind);
  std::vector<std::unique_ptr<Network>> workers;
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(mlp(*backend));
    optimizers.push_back(
        optim::make_optimizer(config_for(optimizer), workers[0]->parameter_count(), *backend));
  }
  const std::size_t n = workers[0]->parameter_count();
  Outcome outcome;
  for (int step = 0; step < steps; ++step) {
    const CopyCounts before = backend->copied();
    std::vector<float> sum(n, 0.0f);
    for (std::uint64_t w = 0; w < 2; ++w) {
      compute(*workers[w], w, static_cast<std::uint64_t>(step));
      const HostView gradients = workers[w]->host_gradients();
      for (std::size_t i = 0; i < n; ++i) sum[i] += gradients.values()[i];
    }
    for (std::size_t w = 0; w < 2; ++w) {
      HostView gradients = workers[w]->host_gradients();
      std::copy(sum.begin(), sum.end(), gradients.values().begin());
      gradients.write_back();
      optimizers[w]->step(workers[w]->parameter_buffer(), workers[w]->gradient_buffer(), 0.05);
    }
    outcome.step_copies.push_back(backend->copied() - before);
  }
  for (auto& net : workers)
    outcome.parameters.push_back(read(*backend, net->parameter_buffer(), n));
  return outcome;
}

// Parameter-server-like: the workers' gradients go to the host, are summed into the server's
// gradient buffer, two optimizers update its two shards, and the parameters go back.
Outcome parameter_server(const std::string& kind, const std::string& optimizer, int steps) {
  auto backend = make(kind);
  auto server = mlp(*backend);
  std::vector<std::unique_ptr<Network>> workers;
  for (int w = 0; w < 2; ++w) workers.push_back(mlp(*backend));
  const std::size_t n = server->parameter_count();
  const std::size_t half = n / 2;
  auto first = optim::make_optimizer(config_for(optimizer), half, *backend);
  auto second = optim::make_optimizer(config_for(optimizer), n - half, *backend);
  Outcome outcome;
  for (int step = 0; step < steps; ++step) {
    const CopyCounts before = backend->copied();
    std::vector<float> sum(n, 0.0f);
    for (std::uint64_t w = 0; w < 2; ++w) {
      compute(*workers[w], w, static_cast<std::uint64_t>(step));
      std::vector<float> gradients(n);  // as received over MPI
      backend->copy_to_host(workers[w]->gradient_buffer(), 0, gradients);
      for (std::size_t i = 0; i < n; ++i) sum[i] += gradients[i];
    }
    backend->copy_from_host(sum, server->gradient_buffer(), 0);
    first->step(server->parameter_buffer(), server->gradient_buffer(), 0.05);
    second->step(server->parameter_buffer(), server->gradient_buffer(), 0.05, half);
    const HostView parameters = server->host_parameters();
    for (auto& worker : workers)
      backend->copy_from_host(parameters.values(), worker->parameter_buffer(), 0);
    outcome.step_copies.push_back(backend->copied() - before);
  }
  outcome.parameters.push_back(read(*backend, server->parameter_buffer(), n));
  for (auto& net : workers)
    outcome.parameters.push_back(read(*backend, net->parameter_buffer(), n));
  return outcome;
}

class DeviceBuffers : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceBuffers, AllreduceOnTheDeviceGivesTheCpuBitsCopyingOnlyTheGradients) {
  const Outcome cpu = allreduce("cpu", GetParam(), 4);
  const Outcome device = allreduce("device", GetParam(), 4);
  EXPECT_EQ(device.parameters, cpu.parameters);
  EXPECT_EQ(cpu.parameters[0], cpu.parameters[1]);
  const auto cpu_backend = make("cpu");
  const auto initial = mlp(*cpu_backend);
  EXPECT_FALSE(std::equal(initial->parameters().begin(), initial->parameters().end(),
                          cpu.parameters[0].begin()));  // it trained
  const std::size_t bytes = initial->parameter_count() * sizeof(float);
  for (std::size_t step = 0; step < cpu.step_copies.size(); ++step) {
    EXPECT_EQ(cpu.step_copies[step].total(), 0u) << "step " << step;  // views, no copies
    // Each worker: its gradients out twice (summing, then the view it overwrites), in once.
    EXPECT_EQ(device.step_copies[step].to_host, 4 * bytes) << "step " << step;
    EXPECT_EQ(device.step_copies[step].from_host, 2 * bytes) << "step " << step;
  }
}

TEST_P(DeviceBuffers, ParameterServerOnTheDeviceGivesTheCpuBits) {
  const Outcome cpu = parameter_server("cpu", GetParam(), 4);
  const Outcome device = parameter_server("device", GetParam(), 4);
  EXPECT_EQ(device.parameters, cpu.parameters);
  EXPECT_EQ(cpu.parameters[0], cpu.parameters[1]);
  const std::size_t bytes = mlp(*make("cpu"))->parameter_count() * sizeof(float);
  for (std::size_t step = 0; step < cpu.step_copies.size(); ++step) {
    // Explicit copies are counted on the CPU too: the gradients out, the sum and the
    // parameters in; the server's parameters are a view there and a copy on the device.
    EXPECT_EQ(cpu.step_copies[step].to_host, 2 * bytes) << "step " << step;
    EXPECT_EQ(cpu.step_copies[step].from_host, 3 * bytes) << "step " << step;
    EXPECT_EQ(device.step_copies[step].to_host, 3 * bytes) << "step " << step;
    EXPECT_EQ(device.step_copies[step].from_host, 3 * bytes) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DeviceBuffers,
                         ::testing::Values("sgd", "momentum", "nesterov", "rmsprop", "adam"),
                         [](const auto& optimizer) { return optimizer.param; });

TEST(DeviceBuffers, ACpuTrainingStepCopiesNothing) {
  auto backend = backend::make_cpu_backend(1);
  auto net = mlp(*backend);
  auto optimizer = optim::make_optimizer(config_for("adam"), net->parameter_count(), *backend);
  const CopyCounts before = backend->copied();
  for (std::uint64_t step = 0; step < 2; ++step) {
    compute(*net, 1, step);  // with a micro-batch sum
    optimizer->step(net->parameter_buffer(), net->gradient_buffer(), 0.01);
  }
  EXPECT_EQ((backend->copied() - before).total(), 0u);
}

TEST(DeviceBuffers, TheDevicesBuffersAreNotHostMemory) {
  auto backend = test::make_fake_device_backend(1);
  auto net = mlp(*backend);
  EXPECT_TRUE(test::is_fake_device_buffer(net->parameter_buffer()));
  EXPECT_TRUE(test::is_fake_device_buffer(net->gradient_buffer()));
  EXPECT_TRUE(test::is_fake_device_buffer(net->state_buffer()));
  EXPECT_THROW(net->parameters(), Error);
  EXPECT_THROW(net->gradients(), Error);
  EXPECT_THROW(net->state(), Error);
  EXPECT_THROW(net->gradient_tail(2), Error);
  auto optimizer = optim::make_optimizer(config_for("momentum"), net->parameter_count(), *backend);
  for (const auto& [name, buffer] : optimizer->state()) {
    EXPECT_TRUE(test::is_fake_device_buffer(*buffer)) << name;
  }
  std::vector<float> host(net->parameter_count());
  EXPECT_THROW(optimizer->step(host, host, 0.1), Error);  // host memory on a device backend
  // Initialisation drew on the host and copied the parameters over once, as the CPU has them.
  auto cpu = backend::make_cpu_backend(1);
  const auto reference = mlp(*cpu);
  const HostView on_device = net->host_parameters();
  EXPECT_TRUE(on_device.staged());
  EXPECT_TRUE(std::equal(on_device.values().begin(), on_device.values().end(),
                         reference->parameters().begin(), reference->parameters().end()));
}

}  // namespace
}  // namespace mbkit::nn
