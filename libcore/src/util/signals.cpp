#include "mbkit/util/signals.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit {
namespace {

std::atomic<bool> g_graceful{false};  // a StopRequest is alive
std::atomic<int> g_stop_signal{0};

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

[[noreturn]] void die_by(int signal_number) {
  fs::remove_temporaries();
  ::signal(signal_number, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(signal_number);  // the default action ends the process with this signal
  std::_Exit(128 + signal_number);
}

void wait_for_signals() {
  const sigset_t set = handled_signals();
  while (true) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    const bool stop_signal = signal_number == SIGINT || signal_number == SIGTERM;
    int expected = 0;
    if (g_graceful.load() && stop_signal &&
        g_stop_signal.compare_exchange_strong(expected, signal_number)) {
      continue;  // the run stops at its next step
    }
    die_by(signal_number);
  }
}

}  // namespace

void start_signal_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = handled_signals();
    const int result = pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (result != 0) fail(cat("pthread_sigmask: ", std::strerror(result)));
    std::thread(wait_for_signals).detach();
  });
}

bool stop_signal_pending() {
  return g_stop_signal.load() != 0;
}

StopRequest::StopRequest() {
  g_stop_signal = 0;
  g_graceful = true;
}

StopRequest::~StopRequest() {
  g_graceful = false;
}

bool StopRequest::requested() const {
  return g_stop_signal.load() != 0;
}
int StopRequest::signal() const {
  return g_stop_signal.load();
}

}  // namespace mbkit
