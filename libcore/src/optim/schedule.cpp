#include "mbkit/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "mbkit/util/check.hpp"

namespace mbkit::optim {

namespace {

void require_positive(double value, const char* flag) {
  if (!(value > 0.0 && std::isfinite(value))) {
    usage_error(cat(flag, " must be positive and finite (got ", shortest_decimal(value), ")"));
  }
}

void check_config(const ScheduleConfig& config) {
  require_positive(config.lr, "--lr");
  if (config.warmup_steps < 0) {
    usage_error(cat("--warmup-steps must be non-negative (got ", config.warmup_steps, ")"));
  }
  // Only the settings the chosen kind reads are checked: the tools fill in every field.
  if (config.kind == "constant") return;
  if (config.kind == "exponential") {
    require_positive(config.decay_steps, "--decay-steps");
    require_positive(config.decay_rate, "--decay-rate");
    return;
  }
  if (config.kind == "multistep") {
    if (config.milestones.empty()) usage_error("--lr-schedule multistep needs --milestones");
    for (std::size_t i = 0; i < config.milestones.size(); ++i) {
      const double milestone = config.milestones[i];
      if (!(milestone >= 0.0 && std::isfinite(milestone))) {
        usage_error(cat("--milestones: ", shortest_decimal(milestone), " is not an epoch"));
      }
      if (i > 0 && !(milestone > config.milestones[i - 1])) {
        usage_error(cat("--milestones must be increasing (",
                        shortest_decimal(config.milestones[i - 1]), " then ",
                        shortest_decimal(milestone), ")"));
      }
    }
    require_positive(config.gamma, "--gamma");
    return;
  }
  if (config.kind == "linear") {
    if (config.total_steps <= 0)
      usage_error("--lr-schedule linear needs the total number of steps");
    if (!(config.end_lr >= 0.0 && std::isfinite(config.end_lr))) {
      usage_error(cat("--end-lr must be non-negative and finite (got ",
                      shortest_decimal(config.end_lr), ")"));
    }
    return;
  }
  if (config.kind == "epochs") {
    require_positive(config.every_epochs, "--lr-every");
    require_positive(config.frac, "--lr-frac");
    return;
  }
  usage_error(
      cat("--lr-schedule: unknown schedule '", config.kind, "' (known: ", known_schedules(), ")"));
}

}  // namespace

std::string known_schedules() {
  return "constant, exponential, multistep, linear, epochs";
}

LearningRateSchedule::LearningRateSchedule(ScheduleConfig config) : config_(std::move(config)) {
  check_config(config_);
}

double LearningRateSchedule::at(std::int64_t step, double epoch) const {
  MBKIT_CHECK(step >= 0, "learning rate asked for step ", step);
  MBKIT_CHECK(epoch >= 0.0 && std::isfinite(epoch), "learning rate asked for epoch ", epoch);
  double lr = config_.lr;
  if (config_.kind == "exponential") {
    double exponent = static_cast<double>(step) / config_.decay_steps;
    if (config_.staircase) exponent = std::floor(exponent);
    lr *= std::pow(config_.decay_rate, exponent);
  } else if (config_.kind == "multistep") {
    // A milestone counts from the start of its epoch on: epoch 79.9 is before milestone 80.
    const double whole_epochs = std::floor(epoch);
    const auto passed = std::count_if(config_.milestones.begin(), config_.milestones.end(),
                                      [&](double milestone) { return milestone <= whole_epochs; });
    lr *= std::pow(config_.gamma, static_cast<double>(passed));
  } else if (config_.kind == "linear") {
    // lr - (lr - end_lr) f, written as a blend so that it is exactly end_lr at the end.
    const double fraction = static_cast<double>(std::min(step, config_.total_steps)) /
                            static_cast<double>(config_.total_steps);
    lr = config_.lr * (1.0 - fraction) + config_.end_lr * fraction;
  } else if (config_.kind == "epochs") {
    lr *= std::pow(config_.frac, std::floor(epoch / config_.every_epochs));
  }
  if (config_.warmup_steps > 0 && config_.warmup_from > 0) {
    const double ramp =
        std::min(1.0, static_cast<double>(step) / static_cast<double>(config_.warmup_steps));
    lr *= config_.warmup_from + (1.0 - config_.warmup_from) * ramp;
  } else if (config_.warmup_steps > 0) {
    lr *= std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps));
  }
  return lr;
}

}  // namespace mbkit::optim
