// DBSL's time model of one device: seconds per batch of x samples, t(x) = a*x + b
// (algorithms.md §3). mb-bench-partitions --fit measures and writes it; mb-train-dbsl reads it
// (--time-model), takes it from the command line (--time-model-ab) or calibrates it itself.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mbkit::train {

/// t(x) = a*x + b seconds for a batch of x samples: a is the cost of a sample, b the fixed cost
/// of a step (launches, the update, synchronisation).
struct TimeModel {
  double a = 0;  ///< seconds per sample
  double b = 0;  ///< seconds per batch
  double seconds(double batch_size) const { return a * batch_size + b; }
};

/// Why t(x) = a*x + b cannot time a step ("a = -0.002 is negative"), or "" when it can: a and b
/// finite, neither negative, not both 0. A plan from any other model is nonsense (negative round
/// times), so every source of a model (--time-model-ab, a --time-model file, a fit about to be
/// written) is held to it.
std::string time_model_problem(const TimeModel& model);

/// A least-squares line through measured (batch size, seconds) points and how well it fits.
struct TimeModelFit {
  TimeModel model;
  double r_squared = 0;              ///< 1 - SS_res / SS_tot; 1 when every point is on the line
  double max_relative_residual = 0;  ///< max |t(x_i) - y_i| / y_i
};

/// Fits t(x) = a*x + b by least squares with b >= 0 (where the free line's intercept is negative,
/// noise around a small fixed cost, the line through the origin). Needs at least two distinct
/// batch sizes and positive finite times; anything else is a usage error that says which. The
/// fit's a may still be 0 or negative (times that do not grow with the batch).
TimeModelFit fit_time_model(std::span<const double> batch_sizes, std::span<const double> seconds);

/// One device's measurement: the points, the fit, and what it was measured on.
struct TimeModelRecord {
  std::int64_t rank = 0;  ///< MPI rank that measured (0 when run alone)
  std::string host;
  std::string model;  ///< zoo model name
  std::int64_t threads = 0;
  std::string device;     ///< the backend's description, e.g. "cpu (oneDNN, avx512_core)"
  std::string cpu_model;  ///< util::cpu_model_name()
  std::vector<std::pair<std::string, std::string>> library_versions;
  std::vector<double> batch_sizes;  ///< samples per batch, one per point
  std::vector<double> seconds;      ///< median seconds per batch, one per point
  TimeModelFit fit;
};

/// Writes the records (one per rank, in rank order) to `path` atomically (format "mbkit-time-model"
/// in mbkit-formats(5)). A fit that is no usable model (time_model_problem) is refused, naming
/// the rank and why, and nothing is written.
void write_time_model(const std::string& path, const std::vector<TimeModelRecord>& records);

/// Reads a time-model file; a missing, damaged or inconsistent file, or one holding a model that
/// is not usable (time_model_problem), is a data error naming it.
std::vector<TimeModelRecord> read_time_model(const std::string& path);

/// The model a rank uses: its own record when the file has one per rank, the only record when it
/// has one. Any other count is a data error naming the file.
TimeModel time_model_for_rank(const std::vector<TimeModelRecord>& records, std::int64_t rank,
                              const std::string& path);

}  // namespace mbkit::train
