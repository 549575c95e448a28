// What the exchanges (exchange.cpp, exchange_async*.cpp, selecting_exchange.cpp,
// delayed_exchange.cpp) share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "mbkit/comm/in_flight.hpp"
#include "mbkit/train/exchange.hpp"

namespace mbkit::train::exchange_detail {

// Message tags on MPI_COMM_WORLD (the ping communicator of comm::World is separate).
constexpr int kArrivalTag = 11;
constexpr int kGradientTag = 12;
constexpr int kParametersTag = 13;

// The asynchronous exchange's messages (exchange_async.cpp, exchange_async_worker.cpp).
// Header of a worker's message: what it did, then its gradient (sum over its samples) and
// state. A message of kind kDone carries the header only, with the StopCode it was stopped with
// (a server that did not stop the run itself learns from it why the run ended).
struct GradientHeader {
  double kind = 0;  // kGradient or kDone
  double samples = 0, loss_sum = 0, correct = 0;
  double compute_time = 0, sleep_time = 0, send_time = 0, wait_time = 0;
  double based_on = 0;
  double stop = 0;
  double micro_batches = 1, finished_early = 0;
  double recv_time = 0, exit_time = 0, queued_updates = 0;
  double comm_delay = 0;  // --async-delay-std: the master holds the message this long
};
constexpr double kGradient = 1, kDone = 2;

// Header of the master's message: the step of the parameters that follow, or stop.
struct ParametersHeader {
  double step = 0;
  double stop = 0;
};

// Message buffers: an exchange unwound by an error with a request pending does not free them
// while MPI may still use them (mbkit/comm/in_flight.hpp).
using Bytes = comm::MessageBuffer<unsigned char>;
using Floats = comm::MessageBuffer<float>;

// The wall-clock exchanges (selecting_exchange.cpp, delayed_exchange.cpp) send a step number in
// the first two floats of a message: its bits, not a value (exact for any step).
constexpr std::size_t kStepFloats = 2;
inline void put_step(float* at, std::int64_t step) {
  static_assert(sizeof step == kStepFloats * sizeof(float));
  std::memcpy(at, &step, sizeof step);
}
inline std::int64_t get_step(const float* at) {
  std::int64_t step = 0;
  std::memcpy(&step, at, sizeof step);
  return step;
}
inline std::size_t bytes(std::size_t floats) {
  return floats * sizeof(float);
}

/// A worker's report in the synchronous exchanges' small values: report_slot_floats() floats
/// at `slot` (exact for counts below 2^24).
void put_report(const WorkerReport& r, float* slot, bool parameter_server);
WorkerReport get_report(const float* slot, int rank, bool parameter_server);

/// Adds a worker's report to a combined step.
inline void add_up(CombinedStep& step, const WorkerReport& report) {
  step.samples += report.samples;
  step.loss_sum += report.loss_sum;
  step.correct += report.correct;
  step.stop = std::max(step.stop, report.stop);
  step.workers.push_back(report);
}

/// The asynchronous master's update from the sums of the `count` gradients it took: the
/// gradients' sum over their samples, the state's mean.
inline void average_async_sums(const CombinedStep& step, int count, std::span<float> gradients,
                               std::span<float> state) {
  if (step.samples > 0) {
    const float inverse = 1.0f / static_cast<float>(step.samples);
    for (float& g : gradients) g *= inverse;
  }
  const float state_inverse = 1.0f / static_cast<float>(count);
  for (float& s : state) s *= state_inverse;
}

}  // namespace mbkit::train::exchange_detail
