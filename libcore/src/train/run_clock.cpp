#include "mbkit/train/run_clock.hpp"

#include "mbkit/nn/backend.hpp"
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

WorkTimer::WorkTimer(const RunClock& clock, nn::Backend& backend)
    : clock_(clock), backend_(backend) {
  if (clock_.is_virtual()) device_ = backend_.make_device_timer();
  restart();
}

WorkTimer::~WorkTimer() = default;

void WorkTimer::restart() {
  if (device_) {
    device_->start();
  } else if (clock_.is_virtual()) {
    cpu_start_ = clock_.cpu_now();
  }
  wall_start_ = SteadyClock::now();
}

double WorkTimer::seconds() {
  if (device_) return device_->seconds();  // waits for the device's queue
  backend_.synchronize();
  return clock_.is_virtual() ? clock_.cpu_now() - cpu_start_ : seconds_since(wall_start_);
}

}  // namespace mbkit::train
