#include "step_trace.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "mbkit/models/zoo.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/util/random.hpp"
#include "test_helpers.hpp"

namespace mbkit::test {
std::vector<float> host_values(const nn::HostView& view) {
  return {view.values().begin(), view.values().end()};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data() of an empty vector (a model without batch-norm state).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

StepTrace train_steps(const std::string& model, nn::Backend& backend, bool graphs,
                      const std::vector<Step>& steps,
                      const std::function<void(nn::Backend&, std::size_t)>& before_step) {
  const UsualInput usual = usual_input(model);
  models::ModelConfig config;
  config.name = model;
  nn::Network net(models::build_model(config, usual.input, usual.classes), backend);
  net.initialize(3);
  if (graphs) net.set_step_graphs(true);
  optim::OptimizerConfig momentum;
  momentum.name = "momentum";
  const auto optimizer = optim::make_optimizer(momentum, net.parameter_count(), backend);
  Rng rng(11);
  StepTrace run;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    if (before_step) before_step(backend, k);
    const int batch = steps[k].batch;
    for (int part = 0; part < (steps[k].micro_batches ? 2 : 1); ++part) {
      std::vector<float> images(static_cast<std::size_t>(batch * usual.input.size()));
      std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
      for (auto& value : images) value = static_cast<float>(rng.normal());
      for (auto& label : labels) label = static_cast<std::int32_t>(rng.below(usual.classes));
      const auto result =
          net.train(images.data(), labels.data(), batch, 40 + k, 1.0 / batch, part > 0);
      run.losses.push_back(result.loss_sum);
      run.correct.push_back(result.correct);
    }
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), 0.05);
  }
  run.gradients = host_values(net.host_gradients());
  run.parameters = host_values(net.host_parameters());
  run.state = host_values(net.host_state());
  run.counts = net.step_graph_counts();
  return run;
}

void expect_same_steps(const StepTrace& graphs, const StepTrace& eager) {
  EXPECT_EQ(graphs.losses, eager.losses);
  EXPECT_EQ(graphs.correct, eager.correct);
  EXPECT_TRUE(same_bits(graphs.gradients, eager.gradients)) << "gradients";
  EXPECT_TRUE(same_bits(graphs.parameters, eager.parameters)) << "parameters";
  EXPECT_TRUE(same_bits(graphs.state, eager.state)) << "batch-norm state";
}

}  // namespace mbkit::test
