// Elapsed time on the steady clock: the one helper every module times with; and CPU time.
#pragma once

#include <chrono>

namespace mbkit {

using SteadyClock = std::chrono::steady_clock;

/// Seconds from `start` to now.
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

/// CPU seconds this process has used (all its threads).
double process_cpu_seconds();
/// CPU seconds the calling thread has used.
double thread_cpu_seconds();

}  // namespace mbkit
