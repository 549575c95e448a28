// A metric log as mb-plot reads it: opened SWMR-safe (finished, live or left by a killed
// writer), its configuration flattened for labels, and its columns read on first use as
// doubles, cut to the rows every column of their table holds.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/labels.hpp"

namespace mbkit::plot {

class RunLog {
 public:
  /// Opens a log; a missing file or one that is not a metric log is a data error naming it.
  static RunLog open(const std::string& path);

  const std::string& path() const { return path_; }
  const metrics::RunInfo& info() const { return info_; }
  /// The configuration and root attributes, for labels (see RunDescription).
  const RunDescription& description() const { return description_; }
  /// A field of the configuration or attributes; "" when absent.
  std::string field(const std::string& key) const;
  /// True when the root attribute "clock" says "virtual": times are emulated, not measured.
  bool virtual_clock() const { return virtual_clock_; }
  /// The workers that computed gradients (config "workers", else world_size).
  int workers() const;
  /// The induced straggler profile of the run (config "induce_spec", else "induce"); nullopt
  /// when the run induced none. A profile that does not parse is a data error.
  std::optional<emulation::StragglerProfile> straggler_profile() const;

  /// True when the dataset /TABLE/COLUMN exists.
  bool has_column(const std::string& table, const std::string& column) const;
  /// Rows that every column of /TABLE holds (after a crash columns may differ in length) and
  /// that the writer committed (metrics::readable_rows).
  std::size_t rows(const std::string& table) const;
  /// True when the column holds a finite value in its first rows(table) rows (a run that
  /// diverged at once logs only NaN losses).
  bool has_finite_value(const std::string& table, const std::string& column) const;
  /// The column as doubles (integers converted), `rows(table)` long. A missing dataset is a
  /// data error naming the file and the dataset.
  const std::vector<double>& column(const std::string& table, const std::string& column) const;

 private:
  RunLog() = default;
  std::string path_;
  io::File file_;
  metrics::RunInfo info_;
  RunDescription description_;
  bool virtual_clock_ = false;
  mutable std::map<std::string, std::size_t> rows_;
  mutable std::map<std::string, std::vector<double>> columns_;
};

}  // namespace mbkit::plot
