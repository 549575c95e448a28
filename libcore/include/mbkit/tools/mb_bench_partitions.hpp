// mb-bench-partitions: the time of a step against its split into micro-batches (the library
// side of the tool; the measurement is mbkit/bench/step_timer.hpp, the table and file
// mbkit/bench/partitions.hpp).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace mbkit::tools::bench_partitions {

struct PartitionsOptions {
  std::string model = "mlp";
  std::string data;
  std::string batch_sizes;       ///< "64,128,..."
  std::string partitions = "1";  ///< "1,2,4,..."
  bool sweep = false;            ///< the original's sweep instead of the lists
  int sweep_max = 1024;          ///< largest batch of the sweep
  int steps = 10;
  int warmup = 2;
  int threads = 0;
  std::string device = "cpu";
  std::string precision = "fp32";  ///< --precision
  std::uint64_t seed = 1;
  std::string output;  ///< -o FILE.h5
  bool force = false;
  bool fit = false;        ///< fit t(B) = a B + b over the batch sizes (P = 1)
  std::string time_model;  ///< --time-model FILE.h5 (with --fit)
};

/// Measures and prints the table on `out` (rank 0). Collective under mpirun.
int run_bench_partitions(const PartitionsOptions& options, std::ostream& out);

}  // namespace mbkit::tools::bench_partitions
