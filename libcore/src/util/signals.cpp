#include "mbkit/util/signals.hpp"

#include <atomic>
#include <csignal>

#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int signal_number) {
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, signal_number)) return;
  // Second signal: stop now, as the default handlers would.
  fs::remove_temporaries();
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

StopRequest::StopRequest() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int signal_number : {SIGINT, SIGTERM}) {
    MBKIT_SYS_CHECK(::sigaction(signal_number, &action, nullptr), "sigaction");
  }
}

StopRequest::~StopRequest() {
  fs::install_cleanup_on_signals();
}

bool StopRequest::requested() const {
  return g_stop_signal.load() != 0;
}
int StopRequest::signal() const {
  return g_stop_signal.load();
}

}  // namespace mbkit
