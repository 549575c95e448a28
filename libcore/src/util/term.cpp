#include "mbkit/util/term.hpp"

#include <unistd.h>

#include <cstdio>

#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit {

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string label, std::uint64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(stderr_is_terminal() && log::level() >= log::Level::kNormal),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(std::uint64_t done) {
  done_ = done;
  draw(false);
}

void ProgressBar::draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::string line = log::program() + ": " + label_ + "  ";
  if (total_ > 0) {
    const double fraction = static_cast<double>(done_) / static_cast<double>(total_);
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth + 0.5);
    line += "[" + std::string(static_cast<std::size_t>(std::min(filled, kWidth)), '#') +
            std::string(static_cast<std::size_t>(kWidth - std::min(filled, kWidth)), ' ') + "] ";
    line += strprintf("%3.0f%%  %s / %s", 100.0 * fraction, human_bytes(double(done_)).c_str(),
                      human_bytes(double(total_)).c_str());
    if (rate > 0 && done_ < total_) {
      line += "  ETA " + human_duration(double(total_ - done_) / rate);
    }
  } else {
    line += human_bytes(double(done_));
  }
  line += "  " + human_bytes(rate) + "/s";
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace mbkit
