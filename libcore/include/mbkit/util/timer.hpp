// Elapsed time on the steady clock: the one helper every module times with.
#pragma once

#include <chrono>

namespace mbkit {

using SteadyClock = std::chrono::steady_clock;

/// Seconds from `start` to now.
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace mbkit
