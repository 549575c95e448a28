#include "mbkit/train/run_clock.hpp"

#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

RunClock::RunClock(bool virtual_clock, SteadyClock::time_point started)
    : virtual_(virtual_clock), started_(started) {}

void RunClock::resume_at(double elapsed, double wall_elapsed) {
  elapsed_before_ = elapsed;
  wall_before_ = wall_elapsed;
  virtual_now_ = elapsed;
}

double RunClock::now() const {
  return virtual_ ? virtual_now_ : elapsed_before_ + since_start();
}

double RunClock::wall_now() const {
  return wall_before_ + since_start();
}

double RunClock::cpu_now() const {
  return threads_ == 1 ? thread_cpu_seconds() : process_cpu_seconds() / threads_;
}

}  // namespace mbkit::train
