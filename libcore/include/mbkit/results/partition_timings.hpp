// mb-bench-partitions' results: the '#'-headed table it prints and the HDF5 file of -o
// (mbkit-formats.5, "Partition timings"), which mb-plot --type partitions reads. A module of its
// own, as metrics/ is for the metric log, so that the readers need none of the benchmark.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::results {

/// One batch size and its split.
struct Split {
  int batch = 0;
  int partitions = 1;
  int micro_batch() const { return batch / partitions; }
  bool operator==(const Split&) const = default;
};

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
  /// The first warm-up step's seconds (NaN: none). The first row's is the process's first
  /// step, a trainer's step 0: its one-time costs (the compute model's warm-up W) are there.
  double first_seconds = std::numeric_limits<double>::quiet_NaN();
  /// The loader's background thread's CPU seconds per batch over the timed steps (0: it loads
  /// inline, in the steps' time; NaN: not measured, a file from before the column). A free core
  /// hides it from the step; a CPU quota does not (the compute model's L).
  double load_seconds = std::numeric_limits<double>::quiet_NaN();
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

}  // namespace mbkit::results
