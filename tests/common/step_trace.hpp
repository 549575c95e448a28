// A few training steps through Network::train, with or without step graphs, and what they leave
// (losses, hits, gradients, parameters, batch-norm state, graph counts): the recorded run against
// the eager one, on the recording fake device (tests/nn/test_step_graphs.cpp) and on a GPU
// (tests/backend/test_cuda_graphs.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"

namespace mbkit::test {

/// One step of a schedule: a batch size, and whether a second micro-batch adds its gradient.
struct Step {
  int batch;
  bool micro_batches = false;
};

struct StepTrace {
  std::vector<double> losses;
  std::vector<std::int64_t> correct;
  std::vector<float> gradients, parameters, state;
  nn::Network::StepGraphCounts counts;
};

/// Trains `model` (its usual input, initialised with seed 3) over `steps` with momentum, new
/// random images and labels every step. `before_step(backend, k)` runs before step k (tests
/// that make memory stale or recordings fail).
StepTrace train_steps(const std::string& model, nn::Backend& backend, bool graphs,
                      const std::vector<Step>& steps,
                      const std::function<void(nn::Backend&, std::size_t)>& before_step = {});

/// A HostView's values, copied.
std::vector<float> host_values(const nn::HostView& view);

/// Whether two float arrays hold the same bits.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

/// Expects the same losses and hits, and the same bits of gradients, parameters and state.
void expect_same_steps(const StepTrace& graphs, const StepTrace& eager);

}  // namespace mbkit::test
