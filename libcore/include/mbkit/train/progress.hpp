// The progress of a training run on stderr: a live line on a terminal, otherwise a line every
// `every` steps or 10 s; evaluations and the end of the run as lines that stay.
#pragma once

#include <cstdint>
#include <string>

#include "mbkit/util/timer.hpp"

namespace mbkit::train {

class Progress {
 public:
  /// `planned`: steps of the run (kUnlimitedSteps when bounded by time only).
  Progress(std::int64_t planned, std::int64_t steps_per_epoch, std::int64_t every);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Step `step` is done: its mean loss, correct answers, samples and seconds.
  void step(std::int64_t step, double loss, std::int64_t correct, int samples, double step_time,
            double remaining_budget);
  /// A line that stays (evaluations, the end of the run).
  void note(const std::string& line);

 private:
  void emit(const std::string& line);
  void clear();

  std::int64_t planned_, steps_per_epoch_, every_;
  bool live_;
  bool drawn_ = false;
  SteadyClock::time_point last_ = SteadyClock::now();
  double loss_ = 0, time_ = 0;
  std::int64_t correct_ = 0, samples_ = 0, steps_ = 0;
};

}  // namespace mbkit::train
