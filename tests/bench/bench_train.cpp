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
//
// On a GPU (compare_torch_gpu.py): `--device=cuda[:N]` times the GPU set instead, resnet20 and
// resnet18 on CIFAR shapes (batch 128) and resnet50 on 224x224 ImageNet shapes (batch 64), named
// gpu/<model>/batch:<B>; each step ends with the backend's synchronize() so a step's time is its
// GPU work. `--set=gpu` times that set on the CPU too (a dry run of the script), and `--batch=N`
// and `--resnet50-size=S` shrink it (S x S images). A step is Network::train, so on a GPU the
// forward and backward pass replay a CUDA graph as the trainers' do (`--cuda-graphs=off`: not).
#include <benchmark/benchmark.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"

namespace {

struct Workload {
  const char* name;   ///< as torch_bench.py names it
  const char* model;  ///< mbkit's zoo name
  mbkit::nn::Dims input;
  int classes = 10;
  int batch = 0;  ///< the GPU set's batch (the CPU set registers its own)
};

/// bench_train's own flags (taken out of argv before Google Benchmark reads it).
struct Flags {
  std::string device = "cpu";
  std::string set;  ///< "cpu" or "gpu"; empty: by the device
  int batch = 0;    ///< 0: each workload's own
  int resnet50_size = 224;
  bool cuda_graphs = true;  ///< where the backend records them
};
Flags flags;

// torch_bench's lenet is the AMB MNIST model (mnist-cnn); resnet20 has projection shortcuts
// in both.
const Workload kWorkloads[] = {{"mlp", "mlp", {1, 28, 28}},
                               {"lenet", "mnist-cnn", {1, 28, 28}},
                               {"resnet20", "resnet20", {3, 32, 32}}};

// The GPU set: the targets (resnet20 >= 1.5x PyTorch eager, resnet50 >= 1.0x).
std::vector<Workload> gpu_workloads() {
  const int s = flags.resnet50_size;
  return {{"resnet20", "resnet20", {3, 32, 32}, 10, 128},
          {"resnet18", "resnet18", {3, 32, 32}, 10, 128},
          {"resnet50", "resnet50", {3, s, s}, 1000, 64}};
}

/// `threads` 0: the benchmark's second argument (the GPU set has none: a GPU backend runs its
/// host side on the calling thread).
void train_step(benchmark::State& state, const Workload& workload, int threads = 0) {
  const int batch = static_cast<int>(state.range(0));
  if (threads == 0) threads = static_cast<int>(state.range(1));
  std::unique_ptr<mbkit::nn::Backend> backend;
  try {
    backend = mbkit::backend::make_backend(flags.device, threads);
  } catch (const std::exception& error) {  // no GPU, a bad --device: say so, not abort
    state.SkipWithError(error.what());
    return;
  }
  mbkit::models::ModelConfig config;
  config.name = workload.model;
  mbkit::nn::Network net(mbkit::models::build_model(config, workload.input, workload.classes),
                         *backend);
  net.initialize(0);
  if (flags.cuda_graphs && net.step_graphs_unavailable().empty()) net.set_step_graphs(true);
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
  for (auto& label : labels) {
    label = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(workload.classes)));
  }

  auto step = [&](std::size_t i) {
    const std::size_t slot = i % 8;
    net.train(images.data() + slot * batch * pixels, labels.data() + slot * batch, batch, 1,
              1.0 / batch);
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), 0.01);
    backend->synchronize();  // a GPU's step ends when its queued work does
  };
  for (std::size_t i = 0; i < 10; ++i) step(i);  // warm-up: primitives, caches, page faults
  std::size_t i = 0;
  for (auto _ : state) step(i++);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["threads"] = threads;
  state.counters["cuda_graphs"] = net.step_graphs() ? 1 : 0;
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
  const std::string set = !flags.set.empty()                 ? flags.set
                          : flags.device.starts_with("cuda") ? "gpu"
                                                             : "cpu";
  if (set == "gpu") {
    static const std::vector<Workload> gpu = gpu_workloads();
    for (const auto& workload : gpu) {
      const int batch = flags.batch > 0 ? flags.batch : workload.batch;
      benchmark::RegisterBenchmark(
          (std::string("gpu/") + workload.name).c_str(),
          [&workload](benchmark::State& state) { train_step(state, workload, 1); })
          ->ArgNames({"batch"})
          ->Args({batch})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    return;
  }
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

/// Takes bench_train's own --name=value flags out of argv; false (with a message) on a bad one.
bool take_flags(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&](std::string_view name) -> const char* {
      return arg.starts_with(name) ? argv[i] + name.size() : nullptr;
    };
    // A whole positive number, at least `least`.
    const auto number = [](const char* text, int least) {
      char* end = nullptr;
      const long parsed = std::strtol(text, &end, 10);
      if (end == text || *end != '\0' || parsed < least || parsed > 1 << 20) {
        throw std::invalid_argument("a whole number of at least " + std::to_string(least));
      }
      return static_cast<int>(parsed);
    };
    try {
      if (const char* v = value("--device=")) {
        flags.device = v;
      } else if (const char* set = value("--set=")) {
        flags.set = set;
        if (flags.set != "cpu" && flags.set != "gpu") throw std::invalid_argument("cpu or gpu");
      } else if (const char* batch = value("--batch=")) {
        flags.batch = number(batch, 1);
      } else if (const char* size = value("--resnet50-size=")) {
        flags.resnet50_size = number(size, 32);
      } else if (const char* graphs = value("--cuda-graphs=")) {
        if (std::string_view(graphs) != "on" && std::string_view(graphs) != "off") {
          throw std::invalid_argument("on or off");
        }
        flags.cuda_graphs = std::string_view(graphs) == "on";
      } else {
        argv[kept++] = argv[i];
      }
    } catch (const std::exception& error) {
      std::cerr << "bench_train: error: " << arg << ": expected " << error.what() << "\n";
      return false;
    }
  }
  argc = kept;
  return true;
}

int main(int argc, char** argv) {
  if (!take_flags(argc, argv)) return 2;
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
