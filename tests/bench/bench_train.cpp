// Training throughput of mbkit's CPU engine on the workloads of the PyTorch anchor
// (../shared/anchors/torch_bench.py): one optimizer step (forward, backward, SGD with momentum
// 0.9 and lr 0.01) on a batch already in memory, so the two measure the same thing. The rate
// is reported as items_per_second = samples/s. compare_torch.py runs both and prints ratios.
//
//   bench_train --benchmark_filter='^mlp/batch:64/threads:1/'     (workload/batch/threads)
#include <benchmark/benchmark.h>

#include <string>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"

namespace {

struct Workload {
  const char* name;   ///< as torch_bench.py names it
  const char* model;  ///< mbkit's zoo name
  mbkit::nn::Dims input;
};

// torch_bench's lenet is the AMB MNIST model (mnist-cnn); resnet20 has projection shortcuts
// in both.
const Workload kWorkloads[] = {{"mlp", "mlp", {1, 28, 28}},
                               {"lenet", "mnist-cnn", {1, 28, 28}},
                               {"resnet20", "resnet20", {3, 32, 32}}};

void train_step(benchmark::State& state, const Workload& workload) {
  const int batch = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  auto backend = mbkit::backend::make_cpu_backend(threads);
  mbkit::models::ModelConfig config;
  config.name = workload.model;
  mbkit::nn::Network net(mbkit::models::build_model(config, workload.input, 10), *backend);
  net.initialize(0);
  mbkit::optim::OptimizerConfig optimizer_config;
  optimizer_config.name = "momentum";
  optimizer_config.momentum = 0.9;
  auto optimizer = mbkit::optim::make_optimizer(optimizer_config, net.parameters().size());

  // Eight batches of inputs cycled through, as torch_bench slices its tensors.
  mbkit::Rng rng(0);
  const auto pixels = static_cast<std::size_t>(workload.input.size());
  std::vector<float> images(8 * static_cast<std::size_t>(batch) * pixels);
  for (auto& v : images) v = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(8 * static_cast<std::size_t>(batch));
  for (auto& label : labels) label = static_cast<std::int32_t>(rng.below(10));

  auto step = [&](std::size_t i) {
    const std::size_t slot = i % 8;
    net.forward(images.data() + slot * batch * pixels, labels.data() + slot * batch, batch, true);
    net.backward(1.0 / batch);
    optimizer->step(net.parameters(), net.gradients(), 0.01);
  };
  for (std::size_t i = 0; i < 10; ++i) step(i);  // warm-up: primitives, caches, page faults
  std::size_t i = 0;
  for (auto _ : state) step(i++);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["threads"] = threads;
}

void register_all() {
  for (const auto& workload : kWorkloads) {
    auto* bench = benchmark::RegisterBenchmark(
        workload.name, [&workload](benchmark::State& state) { train_step(state, workload); });
    const int batch = std::string(workload.name) == "resnet20" ? 128 : 64;
    bench->ArgNames({"batch", "threads"})->Args({batch, 1})->Args({batch, 2})->UseRealTime();
    bench->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
