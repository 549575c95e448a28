// Per-step quantiles over the workers (/worker_summary, --worker-table summary or sample:K):
// what a log without every worker's rows can show of their distribution, as bands over the
// steps where a histogram would need every row.
#include <algorithm>
#include <cmath>

#include "figure_builders.hpp"

namespace mbkit::plot::figure_detail {
namespace {

Pane build_quantiles(const HistogramSpec& spec, const std::vector<RunRef>& runs,
                     const PlotSettings& settings) {
  Pane pane;
  pane.logy = settings.logy;
  pane.ymax = settings.ymax;
  pane.key = KeyPlace::kTopRight;
  double largest = 0;
  double last_step = 0;
  for (const auto& run : runs) {
    largest =
        std::max(largest, finite_max(run.log->column("worker_summary", spec.column + "_max")));
    last_step = std::max(last_step, finite_max(run.log->column("worker_summary", "step")));
  }
  TimeUnit unit{"", 1.0};
  if (spec.time) unit = choose_time_unit(largest);
  pane.ylabel = spec.time ? cat(spec.xlabel, " (", unit.name, ")") : spec.xlabel;
  const CountScale steps = choose_count_scale(last_step);
  pane.xlabel = count_label("Step", "", steps);
  pane.integer_x = steps.prefix.empty();
  if (std::isfinite(settings.xmax)) pane.xmax = settings.xmax / steps.divisor;
  // The median as a line, p10 and p90 dashed, the extremes faint: a line style per quantile
  // and a colour per run.
  const struct {
    const char* suffix;
    const char* name;
    SeriesStyle style;
  } kLines[] = {{"_p50", "median", SeriesStyle::kLine},
                {"_p10", "p10", SeriesStyle::kDashedLine},
                {"_p90", "p90", SeriesStyle::kDashedLine},
                {"_min", "min", SeriesStyle::kFaintLine},
                {"_max", "max", SeriesStyle::kFaintLine}};
  for (const auto& run : runs) {
    const auto x = scaled(run.log->column("worker_summary", "step"), steps.divisor);
    for (const auto& line : kLines) {
      const auto y =
          scaled(run.log->column("worker_summary", spec.column + line.suffix), unit.seconds);
      const std::string title =
          settings.title_runs ? cat(run.label, ": ", line.name) : std::string(line.name);
      pane.series.push_back({line.style == SeriesStyle::kFaintLine ? std::string() : title,
                             cat(run.label, " ", line.name), x, y, run.color, line.style});
    }
  }
  return pane;
}

}  // namespace

FigureType worker_quantiles(const std::string& name, const std::string& summary,
                            const HistogramSpec& spec) {
  FigureType type;
  type.name = name;
  type.kind = FigureKind::kCurve;
  type.summary = summary;
  type.needs = {{"worker_summary", "step"}, {"worker_summary", spec.column + "_p50"}};
  type.needs_rows_of = "a run logged with --worker-table summary or sample:K";
  type.build = [spec](const std::vector<RunRef>& runs, const PlotSettings& settings) {
    return build_quantiles(spec, runs, settings);
  };
  return type;
}

}  // namespace mbkit::plot::figure_detail
