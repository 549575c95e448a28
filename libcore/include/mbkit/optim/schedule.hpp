// Learning-rate schedules, as functions of the global step and the (fractional) epoch.
//
//   constant     lr
//   exponential  lr * rate^(step / decay_steps), the exponent floored when staircase
//                (tf.train.exponential_decay; the AMB runs)
//   multistep    lr * gamma^(number of milestones <= floor(epoch))  (the DBSL runs: 80,120 x0.2)
//   linear       lr - (lr - end_lr) * min(step, total_steps) / total_steps
//   epochs       lr * frac^floor(epoch / every)  (the AMB original's periodic `epochs` schedule,
//                --lrate_schedule epochs --lrate_epochs_every --lrate_epochs_frac)
//
// An optional linear warm-up multiplies the result by min(1, (step + 1) / warmup_steps), or,
// when warmup_from > 0, by warmup_from + (1 - warmup_from) min(1, step / warmup_steps): Goyal et
// al.'s gradual warm-up from the small batch's rate (warmup_from = 1 / k) to the scaled one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mbkit::optim {

struct ScheduleConfig {
  std::string kind = "constant";  ///< constant, exponential, multistep, linear, epochs
  double lr = 0.01;
  // exponential
  double decay_steps = 50;
  double decay_rate = 0.9;
  bool staircase = true;
  // multistep
  std::vector<double> milestones;  ///< epochs
  double gamma = 0.1;
  // linear
  double end_lr = 0.0;
  std::int64_t total_steps = 0;
  // epochs (the original's defaults)
  double every_epochs = 10;
  double frac = 0.5;
  // warm-up
  std::int64_t warmup_steps = 0;
  double warmup_from = 0;  ///< fraction of the rate at step 0 (0: the (step + 1) ramp)
};

std::string known_schedules();

class LearningRateSchedule {
 public:
  /// Throws a usage error naming the flag for bad settings (unknown kind, lr <= 0 or
  /// non-finite, decay_steps <= 0, linear without total_steps...).
  explicit LearningRateSchedule(ScheduleConfig config);
  double at(std::int64_t step, double epoch) const;
  const ScheduleConfig& config() const { return config_; }

 private:
  ScheduleConfig config_;
};

}  // namespace mbkit::optim
