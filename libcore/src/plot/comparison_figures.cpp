// A real run against its emulation, or against its repeat (mb-plot --type clock-compare): the
// two runs' step times as cumulative distributions over the steps both logged, and test accuracy
// against training time, real seconds beside emulated ones (plot/clock_compare.hpp says what
// training time is).
#include <algorithm>
#include <cmath>

#include "figure_builders.hpp"
#include "mbkit/plot/clock_compare.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::plot::figure_detail {
namespace {

// The empirical distribution function as steps: up by 1/n (in per cent) at each value.
Series cumulative_series(std::vector<double> values, const std::string& title,
                         const std::string& run, int color) {
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  std::sort(values.begin(), values.end());
  Series series{title, run, {}, {}, color, SeriesStyle::kLine};
  const double n = static_cast<double>(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    series.x.push_back(values[i]);
    series.y.push_back(100.0 * static_cast<double>(i) / n);
    series.x.push_back(values[i]);
    series.y.push_back(100.0 * static_cast<double>(i + 1) / n);
  }
  return series;
}

}  // namespace

std::vector<Pane> build_clock_compare_panes(const std::vector<RunRef>& runs,
                                            const PlotSettings& settings) {
  if (runs.size() != 2) {
    usage_error(
        cat("clock-compare: two logs are expected, the real run and its emulation or "
            "its repeat (",
            runs.size(), " given)"));
  }
  const RunLog& real = *runs[0].log;
  const RunLog& emulated = *runs[1].log;
  if (const std::string problem = clock_compare_problem(real, emulated, true); !problem.empty()) {
    usage_error(cat("clock-compare: ", problem));
  }
  const std::string second =
      emulated.virtual_clock() ? "emulated (virtual clock)" : "repeat (wall clock)";
  const std::string names[2] = {
      settings.user_labels ? runs[0].label : std::string("real (wall clock)"),
      settings.user_labels ? runs[1].label : second};

  // Step times: the steps both runs logged, as mb-report --compare compares them.
  const std::size_t warmup =
      settings.warmup_steps > 0 ? static_cast<std::size_t>(settings.warmup_steps) : 0;
  const AlignedSteps steps =
      align_steps(real.column("steps", "step"), real.column("steps", "step_time"),
                  emulated.column("steps", "step"), emulated.column("steps", "step_time"), warmup);
  if (steps.step.empty()) {
    data_error(cat("clock-compare: ", real.path(), " and ", emulated.path(),
                   " have no step in common", warmup > 0 ? " after the warm-up" : ""));
  }
  std::vector<double> pooled = steps.real;
  pooled.insert(pooled.end(), steps.emulated.begin(), steps.emulated.end());
  // A few far-out steps (the first, a stall) would squeeze the rest into the left edge: the
  // axis then ends at 1.5 x the 95th percentile, and the label says how many lie beyond.
  double upper = finite_max(pooled);
  const double p95 = quantile(pooled, 0.95);
  if (upper > 3 * p95) upper = 1.5 * p95;
  const TimeUnit unit = choose_time_unit(upper);
  Pane distribution;
  distribution.name = "clock-compare-step-time";
  distribution.ylabel = "Steps at most this long (%)";
  distribution.xmin = 0;
  distribution.xmax = 1.02 * upper / unit.seconds;
  distribution.ymin = 0;
  distribution.ymax = 105;
  distribution.key = KeyPlace::kBottomRight;
  const auto beyond = std::count_if(pooled.begin(), pooled.end(),
                                    [&](double v) { return std::isfinite(v) && v > upper * 1.02; });
  // The dashed lines are the medians (mb-plot(1) says so: the label has no room).
  std::string xlabel = cat("Step time (", unit.name);
  if (beyond > 0) {
    xlabel += cat(
        "; ",
        strprintf("%.2g", 100.0 * static_cast<double>(beyond) / static_cast<double>(pooled.size())),
        "% beyond");
  }
  distribution.xlabel = xlabel + ")";
  const std::vector<double>* times[2] = {&steps.real, &steps.emulated};
  for (int r = 0; r < 2; ++r) {
    const double middle = median(*times[r]);
    distribution.series.push_back(
        cumulative_series(scaled(*times[r], unit.seconds), names[r], names[r], r));
    if (std::isfinite(middle)) distribution.vertical_lines.push_back({middle / unit.seconds, r});
  }

  // Accuracy against training time, each run on its clock.
  Pane accuracy;
  accuracy.name = "clock-compare-accuracy";
  accuracy.ylabel = "Test accuracy (%)";
  accuracy.key = KeyPlace::kBottomRight;
  accuracy.xmin = 0;
  std::vector<double> eval_times[2] = {training_times(real), training_times(emulated)};
  double longest = std::max(finite_max(eval_times[0]), finite_max(eval_times[1]));
  if (std::isfinite(settings.xmax)) longest = settings.xmax;
  const TimeUnit time_unit = choose_time_unit(longest);
  accuracy.xlabel = cat("Training time (", time_unit.name, ", each run's clock)");
  if (std::isfinite(settings.xmax)) accuracy.xmax = settings.xmax / time_unit.seconds;
  accuracy.ymax = settings.ymax;
  if (std::isfinite(settings.target)) {
    accuracy.horizontal_lines.push_back(
        {100 * settings.target, cat("target ", strprintf("%.4g", 100 * settings.target), "%")});
  }
  for (int r = 0; r < 2; ++r) {
    auto y = runs[static_cast<std::size_t>(r)].log->column("eval", "accuracy");
    for (double& value : y) value *= 100;
    accuracy.series.push_back({names[r], names[r], scaled(eval_times[r], time_unit.seconds), y, r,
                               y.size() <= 60 ? SeriesStyle::kLinePoints : SeriesStyle::kLine});
  }
  return {distribution, accuracy};
}

}  // namespace mbkit::plot::figure_detail
