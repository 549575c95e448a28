// mb-bench-bandwidth: the time and bandwidth of the collectives and of the trainers' exchange
// (the library side of the tool; the measurements are mbkit/bench/measure.hpp).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mbkit::tools::bench_bandwidth {

struct BandwidthOptions {
  std::vector<std::string> ops = {"allreduce"};  ///< --op, or "all"
  std::string min_bytes = "4K";
  std::string max_bytes = "16M";
  int step_factor = 2;
  /// --also-bytes "814120,1M": sizes timed besides the range (a model's gradient: a trainer's
  /// --comm-model file then holds its point, where interpolation could miss a step).
  std::vector<std::string> also_bytes;
  int iters = 20;
  int warmup_iters = 5;
  /// --large-iters N --large-from SIZE: N timed iterations from SIZE on (both or neither).
  int large_iters = 0;
  std::string large_from;
  std::string dtype = "float";
  bool check = true;
  std::string append;  ///< results file to add the run to
  /// --op exchange: ps with each of these server counts ("1,2"), and ps and allreduce with
  /// each gradient encoding ("none,fp16,bf16,2bit:0.5"), as the trainers' --servers, --compress.
  std::vector<std::string> servers = {"1"};
  std::vector<std::string> compress = {"none"};
  double comm_timeout = 60;
  /// --device cpu|cuda|cuda:N: where the buffers live (cuda: the local rank's GPU, as the
  /// trainers choose it).
  std::string device = "cpu";
  /// --transport mpi|nccl; empty: mpi on the CPU, nccl on a GPU.
  std::string transport;
  bool ops_given = false;  ///< --op was given (with --fit, the collectives run too)
  /// --fit: time messages between every pair of ranks and fit the trainers' message model;
  /// --comm-model FILE: write it there (--force: over an existing file).
  bool fit = false;
  std::string comm_model;
  bool force = false;
  /// --min-r-squared R: the least r^2 of the line written (train::comm_fit_problem; the default
  /// is train::kCommModelMinRSquared).
  double min_r_squared = 0.9;
};

/// Measures and prints the table on `out` (rank 0). Returns the exit status: 1 when a check
/// found a wrong element. Collective under mpirun.
int run_bench_bandwidth(const BandwidthOptions& options, std::ostream& out);

}  // namespace mbkit::tools::bench_bandwidth
