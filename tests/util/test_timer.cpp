// The CPU clocks the virtual clock charges measured compute with and the loader times its
// thread with: they advance with work, not with sleep.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "mbkit/util/timer.hpp"

namespace mbkit {
namespace {

TEST(CpuClocks, AdvanceWithWorkAndNotWithSleep) {
  const double thread_start = thread_cpu_seconds();
  const double process_start = process_cpu_seconds();
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + 1e-9 * i;
  const double worked = thread_cpu_seconds() - thread_start;
  EXPECT_GT(worked, 0.01);
  // The process clock brings only the calling thread's running time up to date; another
  // thread of this process that is on a CPU (an OpenMP or MPI thread, under CI load) is
  // counted up to its last scheduler tick, which can make the process clock's difference
  // come out short of this thread's by up to one tick: 10 ms at the coarsest HZ (100).
  constexpr double kOneTickAtTheCoarsestHz = 0.010;
  EXPECT_GE(process_cpu_seconds() - process_start, worked - kOneTickAtTheCoarsestHz);

  const double before_sleep = thread_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LT(thread_cpu_seconds() - before_sleep, 0.010);  // asleep, not working
}

}  // namespace
}  // namespace mbkit
