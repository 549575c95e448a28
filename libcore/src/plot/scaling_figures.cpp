// Throughput scaling: runs that differ in their number of workers, grouped into lines, as
// throughput, speedup and efficiency against the workers (median samples/s after warm-up).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "figure_builders.hpp"
#include "mbkit/plot/labels.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::plot::figure_detail {
namespace {

Pane scaling_pane(const std::string& ylabel, KeyPlace key) {
  Pane pane;
  pane.xlabel = "Workers";
  pane.ylabel = ylabel;
  pane.integer_x = true;
  pane.key = key;
  pane.ymin = 0;
  return pane;
}

// The median samples/s of a run after its warm-up steps.
double run_throughput(const RunLog& log, const PlotSettings& settings) {
  const auto& throughput = log.column("steps", "throughput");
  const std::size_t skip = warmup_steps(throughput.size(), settings.warmup_steps);
  if (skip >= throughput.size()) {
    data_error(cat(log.path(), ": ", throughput.size(), " steps, all of them warm-up (",
                   settings.warmup_steps >= 0 ? "--warmup-steps " : "warm-up ", skip, ")"));
  }
  return throughput_stats(log.column("steps", "samples"), log.column("steps", "step_time"),
                          throughput, skip)
      .median;
}

}  // namespace

std::vector<Pane> build_scaling_panes(const std::vector<RunRef>& runs,
                                      const PlotSettings& settings) {
  // Series: runs that differ only in their number of workers. --label names them (runs given
  // the same label are one series); otherwise they are labelled by what differs apart from
  // the workers, and single-process runs are the one-worker baseline of every series.
  std::vector<std::string> order;
  std::map<std::string, std::vector<ScalingPoint>> points;
  std::vector<ScalingPoint> baseline;
  std::set<double> all_workers;
  const auto add = [&](const std::string& group, ScalingPoint point) {
    if (!points.contains(group)) order.push_back(group);
    points[group].push_back(point);
    all_workers.insert(point.workers);
  };
  if (settings.user_labels) {
    for (const auto& run : runs) {
      add(run.label, {static_cast<double>(run.log->workers()), run_throughput(*run.log, settings)});
    }
  } else {
    std::vector<const RunRef*> distributed;
    std::vector<RunDescription> descriptions;
    for (const auto& run : runs) {
      const ScalingPoint point{static_cast<double>(run.log->workers()),
                               run_throughput(*run.log, settings)};
      if (run.log->info().world_size <= 1) {
        baseline.push_back(point);
        all_workers.insert(point.workers);
      } else {
        distributed.push_back(&run);
        descriptions.push_back(run.log->description());
      }
    }
    const auto groups =
        group_labels(descriptions, {"workers", "world_size", "global_batch_size", "data",
                                    "test_data", "steps", "epochs", "time_budget", "seed"});
    for (std::size_t i = 0; i < distributed.size(); ++i) {
      add(groups[i], {static_cast<double>(distributed[i]->log->workers()),
                      run_throughput(*distributed[i]->log, settings)});
    }
    if (order.empty() && !baseline.empty()) order.push_back("");
    for (const auto& group : order) {
      auto& group_points = points[group];
      const bool has_one = std::any_of(group_points.begin(), group_points.end(),
                                       [](const ScalingPoint& p) { return p.workers == 1; });
      if (!has_one) group_points.insert(group_points.end(), baseline.begin(), baseline.end());
    }
  }
  if (all_workers.size() < 2) {
    data_error(cat("scaling needs runs with different numbers of workers: all ", runs.size(),
                   " runs have ", *all_workers.begin()));
  }
  std::map<std::string, int> colors;
  for (std::size_t g = 0; g < order.size(); ++g) colors[order[g]] = static_cast<int>(g);

  Pane throughput = scaling_pane("Throughput (samples/s)", KeyPlace::kTopLeft);
  Pane speedup = scaling_pane("Speedup", KeyPlace::kTopLeft);
  Pane efficiency = scaling_pane("Efficiency (%)", KeyPlace::kBottomLeft);
  const double low = *all_workers.begin();
  const double high = *all_workers.rbegin();
  // Worker counts spread over decades (1 to 64) read better on a log axis.
  const bool logx = low >= 1 && high / low > 8;
  for (Pane* pane : {&throughput, &speedup, &efficiency}) {
    pane->xtics.assign(all_workers.begin(), all_workers.end());
    pane->logx = logx;
    pane->logy = settings.logy && pane == &throughput;
    if (pane->logy) pane->ymin = kUnset;
    // Room around the first and last points.
    pane->xmin = logx ? low / 1.15 : low - 0.05 * (high - low);
    pane->xmax = logx ? high * 1.15 : high + 0.05 * (high - low);
  }
  throughput.name = "scaling-throughput";
  speedup.name = "scaling-speedup";
  efficiency.name = "scaling-efficiency";
  const bool titled = order.size() > 1;
  for (const auto& group : order) {
    const auto table = scaling_table(points[group]);
    Series t{titled ? group : "", group, {}, {}, colors[group], SeriesStyle::kLinePoints};
    Series s = t;
    Series e = t;
    s.title.clear();
    e.title.clear();
    for (const auto& row : table) {
      t.x.push_back(row.workers);
      t.y.push_back(row.throughput);
      s.x.push_back(row.workers);
      s.y.push_back(row.speedup);
      e.x.push_back(row.workers);
      e.y.push_back(100.0 * row.efficiency);
    }
    throughput.series.push_back(std::move(t));
    speedup.series.push_back(std::move(s));
    efficiency.series.push_back(std::move(e));
  }
  speedup.series.push_back(
      {"ideal", "ideal", {low, high}, {low, high}, -1, SeriesStyle::kDashedLine});
  efficiency.series.push_back(
      {"ideal", "ideal", {low, high}, {100.0, 100.0}, -1, SeriesStyle::kDashedLine});
  // Throughputs in thousands or millions when large.
  double fastest = 0;
  for (const auto& series : throughput.series) fastest = std::max(fastest, finite_max(series.y));
  const CountScale count = choose_count_scale(fastest);
  throughput.ylabel = count_label("Throughput", "samples/s", count);
  for (auto& series : throughput.series) series.y = scaled(series.y, count.divisor);
  // The ideal efficiency, 100 %, below the top of its pane.
  double top_efficiency = 100;
  for (const auto& series : efficiency.series) {
    for (const double y : series.y) top_efficiency = std::max(top_efficiency, y);
  }
  efficiency.ymax = 1.1 * top_efficiency;
  if (std::isfinite(settings.ymax)) {
    for (Pane* pane : {&throughput, &speedup, &efficiency}) pane->ymax = settings.ymax;
    throughput.ymax /= count.divisor;  // given in samples/s
  }
  return {throughput, speedup, efficiency};
}

}  // namespace mbkit::plot::figure_detail
