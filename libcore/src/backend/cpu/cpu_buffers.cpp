// The CPU backend's flat-buffer operations: host memory, so copies are memcpy and the optimizer
// update is an OpenMP loop over the buffers (the same loops, term for term, as before they moved
// here from optim/, so results are unchanged bit for bit).
#include <cmath>
#include <cstring>

#include "cpu_internal.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::backend::cpu {

namespace {

using Update = nn::OptimizerUpdate;

// Buffers at least this long are updated by all OpenMP threads; for shorter ones starting the
// team costs more than the update. Either way every element is computed the same way, so the
// result does not depend on the thread count.
constexpr std::size_t kParallelThreshold = std::size_t{1} << 14;

// kDecay = false leaves out `decay * p`: with decay 0 it adds nothing to a finite p's gradient,
// and the update, bound by memory and instructions alike, is faster without it.
template <bool kDecay>
void sgd(const Update& u) {
  float* p = u.params;
  const float* g = u.grads;
  const float rate = u.lr;
  const float decay = u.weight_decay;
  const std::size_t n = u.count;
#pragma omp parallel for simd if (n >= kParallelThreshold)
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = kDecay ? g[i] + decay * p[i] : g[i];
    p[i] = p[i] - rate * grad;
  }
}

template <bool kDecay>
void momentum(const Update& u) {
  float* p = u.params;
  const float* g = u.grads;
  float* a = u.state[0];
  const float rate = u.lr;
  const float decay = u.weight_decay;
  const float m = u.momentum;
  const std::size_t n = u.count;
  if (u.rule == Update::Rule::kNesterov) {
#pragma omp parallel for simd if (n >= kParallelThreshold)
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = kDecay ? g[i] + decay * p[i] : g[i];
      a[i] = m * a[i] + grad;
      p[i] = p[i] - rate * (grad + m * a[i]);
    }
  } else {
#pragma omp parallel for simd if (n >= kParallelThreshold)
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = kDecay ? g[i] + decay * p[i] : g[i];
      a[i] = m * a[i] + grad;
      p[i] = p[i] - rate * a[i];
    }
  }
}

void rmsprop(const Update& u) {
  float* p = u.params;
  const float* g = u.grads;
  float* ms = u.state[0];
  float* mom = u.state[1];
  const float rate = u.lr;
  const float weight_decay = u.weight_decay;
  const float decay = u.beta2;
  const float one_minus_decay = u.one_minus_beta2;
  const float mu = u.momentum;
  const float epsilon = u.epsilon;
  const std::size_t n = u.count;
#pragma omp parallel for simd if (n >= kParallelThreshold)
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = g[i] + weight_decay * p[i];
    ms[i] = decay * ms[i] + one_minus_decay * (grad * grad);
    mom[i] = mu * mom[i] + rate * grad / std::sqrt(ms[i] + epsilon);
    p[i] = p[i] - mom[i];
  }
}

void adam(const Update& u) {
  float* p = u.params;
  const float* g = u.grads;
  float* m = u.state[0];
  float* v = u.state[1];
  const float corrected_rate = u.lr;
  const float weight_decay = u.weight_decay;
  const float b1 = u.beta1;
  const float one_minus_b1 = u.one_minus_beta1;
  const float b2 = u.beta2;
  const float one_minus_b2 = u.one_minus_beta2;
  const float epsilon = u.epsilon;
  const std::size_t n = u.count;
#pragma omp parallel for simd if (n >= kParallelThreshold)
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = g[i] + weight_decay * p[i];
    m[i] = b1 * m[i] + one_minus_b1 * grad;
    v[i] = b2 * v[i] + one_minus_b2 * (grad * grad);
    p[i] = p[i] - corrected_rate * m[i] / (std::sqrt(v[i]) + epsilon);
  }
}

}  // namespace

void optimizer_step(const nn::OptimizerUpdate& update) {
  if (update.count == 0) return;
  switch (update.rule) {
    case Update::Rule::kSgd:
      return update.weight_decay == 0.0f ? sgd<false>(update) : sgd<true>(update);
    case Update::Rule::kMomentum:
    case Update::Rule::kNesterov:
      return update.weight_decay == 0.0f ? momentum<false>(update) : momentum<true>(update);
    case Update::Rule::kRmsProp:
      return rmsprop(update);
    case Update::Rule::kAdam:
      return adam(update);
  }
  fail("cpu backend: unknown optimizer rule");
}

void add_floats(float* destination, const float* source, std::size_t count) {
  const auto n = static_cast<std::ptrdiff_t>(count);
#pragma omp parallel for simd schedule(static)
  for (std::ptrdiff_t j = 0; j < n; ++j) destination[j] += source[j];
}

void copy_floats(const float* source, float* destination, std::size_t count) {
  if (count > 0) std::memmove(destination, source, count * sizeof(float));
}

}  // namespace mbkit::backend::cpu
