// The timed loops of mb-bench-bandwidth (bandwidth.hpp says how they are measured). Every
// function here is collective: every rank calls it with the same arguments.
#pragma once

#include <chrono>
#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/comm/world.hpp"

namespace mbkit::bench {

/// Spins for `seconds` of this core's time, as a worker computes (no MPI progress meanwhile).
inline void busy_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

/// The median of times sorted ascending (the mean of the middle two for an even count), as
/// every measurement here keeps it.
inline double median_of_sorted(const std::vector<double>& sorted) {
  const std::size_t count = sorted.size();
  return count % 2 == 1 ? sorted[count / 2] : 0.5 * (sorted[count / 2 - 1] + sorted[count / 2]);
}

struct MeasureOptions {
  Dtype dtype = Dtype::kFloat;
  int iters = 20;
  int warmup_iters = 5;
  /// From this size on (bytes; 0: never) `large_iters` timed iterations instead of `iters`, as
  /// OSU's micro-benchmarks time large messages fewer times (and the MPI_Allreduce anchor does).
  std::size_t large_from = 0;
  int large_iters = 0;
  /// The timed iterations at `bytes`.
  int iters_at(std::size_t bytes) const {
    return large_from > 0 && bytes >= large_from ? large_iters : iters;
  }
  bool check = true;
  /// For tests only: rank 0 alters one element of every checked result, so that the check
  /// has something to find (MBKIT_BENCH_CORRUPT=1, mb-bench-bandwidth.1).
  bool corrupt = false;
};

/// The modes of --op exchange: every --comm of the trainers, through their own exchange code:
/// ps with each server count of `servers` ("ps", "ps-2s", ...) and ps and allreduce-mpi with
/// each of `compressions` ("none", or "+fp16" ... appended); allreduce-shm (left out when the
/// ranks span hosts: it needs shared memory), allreduce-auto and async uncompressed. Each
/// server count must leave a worker (1 <= S < ranks).
std::vector<std::string> exchange_modes(const comm::World& world, const std::vector<int>& servers,
                                        const std::vector<std::string>& compressions);

/// What a measurement throws when one size's buffers do not fit in this rank's memory (a
/// std::bad_alloc that says which): the operation, the size (bytes, as given) and the bytes of
/// buffers it asked for on this rank (0 where not counted).
class BuffersDoNotFit : public std::bad_alloc {
 public:
  BuffersDoNotFit(std::string op_name, std::size_t size_bytes, std::size_t buffers_bytes)
      : op(std::move(op_name)), bytes(size_bytes), buffer_bytes(buffers_bytes) {}
  const char* what() const noexcept override { return "buffers do not fit in memory"; }
  std::string op;
  std::size_t bytes;
  std::size_t buffer_bytes;
};

/// A row per size of a collective (every Op but kExchange). On a single process a collective
/// is the copy it amounts to on one rank.
std::vector<Row> measure_collective(const comm::World& world, Op op,
                                    const std::vector<std::size_t>& sizes,
                                    const MeasureOptions& options);

/// A row per size of one exchange mode (float gradients of count = bytes / 4 floats; with
/// compression, fewer bytes travel, and size, algbw and busbw still count the floats).
std::vector<Row> measure_exchange(const comm::World& world, const std::string& mode,
                                  const std::vector<std::size_t>& sizes,
                                  const MeasureOptions& options);

/// Every rank's value, by rank (doubles travel as their bits).
std::vector<double> gather_seconds(const comm::World& world, double seconds);

/// Collective: each iteration's time as its slowest rank's (every rank gives as many, a rank
/// whose times do not count gives 0s), sorted, on every rank.
std::vector<double> slowest_per_iteration(const comm::World& world,
                                          const std::vector<double>& mine);

}  // namespace mbkit::bench
