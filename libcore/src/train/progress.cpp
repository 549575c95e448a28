#include "mbkit/train/progress.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "mbkit/train/options.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/term.hpp"

namespace mbkit::train {
namespace {

std::string human_rate(double rate) {
  return rate >= 1e4 ? strprintf("%.1fk", rate / 1e3) : strprintf("%.0f", rate);
}

}  // namespace

Progress::Progress(std::int64_t planned, std::int64_t steps_per_epoch, std::int64_t every)
    : planned_(planned),
      steps_per_epoch_(steps_per_epoch),
      every_(every),
      live_(stderr_is_terminal() && log::level() >= log::Level::kNormal) {}

Progress::~Progress() {
  clear();
}

void Progress::step(std::int64_t step, double loss, std::int64_t correct, int samples,
                    double step_time, double remaining_budget) {
  loss_ += loss * samples;
  correct_ += correct;
  samples_ += samples;
  time_ += step_time;
  ++steps_;
  const auto now = SteadyClock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  const bool due =
      live_ ? since >= 0.1 : (every_ > 0 ? step % every_ == 0 : since >= 10.0) || step == planned_;
  if (!due || log::level() < log::Level::kNormal) return;
  const double rate = time_ > 0 ? samples_ / time_ : 0;
  std::string line =
      strprintf("epoch %.2f  step %lld", static_cast<double>(step) / steps_per_epoch_,
                static_cast<long long>(step));
  if (planned_ != kUnlimitedSteps) line += cat("/", planned_);
  line += strprintf("  loss %.4f  accuracy %.1f%%  %s samples/s", loss_ / samples_,
                    100.0 * static_cast<double>(correct_) / samples_, human_rate(rate).c_str());
  double eta = planned_ != kUnlimitedSteps && steps_ > 0
                   ? static_cast<double>(planned_ - step) * (time_ / steps_)
                   : std::numeric_limits<double>::infinity();
  eta = std::min(eta, remaining_budget);
  if (std::isfinite(eta)) line += "  ETA " + human_duration(eta);
  emit(line);
  last_ = now;
  loss_ = 0;
  correct_ = 0;
  samples_ = 0;
  time_ = 0;
  steps_ = 0;
}

void Progress::note(const std::string& line) {
  clear();
  log::info(line);
}

void Progress::emit(const std::string& line) {
  if (live_) {
    std::fprintf(stderr, "\r%s: %s\033[K", log::program().c_str(), line.c_str());
    std::fflush(stderr);
    drawn_ = true;
  } else {
    log::info(line);
  }
}

void Progress::clear() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace mbkit::train
