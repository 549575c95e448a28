#include "mbkit/comm/allreduce_trial.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "mbkit/comm/shared_sum.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::comm {
namespace {

using Clock = SteadyClock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The backward pass writes the whole buffer just before each sum: so does the trial, so that
// the lines start dirty in this core's cache as in training.
void fill(std::span<float> buffer, int round) {
  const float value = 1.0f / static_cast<float>(round + 2);
  std::fill(buffer.begin(), buffer.end(), value);
}

}  // namespace

AllreduceTrial time_allreduce_sums(const World& world, std::size_t floats, int rounds) {
  MBKIT_CHECK(rounds > 0 && floats > 0, "an allreduce trial of ", rounds, " rounds of ", floats,
              " floats");
  SharedSum shared(world, floats);
  std::vector<float> plain(floats);
  const auto time_shared = [&](int round) {
    fill(shared.buffer(), round);
    world.barrier();
    const auto start = Clock::now();
    shared.sum("the --allreduce auto trial");
    return seconds_since(start);
  };
  const auto time_mpi = [&](int round) {
    fill(plain, round);
    world.barrier();
    const auto start = Clock::now();
    world.allreduce_sum(std::span<float>(plain));
    return seconds_since(start);
  };
  time_shared(-1);
  time_mpi(-1);
  // times[2 r] = shared memory, times[2 r + 1] = MPI, of round r; summed over ranks below.
  std::vector<double> times(2 * static_cast<std::size_t>(rounds));
  for (int r = 0; r < rounds; ++r) {
    auto& shared_time = times[2 * static_cast<std::size_t>(r)];
    auto& mpi_time = times[2 * static_cast<std::size_t>(r) + 1];
    if (r % 2 == 0) {
      shared_time = time_shared(r);
      mpi_time = time_mpi(r);
    } else {
      mpi_time = time_mpi(r);
      shared_time = time_shared(r);
    }
  }
  world.allreduce_sum(std::span<double>(times));
  std::vector<double> shared_rounds, mpi_rounds;
  for (int r = 0; r < rounds; ++r) {
    shared_rounds.push_back(times[2 * static_cast<std::size_t>(r)] / world.size());
    mpi_rounds.push_back(times[2 * static_cast<std::size_t>(r) + 1] / world.size());
  }
  // Rank 0's figures everywhere (an MPI sum need not give every rank the same bits).
  std::vector<float> verdict = {static_cast<float>(median(shared_rounds)),
                                static_cast<float>(median(mpi_rounds))};
  world.broadcast(std::span<float>(verdict), 0);
  AllreduceTrial trial;
  trial.shared_memory_seconds = verdict[0];
  trial.mpi_seconds = verdict[1];
  trial.rounds = rounds;
  return trial;
}

}  // namespace mbkit::comm
