// mb-bench-partitions: what micro-batching costs. For a batch of B samples split into P
// micro-batches of B/P, a step is the AMB worker's round without a deadline (every micro-batch
// computed, gradients accumulated: train::WorkerRound with the anytime rule) and one optimizer
// update, as the AMB original's test_perf_partitions.py times it (algorithms.md 1.12). Steps
// are timed after warm-up steps; a configuration's row gives the time per step and per sample,
// min/median/max over its steps, for each rank.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::bench {

/// One batch size and its split.
struct Split {
  int batch = 0;
  int partitions = 1;
  int micro_batch() const { return batch / partitions; }
  bool operator==(const Split&) const = default;
};

/// "16,32,64" into numbers >= 1 (a usage error naming `flag`).
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);
/// Every batch size with every partition count; usage errors for a count that does not divide
/// a batch size.
std::vector<Split> grid_splits(const std::vector<int>& batches, const std::vector<int>& partitions);
/// The original's sweep: B = 2^i for i = 2 ... log2(max_batch), P = 2^j for j = 0 ... i-1.
std::vector<Split> sweep_splits(int max_batch);

/// min, median (the mean of the middle two for an even count) and max.
struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread spread_of(std::vector<double> values);

/// The timed steps of one split on one rank.
struct SplitTimes {
  int rank = 0;
  Split split;
  std::vector<double> seconds;  ///< per timed step
};

/// A run of the benchmark: what ran where, and every rank's times.
struct PartitionsRun {
  std::string model;
  std::string data;
  std::string device;   ///< --device
  std::string backend;  ///< the backend's description (library, ISA, threads)
  std::string cpu_model;
  int threads = 0;
  int ranks = 1;
  int steps = 0, warmup_steps = 0;
  std::uint64_t seed = 0;
  std::vector<SplitTimes> rows;  ///< by split, then rank
};

/// The '#'-headed table: a few comment lines, then the columns, one word each.
void write_partitions_table(std::ostream& out, const PartitionsRun& run);
const char* partitions_columns();

/// The HDF5 file of -o (mbkit-formats.5, "Partition timings"), written under a temporary name.
void write_partitions_file(const std::string& path, const PartitionsRun& run);
PartitionsRun read_partitions_file(const std::string& path);

}  // namespace mbkit::bench
