// Signals, handled by one dedicated thread: SIGINT, SIGTERM and SIGHUP are blocked in every
// other thread, so they never interrupt computing code asynchronously (interrupting oneDNN's
// AVX-512 kernels was seen to corrupt memory on some virtual machines), and the thread that
// receives them may do anything, not just async-signal-safe calls.
//
// By default a signal removes the half-written outputs (fs::AtomicOutput temporaries) and ends
// the process by that signal, as every mbkit tool promises. While a StopRequest exists, the
// first SIGINT or SIGTERM only asks the run to stop (it checks between steps, saves its state
// and exits with code 6); a second one ends the process at once.
#pragma once

namespace mbkit {

/// Blocks the signals in the calling thread and starts the signal thread. Call it before any
/// other thread exists (threads inherit the blocked set); cli::run_tool does, first thing.
/// Idempotent.
void start_signal_thread();

/// True when a StopRequest absorbed a SIGINT or SIGTERM (the run is stopping gracefully).
bool stop_signal_pending();

class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  bool requested() const;
  /// The signal that asked for the stop (SIGINT or SIGTERM), 0 if none.
  int signal() const;
};

}  // namespace mbkit
