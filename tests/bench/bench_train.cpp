// Training throughput of mbkit's CPU engine on the workloads of the PyTorch anchor
// (../shared/anchors/torch_bench.py): one optimizer step (forward, backward, SGD with momentum
// 0.9 and lr 0.01) on a batch already in memory, so the two measure the same thing. The rate
// is reported as items_per_second = samples/s. compare_torch.py runs both and prints ratios.
//
// bound/mlp_sgemm is the bound of the mlp step: only the dnnl_sgemm calls one step of the mlp
// makes (the dense layers' shapes, transposes and beta; no input gradient for the first layer),
// in the same samples/s. The step's own time beyond them is what mbkit adds.
// bound/mlp_sgemm_update adds the step's optimizer update (mbkit's momentum over the flat
// parameter, gradient and state buffers the sgemm calls read and write): the update streams
// about 4 MB and is bound by memory, not by anything the engine does around the products.
//
//   bench_train --benchmark_filter='^mlp/batch:64/threads:1/'     (workload/batch/threads)
#include <benchmark/benchmark.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <stdexcept>
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
  auto optimizer = mbkit::optim::make_optimizer(optimizer_config, net.parameter_count(), *backend);

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
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), 0.01);
  };
  for (std::size_t i = 0; i < 10; ++i) step(i);  // warm-up: primitives, caches, page faults
  std::size_t i = 0;
  for (auto _ : state) step(i++);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["threads"] = threads;
}

/// The dnnl_sgemm calls of one training step of the mlp (as DenseKernel makes them), on buffers
/// of the step's sizes, with the inputs cycled through eight batches as train_step does; the
/// weights and their gradients lie in flat buffers as the network's do. `with_update` adds the
/// step's optimizer update over those buffers.
void mlp_sgemm_bound(benchmark::State& state, bool with_update) {
  const int batch = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  auto backend = mbkit::backend::make_cpu_backend(threads);
  mbkit::models::ModelConfig config;
  config.name = "mlp";
  const mbkit::nn::Graph graph = mbkit::models::build_model(config, {1, 28, 28}, 10);
  mbkit::Rng rng(0);
  const auto fill = [&rng](std::vector<float>& values, std::size_t size) {
    values.resize(size);
    for (auto& v : values) v = static_cast<float>(0.05 * rng.normal());
  };
  std::vector<float> parameters, gradients;
  fill(parameters, graph.parameter_count());
  fill(gradients, graph.parameter_count());
  struct Layer {
    dnnl_dim_t in, out;
    bool bias, input_grad;
    float *weight, *weight_grad;
    std::vector<float> output, output_grad, input_grad_rows;
  };
  std::vector<Layer> layers;
  bool parameters_before = false;  // a layer's input needs a gradient when one before has any
  for (const auto& node : graph.nodes()) {
    if (node.op == mbkit::nn::Op::kDense) {
      const std::size_t offset = node.params[0].offset;
      Layer layer{node.params[0].shape[1],
                  node.units,
                  node.bias,
                  parameters_before,
                  parameters.data() + offset,
                  gradients.data() + offset,
                  {},
                  {},
                  {}};
      layers.push_back(std::move(layer));
    }
    parameters_before = parameters_before || !node.params.empty();
  }
  mbkit::optim::OptimizerConfig optimizer_config;
  optimizer_config.name = "momentum";
  optimizer_config.momentum = 0.9;
  auto optimizer = mbkit::optim::make_optimizer(optimizer_config, parameters.size(), *backend);
  const auto n = static_cast<std::size_t>(batch);
  std::vector<float> images;
  fill(images, 8 * n * static_cast<std::size_t>(layers.front().in));
  for (auto& layer : layers) {
    const auto in = static_cast<std::size_t>(layer.in), out = static_cast<std::size_t>(layer.out);
    fill(layer.output, n * out);
    fill(layer.output_grad, n * out);
    if (layer.input_grad) fill(layer.input_grad_rows, n * in);
  }
  const auto check = [](dnnl_status_t status) {
    if (status != dnnl_success) throw std::runtime_error("dnnl_sgemm failed");
  };
  auto step = [&](std::size_t i) {
    const float* x = images.data() + (i % 8) * n * static_cast<std::size_t>(layers.front().in);
    const float* input = x;
    for (auto& l : layers) {  // Y = X W^T (+ the bias Y starts from)
      check(dnnl_sgemm('N', 'T', batch, l.out, l.in, 1.0f, input, l.in, l.weight, l.in,
                       l.bias ? 1.0f : 0.0f, l.output.data(), l.out));
      input = l.output.data();
    }
    for (std::size_t k = layers.size(); k-- > 0;) {
      Layer& l = layers[k];
      input = k == 0 ? x : layers[k - 1].output.data();
      // dW = dY^T X, then dX = dY W where the input needs a gradient.
      check(dnnl_sgemm('T', 'N', l.out, l.in, batch, 1.0f, l.output_grad.data(), l.out, input, l.in,
                       0.0f, l.weight_grad, l.in));
      if (l.input_grad) {
        check(dnnl_sgemm('N', 'N', batch, l.in, l.out, 1.0f, l.output_grad.data(), l.out, l.weight,
                         l.in, 0.0f, l.input_grad_rows.data(), l.in));
      }
    }
    if (with_update) optimizer->step(parameters, gradients, 0.01);
  };
  for (std::size_t i = 0; i < 10; ++i) step(i);
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
  for (const bool with_update : {false, true}) {
    benchmark::RegisterBenchmark(
        with_update ? "bound/mlp_sgemm_update" : "bound/mlp_sgemm",
        [with_update](benchmark::State& state) { mlp_sgemm_bound(state, with_update); })
        ->ArgNames({"batch", "threads"})
        ->Args({64, 1})
        ->Args({64, 2})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
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
