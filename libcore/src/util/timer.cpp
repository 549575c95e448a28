#include "mbkit/util/timer.hpp"

#include <time.h>

#include <cerrno>
#include <cstring>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit {
namespace {

double cpu_seconds(clockid_t clock, const char* name) {
  timespec now{};
  if (clock_gettime(clock, &now) != 0)
    fail(cat("clock_gettime(", name, "): ", std::strerror(errno)));
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

}  // namespace

double process_cpu_seconds() {
  return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID, "CLOCK_PROCESS_CPUTIME_ID");
}

double thread_cpu_seconds() {
  return cpu_seconds(CLOCK_THREAD_CPUTIME_ID, "CLOCK_THREAD_CPUTIME_ID");
}

}  // namespace mbkit
