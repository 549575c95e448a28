// Curves of /steps and /eval against the step, time or epoch (the AMB original's loss_vs_step
// ... cumsum_vs_step): a line per run, smoothed on request, counts in thousands or millions.
#include <algorithm>
#include <cmath>

#include "figure_builders.hpp"

namespace mbkit::plot::figure_detail {
namespace {

// "Time (s)"; "Emulated time (s)" when every run ran on the virtual clock (its times are
// those of the cluster it emulated, not measured).
std::string time_axis_label(const std::vector<RunRef>& runs, const TimeUnit& unit) {
  std::size_t emulated = 0;
  for (const auto& run : runs) emulated += run.log->virtual_clock() ? 1 : 0;
  if (emulated == 0) return cat("Time (", unit.name, ")");
  if (emulated == runs.size()) return cat("Emulated time (", unit.name, ")");
  return cat("Time (", unit.name, "; emulated for some runs)");
}

Pane build_curve(const CurveSpec& spec, const std::vector<RunRef>& runs,
                 const PlotSettings& settings) {
  Pane pane;
  pane.ylabel = spec.ylabel;
  pane.key = spec.key;
  pane.logy = settings.logy;
  pane.ymax = settings.ymax;
  // --x-axis epoch: every curve against the epoch column both tables have.
  const std::string x_column = settings.x_epoch ? std::string("epoch") : spec.x;
  // x: seconds in a time unit, or steps (in thousands or millions for long runs).
  double longest = 0;
  for (const auto& run : runs) {
    longest = std::max(longest, finite_max(run.log->column(spec.table, x_column)));
  }
  if (std::isfinite(settings.xmax)) longest = settings.xmax;
  double x_divisor = 1;
  if (x_column == "time") {
    const TimeUnit unit = choose_time_unit(longest);
    x_divisor = unit.seconds;
    pane.xlabel = time_axis_label(runs, unit);
    pane.xmin = 0;  // from the start of the runs, not from their first evaluation
  } else if (x_column == "epoch") {
    pane.xlabel = "Epoch";  // DBSL's curves: an epoch is a push per worker
  } else {
    const CountScale steps = choose_count_scale(longest);
    x_divisor = steps.divisor;
    pane.xlabel = count_label("Step", "", steps);
    pane.integer_x = steps.prefix.empty();
  }
  if (std::isfinite(settings.xmax)) pane.xmax = settings.xmax / x_divisor;
  CountScale count;
  if (spec.count_unit) {
    double largest = 0;
    for (const auto& run : runs) {
      const auto& y = run.log->column(spec.table, spec.y);
      largest = std::max(largest, spec.cumulative ? cumulative_sum(y).back() : finite_max(y));
    }
    count = choose_count_scale(largest);
    pane.ylabel = count_label(spec.ylabel, *spec.count_unit, count);
    if (std::isfinite(pane.ymax)) pane.ymax /= count.divisor;
  }
  if (spec.percent && std::isfinite(settings.target)) {
    pane.horizontal_lines.push_back(
        {100 * settings.target, cat("target ", strprintf("%.4g", 100 * settings.target), "%")});
  }
  for (const auto& run : runs) {
    const auto x = scaled(run.log->column(spec.table, x_column), x_divisor);
    // Evaluations are marked, unless there are so many that the marks would merge.
    const bool marks = spec.marks && x.size() <= 60;
    auto y = run.log->column(spec.table, spec.y);
    if (spec.cumulative) y = cumulative_sum(y);
    y = scaled(y, count.divisor);
    if (spec.percent) {
      for (double& value : y) value *= 100;
    }
    const std::string title = settings.title_runs ? run.label : std::string();
    if (spec.smoothable && settings.smooth > 1) {
      pane.series.push_back({"", run.label, x, y, run.color, SeriesStyle::kFaintLine});
      pane.series.push_back(
          {title, run.label, x, smooth(y, settings.smooth), run.color, SeriesStyle::kLine});
    } else {
      pane.series.push_back({title, run.label, x, y, run.color,
                             marks ? SeriesStyle::kLinePoints : SeriesStyle::kLine});
    }
  }
  return pane;
}

}  // namespace

FigureType curve(const std::string& name, const std::string& summary, const CurveSpec& spec) {
  FigureType type;
  type.name = name;
  type.kind = FigureKind::kCurve;
  type.summary = summary;
  type.needs = {{spec.table, spec.x}, {spec.table, spec.y}};
  type.needs_rows_of = spec.table == "eval" ? "evaluations (--eval-every)" : "logged steps";
  type.build = [spec](const std::vector<RunRef>& runs, const PlotSettings& settings) {
    return build_curve(spec, runs, settings);
  };
  return type;
}

}  // namespace mbkit::plot::figure_detail
