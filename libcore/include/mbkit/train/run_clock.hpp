// The clock of a training run: real seconds (--clock wall) or the emulated cluster's
// (--clock virtual, mbkit/train/virtual_clock.hpp), which rank 0 advances from the workers'
// reports. Both continue from the time of the run a checkpoint resumes.
#pragma once

#include <memory>

#include "mbkit/util/timer.hpp"

namespace mbkit::nn {
class Backend;
class DeviceTimer;
}  // namespace mbkit::nn

namespace mbkit::train {

class RunClock {
 public:
  /// A run that started (this process's part of it) at `started`.
  RunClock(bool virtual_clock, SteadyClock::time_point started);
  /// The backend's threads: a worker's CPU time is its thread's, or its threads' share.
  void set_threads(int threads) { threads_ = threads; }

  bool is_virtual() const { return virtual_; }
  /// Continues a run that had run `elapsed` seconds on its clock, `wall_elapsed` for real.
  void resume_at(double elapsed, double wall_elapsed);

  /// Seconds on the run's clock (resumed runs included).
  double now() const;
  /// Real seconds (resumed runs included).
  double wall_now() const;
  /// Real seconds of this process's part of the run.
  double since_start() const { return seconds_since(started_); }
  /// The run's clock when this process started (the resumed run's time).
  double elapsed_before() const { return elapsed_before_; }

  /// Virtual clock only: rank 0 moves the emulated time on, or sets it (the async master's).
  void advance(double seconds) { virtual_now_ += seconds; }
  void set_virtual_now(double seconds) { virtual_now_ = seconds; }
  double virtual_now() const { return virtual_now_; }

  /// CPU seconds of this worker's computing, for the virtual clock.
  double cpu_now() const;

 private:
  bool virtual_;
  int threads_ = 1;
  SteadyClock::time_point started_;
  double elapsed_before_ = 0;
  double wall_before_ = 0;
  double virtual_now_ = 0;
};

/// Times one piece of a worker's work (micro-batches, an update, a calibration) on the run's
/// clock, once the backend's queued work is done: real seconds under --clock wall; under --clock
/// virtual the work's own seconds, the worker's CPU time on the CPU and the device's time (CUDA
/// events on the backend's stream) on a GPU.
class WorkTimer {
 public:
  /// Starts timing.
  WorkTimer(const RunClock& clock, nn::Backend& backend);
  ~WorkTimer();
  WorkTimer(const WorkTimer&) = delete;
  WorkTimer& operator=(const WorkTimer&) = delete;

  /// Waits for the backend, then the seconds since the start (or the last restart).
  double seconds();
  /// Starts again (the device timer is kept: a GPU's events are made once).
  void restart();

 private:
  const RunClock& clock_;
  nn::Backend& backend_;
  std::unique_ptr<nn::DeviceTimer> device_;
  SteadyClock::time_point wall_start_;
  double cpu_start_ = 0;
};

}  // namespace mbkit::train
