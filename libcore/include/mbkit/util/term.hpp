// Terminal-aware progress display: a live line on a terminal, nothing otherwise (logs and
// pipes stay clean; `mpirun` output is not a terminal).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace mbkit {

bool stderr_is_terminal();

/// A byte-count progress bar on stderr, drawn at most 10 times a second, only when stderr is a
/// terminal and the log level is normal or higher.
class ProgressBar {
 public:
  /// total == 0 means unknown (shows bytes and rate only).
  ProgressBar(std::string label, std::uint64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void set_total(std::uint64_t total) { total_ = total; }
  void update(std::uint64_t done);
  /// Clears the line (called by the destructor too).
  void finish();

 private:
  void draw(bool force);
  std::string label_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace mbkit
