// What the registry of figure types (figure_types.cpp) is built from: each family of figure
// types has its builders in a file of its own (curve_figures.cpp, distribution_figures.cpp,
// scaling_figures.cpp, comparison_figures.cpp) declared here, beside the axis helpers they
// share. A new family is a file and its declarations here, and its types' entries in the
// registry. Internal to the plot module.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/plot/figure.hpp"
#include "mbkit/plot/figure_types.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot::figure_detail {

// ------------------------------------------------------------------------------------------
// Shared pieces

inline double finite_max(const std::vector<double>& values) {
  double best = -std::numeric_limits<double>::infinity();
  for (const double v : values) {
    if (std::isfinite(v)) best = std::max(best, v);
  }
  return best;
}

inline std::vector<double> scaled(const std::vector<double>& values, double divisor) {
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i] / divisor;
  return out;
}

// Three significant digits, without trailing zeros.
inline std::string short_number(double value) {
  return strprintf("%.3g", value);
}

// "Throughput (k samples/s)": a label with its unit, the unit's prefix when the values are
// shown in thousands or millions.
inline std::string count_label(const std::string& name, const std::string& unit,
                               const CountScale& scale) {
  if (scale.prefix.empty()) return unit.empty() ? name : cat(name, " (", unit, ")");
  return unit.empty() ? cat(name, " (", scale.prefix, ")")
                      : cat(name, " (", scale.prefix, " ", unit, ")");
}

// ------------------------------------------------------------------------------------------
// Curves of /steps and /eval (curve_figures.cpp)

struct CurveSpec {
  std::string table;  ///< "steps" or "eval"
  std::string x;      ///< "step", "time" or "epoch"
  std::string y;
  std::string ylabel;
  /// Counts (samples, samples/s): shown in thousands or millions when large, this their unit.
  std::optional<std::string> count_unit;
  bool smoothable = false;  ///< --smooth applies (noisy measurements, not counters)
  bool cumulative = false;  ///< draw the running sum of y
  bool marks = false;       ///< few points (evaluations): mark them
  KeyPlace key = KeyPlace::kTopRight;
  bool percent = false;  ///< a fraction (accuracy), drawn in percent as mb-report prints it
};

/// A curve type: `spec.y` against `spec.x` of `spec.table`, a line per run.
FigureType curve(const std::string& name, const std::string& summary, const CurveSpec& spec);

// ------------------------------------------------------------------------------------------
// Distributions: histograms of /workers, /collect and /steps, and the induced straggler
// distribution (distribution_figures.cpp)

struct HistogramSpec {
  std::string table;
  std::string column;
  std::string xlabel;    ///< without the unit
  bool time = false;     ///< seconds: drawn in a unit chosen from the values, bins from 0
  bool integer = false;  ///< counts: one bin per whole number
};

/// A histogram type of `spec.column`; `needs_rows_of` says what kind of run has its rows.
FigureType histogram(const std::string& name, const std::string& summary, const HistogramSpec& spec,
                     const std::string& needs_rows_of);

/// Per-step quantiles over the workers of `spec.column` (/worker_summary): the median, p10 and
/// p90, min and max against the step, lines per run (quantile_figures.cpp).
FigureType worker_quantiles(const std::string& name, const std::string& summary,
                            const HistogramSpec& spec);

/// The density of every distinct straggler profile of the runs, point masses as arrows.
Pane build_straggler_distribution(const std::vector<RunRef>& runs, const PlotSettings& settings);
/// Refuses a run that induced no stragglers.
Problem check_stragglers(const RunLog& run);

// ------------------------------------------------------------------------------------------
// Throughput scaling (scaling_figures.cpp)

/// Throughput, speedup and efficiency against the workers, a line per group of runs.
std::vector<Pane> build_scaling_panes(const std::vector<RunRef>& runs,
                                      const PlotSettings& settings);
/// Straggler scaling: the mean step time against the workers, beside E[slowest of N delays] +
/// the rest of each FMB run's step; with --target, the time each run took to reach it.
std::vector<Pane> build_workers_panes(const std::vector<RunRef>& runs,
                                      const PlotSettings& settings);

// ------------------------------------------------------------------------------------------
// A real run against its emulation (comparison_figures.cpp)

/// The two runs' step-time distributions (cumulative, over the steps both logged) and their
/// test accuracy against training time, each on its own clock.
std::vector<Pane> build_clock_compare_panes(const std::vector<RunRef>& runs,
                                            const PlotSettings& settings);

}  // namespace mbkit::plot::figure_detail
