// A graceful stop on SIGINT/SIGTERM for long runs: the first signal only sets a flag that the
// run checks between steps (it then saves its state and exits with code 6); a second signal
// ends the process at once, removing half-written outputs, as every other mbkit tool does.
#pragma once

namespace mbkit {

class StopRequest {
 public:
  /// Installs the handlers (replacing the default cleanup handlers) until destruction.
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  bool requested() const;
  /// The signal that asked for the stop (SIGINT or SIGTERM), 0 if none.
  int signal() const;
};

}  // namespace mbkit
