// What the synchronous and asynchronous exchanges (exchange.cpp, exchange_async.cpp) share.
#pragma once

#include <algorithm>

#include "mbkit/train/exchange.hpp"

namespace mbkit::train::exchange_detail {

// Message tags on MPI_COMM_WORLD (the ping communicator of comm::World is separate).
constexpr int kArrivalTag = 11;
constexpr int kGradientTag = 12;
constexpr int kParametersTag = 13;

/// Adds a worker's report to a combined step.
inline void add_up(CombinedStep& step, const WorkerReport& report) {
  step.samples += report.samples;
  step.loss_sum += report.loss_sum;
  step.correct += report.correct;
  step.stop = std::max(step.stop, report.stop);
  step.workers.push_back(report);
}

}  // namespace mbkit::train::exchange_detail
