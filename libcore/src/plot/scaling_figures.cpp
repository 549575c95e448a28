// Scaling: runs that differ in their number of workers, grouped into lines, as throughput,
// speedup and efficiency against the workers (median samples/s after warm-up); and, for
// straggler experiments (--emulate), the emulated step time against the workers beside what the
// slowest of N induced delays predicts, and the time each run took to reach --target.
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

namespace {

// One run of a straggler-scaling figure.
struct WorkersPoint {
  double workers = 0;
  double step_time = 0;    ///< mean emulated (or real) seconds a step
  double theory = kUnset;  ///< E[largest of N delays] + the rest of the run's mean step
  double time_to_target = kUnset;
};

WorkersPoint workers_point(const RunLog& log, const PlotSettings& settings) {
  WorkersPoint point;
  point.workers = static_cast<double>(log.workers());
  const auto& step_times = log.column("steps", "step_time");
  double total = 0;
  for (const double t : step_times) total += t;
  point.step_time = total / static_cast<double>(std::max<std::size_t>(1, step_times.size()));
  // A synchronous FMB step waits for the slowest worker: its mean is E[max of N delays] plus
  // what the steps took besides their largest delay (compute, messages, the update).
  const auto profile = log.straggler_profile();
  // The longest delay of each step: from every worker's rows, or (--worker-table summary,
  // sample:K, where /workers holds some workers or none) the summary's maximum.
  const bool summarised = log.rows("worker_summary") > 0;
  const std::string table = summarised ? "worker_summary" : "workers";
  const std::string column = summarised ? "sleep_time_max" : "sleep_time";
  if (profile && log.info().tool == "mb-train-fmb" && log.has_column(table, column)) {
    const auto& steps = log.column(table, "step");
    const auto& sleeps = log.column(table, column);
    std::map<double, double> longest;
    for (std::size_t i = 0; i < steps.size() && i < sleeps.size(); ++i) {
      longest[steps[i]] = std::max(longest[steps[i]], sleeps[i]);
    }
    const auto& step_numbers = log.column("steps", "step");
    double rest = 0;
    std::size_t counted = 0;
    for (std::size_t i = 0; i < step_numbers.size() && i < step_times.size(); ++i) {
      if (const auto found = longest.find(step_numbers[i]); found != longest.end()) {
        rest += step_times[i] - found->second;
        ++counted;
      }
    }
    if (counted > 0) {
      point.theory = profile->expected_max(log.workers()) + rest / static_cast<double>(counted);
    }
  }
  if (std::isfinite(settings.target) && log.has_column("eval", "accuracy")) {
    const auto& accuracy = log.column("eval", "accuracy");
    const auto& time = log.column("eval", "time");
    for (std::size_t i = 0; i < accuracy.size() && i < time.size(); ++i) {
      if (accuracy[i] >= settings.target) {
        point.time_to_target = time[i];
        break;
      }
    }
  }
  return point;
}

}  // namespace

std::vector<Pane> build_workers_panes(const std::vector<RunRef>& runs,
                                      const PlotSettings& settings) {
  std::vector<RunDescription> descriptions;
  for (const auto& run : runs) descriptions.push_back(run.log->description());
  const auto groups =
      settings.user_labels
          ? std::vector<std::string>()
          : group_labels(descriptions, {"workers", "world_size", "emulate", "global_batch_size",
                                        "steps", "epochs", "time_budget", "seed"});
  std::vector<std::string> order;
  std::map<std::string, std::vector<WorkersPoint>> points;
  std::set<double> all_workers;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string group = settings.user_labels ? runs[i].label : groups[i];
    if (!points.contains(group)) order.push_back(group);
    points[group].push_back(workers_point(*runs[i].log, settings));
    all_workers.insert(points[group].back().workers);
  }
  if (all_workers.size() < 2) {
    data_error(cat("workers needs runs with different numbers of workers: all ", runs.size(),
                   " runs have ", *all_workers.begin()));
  }
  Pane step = scaling_pane("Mean step time (s)", KeyPlace::kTopLeft);
  Pane reach = scaling_pane(std::isfinite(settings.target)
                                ? cat("Time to ", short_number(100 * settings.target), "% (s)")
                                : "",
                            KeyPlace::kTopLeft);
  const double low = *all_workers.begin(), high = *all_workers.rbegin();
  for (Pane* pane : {&step, &reach}) {
    pane->xtics.assign(all_workers.begin(), all_workers.end());
    pane->logx = low >= 1 && high / low > 8;
    pane->xmin = pane->logx ? low / 1.15 : low - 0.05 * (high - low);
    pane->xmax = pane->logx ? high * 1.15 : high + 0.05 * (high - low);
  }
  step.name = "workers-step-time";
  reach.name = "workers-time-to-target";
  const bool titled = order.size() > 1;
  for (std::size_t g = 0; g < order.size(); ++g) {
    const auto& group = points[order[g]];
    std::vector<double> workers, step_times, theories, times_to_target;
    for (const auto& p : group) {
      workers.push_back(p.workers);
      step_times.push_back(p.step_time);
      theories.push_back(p.theory);
      times_to_target.push_back(p.time_to_target);
    }
    const int color = static_cast<int>(g);
    Series measured{titled ? order[g] : "", order[g], {}, {}, color, SeriesStyle::kLinePoints};
    Series theory{cat(titled ? order[g] + ": " : "", "theory"),
                  order[g] + " theory",
                  {},
                  {},
                  color,
                  SeriesStyle::kDashedLine};
    Series reached{titled ? order[g] : "", order[g], {}, {}, color, SeriesStyle::kLinePoints};
    // Several runs of a group at one N (its seeds): their mean, with their range as error bars.
    const auto fill = [](Series& series, const std::vector<MeanPoint>& means, bool ranged) {
      const bool several =
          std::any_of(means.begin(), means.end(), [](const MeanPoint& p) { return p.count > 1; });
      for (const auto& p : means) {
        series.x.push_back(p.x);
        series.y.push_back(p.mean);
        if (ranged && several) {
          series.y_low.push_back(p.min);
          series.y_high.push_back(p.max);
        }
      }
    };
    fill(measured, mean_by_x(workers, step_times), true);
    fill(theory, mean_by_x(workers, theories), false);
    fill(reached, mean_by_x(workers, times_to_target), true);
    step.series.push_back(std::move(measured));
    if (!theory.x.empty()) step.series.push_back(std::move(theory));
    if (!reached.x.empty()) reach.series.push_back(std::move(reached));
  }
  if (!std::isfinite(settings.target)) return {step};
  if (reach.series.empty()) {
    data_error(
        cat("workers --target ", short_number(100 * settings.target), "%: no run reached it"));
  }
  return {step, reach};
}

}  // namespace mbkit::plot::figure_detail
