// mb-report --scaling: throughput against the number of workers, as the keras-multi-gpu study
// tabulates it (speedup(N) = throughput(N) / throughput(1), efficiency = speedup / N) with
// tf_cnn_benchmarks' "images/sec: MEAN +/- UNCERTAINTY (jitter = JITTER)" per worker count.
//
// A run's throughput is the median of its per-step samples/s after its warm-up steps, the
// number mb-plot --type scaling draws (plot::warmup_steps, plot::throughput_stats,
// plot::scaling_table); several runs with one worker count give the median of theirs, and
// their steps are pooled for the mean, uncertainty and jitter.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::report {

struct ScalingEntry {
  double workers = 0;
  std::vector<std::string> logs;  ///< the runs with this number of workers
  std::size_t steps = 0;          ///< steps measured, over those runs
  double throughput = 0;          ///< samples/s: the median of the runs' medians
  double mean = 0;                ///< samples/s of the pooled steps, tf_cnn_benchmarks' mean
  double uncertainty = 0;
  double jitter = 0;
  double speedup = 0;  ///< throughput / the fewest workers' throughput x their number
  double efficiency = 0;
};

struct ScalingReport {
  int warmup_steps = -1;           ///< as requested (-1: a tenth of each run's steps)
  std::vector<ScalingEntry> rows;  ///< by increasing number of workers
  /// The fewest workers, which speedup is against: 1, else assumed to have scaled perfectly.
  double base_workers = 0;
};

/// Opens the logs (a missing or damaged one, or one whose steps are all warm-up, is a data
/// error naming it) and builds the table; `warmup_steps` -1 or more (else a usage error).
ScalingReport build_scaling(const std::vector<std::string>& logs, int warmup_steps);

/// '#'-headed table, then a line per worker count as tf_cnn_benchmarks prints its result.
void write_scaling_table(const ScalingReport& report, std::ostream& out);
void write_scaling_json(const ScalingReport& report, std::ostream& out);
void write_scaling_csv(const ScalingReport& report, std::ostream& out);

}  // namespace mbkit::report
