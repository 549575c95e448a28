// Delay traces (--induce trace:FILE): each worker's delay at each step, replayed from a file
// instead of drawn from a profile (straggler.hpp), e.g. a cluster's measured mini-batch times.
//
// CSV:  the header line `worker,step,seconds`, then a row per (worker, step) in any order:
//       worker and step 0-based integers, seconds a finite number >= 0. With W workers (the
//       largest worker + 1) and S steps (the largest step + 1), each of the W x S cells has
//       exactly one row.
// HDF5: root attributes format = "mbkit-delay-trace" and format_version = 1; the dataset
//       /trace/seconds, float64 [S][W] (row s: every worker's delay at step s, finite, >= 0);
//       /trace's string attribute `source` says where the values came from (may be empty).
//
// Replay wraps: step s of worker w is the cell [s mod S][w mod W], times --trace-scale.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mbkit/emulation/straggler.hpp"

namespace mbkit::emulation {

struct DelayTrace {
  std::string path;             ///< the file it was read from
  int workers = 0;              ///< W >= 1
  std::int64_t steps = 0;       ///< S >= 1
  std::vector<double> seconds;  ///< [steps][workers], finite, >= 0
  std::string source;           ///< what the values came from ("" when not said)
  double scale = 1;             ///< --trace-scale: every value is multiplied by it

  /// seconds[step mod S][worker mod W] x scale.
  double at(std::int64_t step, int worker) const;
  /// The mean delay over every cell, x scale (AMB's --time-limit auto adds it).
  double mean() const;
  /// SHA-256 of the values (W, S and the [S][W] float64 as little-endian bytes): the same
  /// trace in CSV and in HDF5 has the same digest.
  std::string digest() const;
  /// "FILE: 10 workers x 600 steps, mean 0.03 s, max 0.2 s (x2)".
  std::string describe() const;
};

/// The text after "trace:" of an --induce value, or "" when the value is not a trace.
std::string trace_path_of(const std::string& induce);

/// Reads and checks a whole trace file: HDF5 (by its signature) or CSV. A file that cannot be
/// read, or holds a bad header, a bad or negative or non-finite value, a duplicate row or a
/// missing (worker, step) cell, is a data error: one line naming the file, the line (CSV) or
/// the cell (HDF5), and what is wrong.
DelayTrace read_delay_trace(const std::string& path);
/// The CSV layout from text; `path` names it in errors.
DelayTrace parse_delay_trace_csv(std::string_view text, const std::string& path);
/// Writes the HDF5 layout through a temporary that is renamed into place.
void write_delay_trace(const std::string& path, const DelayTrace& trace);

/// How a PAI mini-batch-time file's normalised times become delays.
enum class PaiDelays {
  kExcess,  ///< a worker's time minus the fastest worker's at that iteration, / 1000
  kWhole,   ///< a worker's whole time, / 1000
};

/// Alibaba PAI's cluster-trace-gpu-v2020 mini-batch-time job files (job_N_norm.csv): a header
/// naming the columns worker, time (iteration) and batch_time_norm (0-1000) among others (gpu,
/// pandas' unnamed index), a row per worker per sampled iteration. Workers become 0..W-1 in the
/// order of their numbers, sampled iterations steps 0..S-1 in theirs; every worker needs a row
/// at every iteration. Errors name `path` and the line, as read_delay_trace's.
DelayTrace parse_pai_trace(std::string_view text, const std::string& path, PaiDelays delays);

/// One worker's delays from a trace, step after step (the trace's row of each step, wrapping).
class TraceReplay final : public DelaySource {
 public:
  TraceReplay(std::shared_ptr<const DelayTrace> trace, int worker);
  double next() override { return trace_->at(step_++, worker_); }

 private:
  std::shared_ptr<const DelayTrace> trace_;
  int worker_;
  std::int64_t step_ = 0;
};

}  // namespace mbkit::emulation
