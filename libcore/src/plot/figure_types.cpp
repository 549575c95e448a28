// The registry of figure types and their builders: curves of /steps and /eval, histograms of
// /workers, /collect and /steps, the induced straggler distribution, throughput scaling, and
// panels of the others (the AMB original's plot set, src/plot_perf_amb.py).
#include "mbkit/plot/figure_types.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "mbkit/plot/labels.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

// ------------------------------------------------------------------------------------------
// Shared pieces

// "Time (s)"; "Emulated time (s)" when every run ran on the virtual clock (its times are
// those of the cluster it emulated, not measured).
std::string time_axis_label(const std::vector<RunRef>& runs, const TimeUnit& unit) {
  std::size_t emulated = 0;
  for (const auto& run : runs) emulated += run.log->virtual_clock() ? 1 : 0;
  if (emulated == 0) return cat("Time (", unit.name, ")");
  if (emulated == runs.size()) return cat("Emulated time (", unit.name, ")");
  return cat("Time (", unit.name, "; emulated for some runs)");
}

double finite_max(const std::vector<double>& values) {
  double best = -std::numeric_limits<double>::infinity();
  for (const double v : values) {
    if (std::isfinite(v)) best = std::max(best, v);
  }
  return best;
}

std::vector<double> scaled(const std::vector<double>& values, double divisor) {
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i] / divisor;
  return out;
}

// Three significant digits, without trailing zeros.
std::string short_number(double value) {
  return strprintf("%.3g", value);
}

// ------------------------------------------------------------------------------------------
// Curves

// "Throughput (k samples/s)": a label with its unit, the unit's prefix when the values are
// shown in thousands or millions.
std::string count_label(const std::string& name, const std::string& unit, const CountScale& scale) {
  if (scale.prefix.empty()) return unit.empty() ? name : cat(name, " (", unit, ")");
  return unit.empty() ? cat(name, " (", scale.prefix, ")")
                      : cat(name, " (", scale.prefix, " ", unit, ")");
}

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
};

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
  for (const auto& run : runs) {
    const auto x = scaled(run.log->column(spec.table, x_column), x_divisor);
    // Evaluations are marked, unless there are so many that the marks would merge.
    const bool marks = spec.marks && x.size() <= 60;
    auto y = run.log->column(spec.table, spec.y);
    if (spec.cumulative) y = cumulative_sum(y);
    y = scaled(y, count.divisor);
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

// ------------------------------------------------------------------------------------------
// Histograms

struct HistogramSpec {
  std::string table;
  std::string column;
  std::string xlabel;    ///< without the unit
  bool time = false;     ///< seconds: drawn in a unit chosen from the values, bins from 0
  bool integer = false;  ///< counts: one bin per whole number
};

Pane build_histogram(const HistogramSpec& spec, const std::vector<RunRef>& runs,
                     const PlotSettings& settings) {
  Pane pane;
  pane.ylabel = spec.table == "workers" ? "Fraction of worker steps" : "Fraction of steps";
  pane.logy = settings.logy;
  pane.ymax = settings.ymax;
  pane.integer_x = spec.integer;
  std::vector<std::vector<double>> values;
  for (const auto& run : runs) values.push_back(run.log->column(spec.table, spec.column));
  // --compute-time original: the AMB original's compute_time, which includes the induced sleep.
  const bool with_sleep = settings.compute_with_sleep && spec.column == "compute_time";
  if (with_sleep) {
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const auto& sleep = runs[r].log->column(spec.table, "sleep_time");
      for (std::size_t i = 0; i < values[r].size() && i < sleep.size(); ++i) {
        values[r][i] += sleep[i];
      }
    }
  }
  // The right end: --xmax, else all the values unless a few far out (a slow first step, a
  // rare stall) would squeeze the rest into a bar or two: then the values up to the third
  // quartile plus 10 interquartile ranges, when that leaves out at most 2 % of them, and at
  // most 5 % of any run's (so that a mode of the data, such as the 10 % of long delays of the
  // niagara straggler profile, is not cut off).
  double upper = settings.xmax;
  if (!std::isfinite(upper) && !spec.integer) {
    std::vector<double> pooled;
    for (const auto& v : values) {
      for (const double x : v) {
        if (std::isfinite(x)) pooled.push_back(x);
      }
    }
    const double q1 = quantile(pooled, 0.25);
    const double q3 = quantile(pooled, 0.75);
    const double fence = q3 + 10 * (q3 - q1);
    const auto fraction_beyond = [&](const std::vector<double>& v) {
      const auto beyond = std::count_if(v.begin(), v.end(),
                                        [&](double x) { return std::isfinite(x) && x > fence; });
      return v.empty() ? 0.0 : static_cast<double>(beyond) / static_cast<double>(v.size());
    };
    bool clip = q3 > q1 && fraction_beyond(pooled) > 0 && fraction_beyond(pooled) <= 0.02;
    for (const auto& v : values) clip = clip && fraction_beyond(v) <= 0.05;
    if (clip) upper = fence;
  }
  TimeUnit unit{"", 1.0};
  if (spec.time) {
    double longest = 0;
    for (const auto& v : values) {
      for (const double t : v) {
        if (std::isfinite(t) && (!std::isfinite(upper) || t <= upper)) {
          longest = std::max(longest, t);
        }
      }
    }
    unit = choose_time_unit(longest);
    for (auto& v : values) v = scaled(v, unit.seconds);
    upper /= unit.seconds;
    pane.xlabel = cat(spec.xlabel, with_sleep ? " with induced delay" : "", " (", unit.name, ")");
  } else {
    pane.xlabel = spec.xlabel;
  }
  BinRequest request;
  request.integer_valued = spec.integer;
  request.from_zero = spec.time;
  request.bins = settings.bins;
  request.upper = upper;
  const Bins bins = choose_bins(values, request);
  const double last_edge = bins.first_edge + static_cast<double>(bins.count) * bins.width;
  pane.xmin = bins.first_edge;
  pane.xmax = last_edge;
  // Counts of several runs: bars side by side within each bin; otherwise overlaid.
  const bool dodge = spec.integer && runs.size() > 1;
  const double share = dodge ? 1.0 / static_cast<double>(runs.size()) : 1.0;
  pane.box_width = bins.width * (dodge ? 0.9 * share : 1.0);
  std::vector<double> centres(bins.count);
  for (std::size_t i = 0; i < bins.count; ++i) centres[i] = bins.centre(i);
  // Values past the right end are counted (the fractions are of all values) but not drawn:
  // the x label says how many.
  std::size_t beyond = 0;
  std::size_t finite = 0;
  for (const auto& v : values) {
    for (const double x : v) {
      if (!std::isfinite(x)) continue;
      ++finite;
      beyond += x > last_edge ? 1 : 0;
    }
  }
  if (beyond > 0) {
    pane.xlabel =
        cat(spec.xlabel, " (", spec.time ? unit.name + "; " : std::string(),
            strprintf("%.2g", 100.0 * static_cast<double>(beyond) / static_cast<double>(finite)),
            "% beyond)");
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const double average = mean(values[r]);
    const std::string note =
        cat("mean ", spec.time ? short_duration(average * unit.seconds) : short_number(average));
    const std::string title = settings.title_runs ? cat(runs[r].label, " (", note, ")") : note;
    Series series{title,         runs[r].label,      centres, bin_fractions(values[r], bins),
                  runs[r].color, SeriesStyle::kBoxes};
    if (dodge)
      series.x_offset = bins.width * share * (static_cast<double>(r) + 0.5) - bins.width / 2;
    pane.series.push_back(std::move(series));
    if (std::isfinite(average) && average <= last_edge) {
      pane.vertical_lines.push_back({average, runs[r].color});
    }
  }
  return pane;
}

FigureType histogram(const std::string& name, const std::string& summary, const HistogramSpec& spec,
                     const std::string& needs_rows_of) {
  FigureType type;
  type.name = name;
  type.kind = FigureKind::kHistogram;
  type.summary = summary;
  type.needs = {{spec.table, spec.column}};
  type.needs_rows_of = needs_rows_of;
  type.build = [spec](const std::vector<RunRef>& runs, const PlotSettings& settings) {
    return build_histogram(spec, runs, settings);
  };
  return type;
}

// ------------------------------------------------------------------------------------------
// The induced straggler distribution

std::string profile_title(const emulation::StragglerProfile& profile, const TimeUnit& unit) {
  // A custom profile by its components when they are short enough for a legend.
  const std::string spec = profile.spec();
  const std::string name = profile.name == "custom" && spec.size() <= 32 ? spec : profile.name;
  return cat(name, " (mean ", short_number(profile.expected_delay() / unit.seconds), " ", unit.name,
             ")");
}

Pane build_straggler_distribution(const std::vector<RunRef>& runs, const PlotSettings& settings) {
  // One curve per distinct profile, in the colour of the first run that used it.
  std::vector<std::pair<emulation::StragglerProfile, int>> profiles;
  for (const auto& run : runs) {
    const auto profile = run.log->straggler_profile();
    if (!profile) continue;  // excluded by the check
    const bool seen = std::any_of(profiles.begin(), profiles.end(),
                                  [&](const auto& p) { return p.first.spec() == profile->spec(); });
    if (!seen) profiles.emplace_back(*profile, run.color);
  }
  double cap = 0;
  for (const auto& [profile, color] : profiles) cap = std::max(cap, profile.cap());
  if (std::isfinite(settings.xmax)) cap = settings.xmax;
  const TimeUnit unit = choose_time_unit(cap);

  Pane pane;
  pane.xlabel = cat("Induced delay (", unit.name, ")");
  pane.logy = settings.logy;
  pane.ymax = settings.ymax;
  pane.xmin = -0.02 * cap / unit.seconds;  // room for an arrow at 0
  pane.xmax = 1.04 * cap / unit.seconds;   // and at the cap
  pane.ymin = 0;
  bool continuous = false;
  double peak = 0;
  std::vector<StragglerCurve> curves;
  for (const auto& [profile, color] : profiles) {
    curves.push_back(straggler_curve(profile));
    continuous = continuous || !curves.back().x.empty();
    for (const double d : curves.back().density) peak = std::max(peak, d * unit.seconds);
  }
  pane.ylabel = continuous ? cat("Density (per ", unit.name, ")") : "Probability";
  for (std::size_t p = 0; p < profiles.size(); ++p) {
    const auto& [profile, color] = profiles[p];
    const auto& c = curves[p];
    Series series{profile_title(profile, unit),
                  profile.spec(),
                  scaled(c.x, unit.seconds),
                  {},
                  color,
                  SeriesStyle::kLine};
    for (const double d : c.density) series.y.push_back(d * unit.seconds);
    if (series.x.empty()) {
      // Point masses only: a legend entry for the colour, drawn at no height.
      series.x = {0.0};
      series.y = {0.0};
    }
    pane.series.push_back(std::move(series));
    // Point masses as arrows labelled with their weight; with a continuous part their height
    // is arbitrary, so they are staggered to keep the labels of several profiles apart.
    for (const auto& impulse : c.impulses) {
      const double height =
          continuous ? peak * (1.15 - 0.1 * static_cast<double>(p)) : impulse.weight;
      pane.impulses.push_back(
          {impulse.x / unit.seconds, height, cat("p=", short_number(impulse.weight)), color});
    }
    pane.vertical_lines.push_back({profile.expected_delay() / unit.seconds, color});
  }
  if (!std::isfinite(pane.ymax) && !pane.logy) pane.ymax = continuous ? 1.35 * peak : 1.1;
  return pane;
}

Problem check_stragglers(const RunLog& run) {
  if (run.straggler_profile()) return {};
  return {cat(run.path(), ": the run induced no stragglers (config induce is empty)"),
          "distribution straggler-dist needs a run with --induce"};
}

// ------------------------------------------------------------------------------------------
// Scaling

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

// ------------------------------------------------------------------------------------------
// The registry

FigureType panel(const std::string& name, const std::string& summary,
                 const std::vector<std::string>& panes) {
  FigureType type;
  type.name = name;
  type.kind = FigureKind::kPanel;
  type.summary = summary;
  type.panes = panes;
  return type;
}

std::vector<FigureType> make_registry() {
  std::vector<FigureType> types;
  // Curves (the original's loss_vs_step ... learning_rate_vs_step, cumsum_vs_step).
  types.push_back(curve("loss-vs-step", "training loss against the step",
                        {"steps", "step", "loss", "Training loss", std::nullopt, true, false, false,
                         KeyPlace::kTopRight}));
  types.push_back(curve("loss-vs-time", "training loss against time",
                        {"steps", "time", "loss", "Training loss", std::nullopt, true, false, false,
                         KeyPlace::kTopRight}));
  types.push_back(curve("accuracy-vs-step", "test accuracy against the step",
                        {"eval", "step", "accuracy", "Test accuracy", std::nullopt, true, false,
                         true, KeyPlace::kBottomRight}));
  types.push_back(curve("accuracy-vs-time", "test accuracy against time",
                        {"eval", "time", "accuracy", "Test accuracy", std::nullopt, true, false,
                         true, KeyPlace::kBottomRight}));
  // The DBSL paper's curves: the test split against the epoch, one curve per run.
  types.push_back(curve("accuracy-vs-epoch", "test accuracy against the epoch",
                        {"eval", "epoch", "accuracy", "Test accuracy", std::nullopt, true, false,
                         true, KeyPlace::kBottomRight}));
  types.push_back(curve("test-loss-vs-epoch", "test loss against the epoch",
                        {"eval", "epoch", "loss", "Test loss", std::nullopt, true, false, true,
                         KeyPlace::kTopRight}));
  types.push_back(
      curve("step-vs-time", "steps taken against time",
            {"steps", "time", "step", "Step", "", false, false, false, KeyPlace::kTopLeft}));
  types.push_back(curve("lr-vs-step", "learning rate against the step",
                        {"steps", "step", "lr", "Learning rate", std::nullopt, false, false, false,
                         KeyPlace::kTopRight}));
  types.push_back(curve(
      "cumsum-vs-step", "samples trained on so far against the step",
      {"steps", "step", "samples", "Samples so far", "", false, true, false, KeyPlace::kTopLeft}));
  types.push_back(curve("throughput-vs-time", "samples per second against time",
                        {"steps", "time", "throughput", "Throughput", "samples/s", true, false,
                         false, KeyPlace::kBottomRight}));
  // Histograms (the original's hist_*).
  const std::string distributed = "a distributed run";
  types.push_back(histogram("compute-time", "worker computation time per step",
                            {"workers", "compute_time", "Computation time", true, false},
                            distributed));
  types.push_back(histogram("sleep-time", "worker induced delay per step (--induce, --slowdown)",
                            {"workers", "sleep_time", "Induced delay", true, false}, distributed));
  types.push_back(histogram("send-time", "worker exchange time per step",
                            {"workers", "send_time", "Exchange time", true, false}, distributed));
  types.push_back(histogram("wait-time", "worker idle wait per step",
                            {"workers", "wait_time", "Wait time", true, false}, distributed));
  // The original's hist_recv, hist_exit and hist_queued_count (logs from before these columns
  // lack them: refused, naming the dataset).
  types.push_back(histogram("recv-time", "worker time receiving the parameters per step",
                            {"workers", "recv_time", "Receive time", true, false}, distributed));
  types.push_back(
      histogram("exit-time", "worker time from having the parameters to computing, per step",
                {"workers", "exit_time", "Time between iterations", true, false}, distributed));
  types.push_back(histogram("queued-count",
                            "parameter sets a worker found overtaken per round (--async)",
                            {"workers", "queued_updates", "Queued updates", false, true},
                            "an asynchronous run (--async)"));
  // The original's comm_straggler_dist, drawn from the delays the run drew (--async-delay-std).
  types.push_back(histogram(
      "comm-delay", "induced delay of each worker->master message (--async-delay-std)",
      {"workers", "comm_delay", "Induced delay in receiving worker gradients", true, false},
      "an asynchronous run (--async)"));
  types.push_back(histogram("batch-size", "samples per worker per step",
                            {"workers", "samples", "Worker batch size", false, true}, distributed));
  types.push_back(histogram("staleness", "age of the parameters a worker computed with",
                            {"workers", "staleness", "Staleness (steps)", false, true},
                            distributed));
  types.push_back(histogram("micro-batches", "micro-batches per worker per step",
                            {"workers", "micro_batches", "Micro-batches", false, true},
                            "a distributed run of a tool that computes in micro-batches"));
  types.push_back(histogram("master-batch-size", "samples combined per step (master batch size)",
                            {"collect", "samples", "Master batch size", false, true}, distributed));
  types.push_back(histogram("gradients", "gradients combined per step",
                            {"collect", "gradients", "Gradients per step", false, true},
                            distributed));
  types.push_back(histogram("master-wait-time", "time rank 0 waited for the gradients per step",
                            {"collect", "wait_time", "Master wait time", true, false},
                            distributed));
  types.push_back(histogram("step-time", "duration of a step",
                            {"steps", "step_time", "Step time", true, false}, "logged steps"));
  // Distributions.
  {
    FigureType type;
    type.name = "straggler-dist";
    type.kind = FigureKind::kDistribution;
    type.summary = "the induced straggler delay distribution (folded normals, from the config)";
    type.check = check_stragglers;
    type.build = [](const std::vector<RunRef>& runs, const PlotSettings& settings) {
      return build_straggler_distribution(runs, settings);
    };
    types.push_back(std::move(type));
  }
  // Several runs.
  {
    FigureType type;
    type.name = "scaling";
    type.kind = FigureKind::kScaling;
    type.summary =
        "throughput, speedup and efficiency against workers (median samples/s after warm-up)";
    type.needs = {{"steps", "throughput"}};
    type.needs_rows_of = "logged steps";
    types.push_back(std::move(type));
  }
  // Panels.
  types.push_back(
      panel("panel", "3 x 3 overview: the original's panel_main",
            {"loss-vs-step", "loss-vs-time", "compute-time", "accuracy-vs-step", "accuracy-vs-time",
             "batch-size", "cumsum-vs-step", "step-vs-time", "lr-vs-step"}));
  types.push_back(panel("epoch-curves", "test accuracy and test loss against the epoch",
                        {"accuracy-vs-epoch", "test-loss-vs-epoch"}));
  types.push_back(panel("panel-hist", "every histogram and the straggler distribution",
                        {"compute-time", "sleep-time", "send-time", "wait-time", "batch-size",
                         "staleness", "micro-batches", "master-batch-size", "gradients",
                         "master-wait-time", "step-time", "straggler-dist"}));
  std::vector<std::string> all;
  for (const auto& type : types) {
    if (type.kind != FigureKind::kPanel && type.kind != FigureKind::kScaling) {
      all.push_back(type.name);
    }
  }
  types.push_back(panel("panel-all", "every curve, histogram and distribution", all));
  return types;
}

// Notes of a panel: the panes each problem left out, in order.
struct LeftOut {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_problem;
  void add(const std::string& problem, const std::string& pane) {
    for (auto& [what, panes] : by_problem) {
      if (what == problem) {
        panes.push_back(pane);
        return;
      }
    }
    by_problem.push_back({problem, {pane}});
  }
};

}  // namespace

const char* kind_name(FigureKind kind) {
  switch (kind) {
    case FigureKind::kCurve:
      return "curve";
    case FigureKind::kHistogram:
      return "histogram";
    case FigureKind::kDistribution:
      return "distribution";
    case FigureKind::kScaling:
      return "scaling";
    case FigureKind::kPanel:
      return "panel";
  }
  return "figure";
}

const std::vector<FigureType>& figure_types() {
  static const std::vector<FigureType> kTypes = make_registry();
  return kTypes;
}

const FigureType& find_figure_type(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& type : figure_types()) {
    if (type.name == name) return type;
    names.push_back(type.name);
  }
  usage_error(cat("--type: '", name, "' is not a figure type (", join(names, ", "), ")"));
}

Problem why_not(const FigureType& type, const RunLog& run) {
  const std::string needer = cat(kind_name(type.kind), " ", type.name, " needs ");
  for (const auto& need : type.needs) {
    if (!run.has_column(need.table, need.column)) {
      return {cat(run.path(), ": no dataset /", need.table, "/", need.column),
              needer + (type.needs_rows_of.empty() ? "it" : type.needs_rows_of)};
    }
  }
  for (const auto& need : type.needs) {
    if (run.rows(need.table) == 0) {
      return {cat(run.path(), ": /", need.table, " has no rows"),
              needer + (type.needs_rows_of.empty() ? "rows in it" : type.needs_rows_of)};
    }
  }
  for (const auto& need : type.needs) {
    if (!run.has_finite_value(need.table, need.column)) {  // gnuplot would fail on it
      return {cat(run.path(), ": /", need.table, "/", need.column, " holds no finite value"),
              needer + "numbers in it"};
    }
  }
  if (type.check) return type.check(run);
  return {};
}

namespace {

// Limits from the command line apply to every pane of a panel; where one would leave a pane
// nothing to draw (gnuplot refuses such a plot), it is dropped there, with a note.
void check_limits(Figure& figure, std::vector<std::string>& notes) {
  for (auto& pane : figure.panes) {
    bool some_x = false;
    bool some_y = false;
    bool some_positive = false;
    for (const auto& series : pane.series) {
      for (std::size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
        const double x = series.x[i];
        const double y = series.y[i];
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        some_x = some_x || !(x > pane.xmax);
        some_y = some_y || !(y > pane.ymax);
        some_positive = some_positive || y > 0;
      }
    }
    if (std::isfinite(pane.xmax) && !some_x) {
      notes.push_back(cat(pane.name, ": every point is right of --xmax; drawn without it"));
      pane.xmax = kUnset;
    }
    if (std::isfinite(pane.ymax) && !some_y) {
      notes.push_back(cat(pane.name, ": every point is above --ymax; drawn without it"));
      pane.ymax = kUnset;
    }
    if (pane.logy && !some_positive) {
      notes.push_back(cat(pane.name, ": no value above 0 for --logy; drawn on a linear axis"));
      pane.logy = false;
    }
    if (pane.logy && pane.ymin <= 0) pane.ymin = kUnset;
  }
}

}  // namespace

Figure build_figure(const FigureType& type, const std::vector<RunRef>& runs,
                    const PlotSettings& settings, const std::vector<std::string>& subset,
                    std::vector<std::string>& notes) {
  Figure figure;
  figure.type = type.name;
  for (const auto& run : runs) figure.sources.push_back(run.log->path());

  if (type.kind != FigureKind::kPanel) {
    if (!subset.empty()) usage_error(cat("--subset: ", type.name, " is not a panel type"));
    for (const auto& run : runs) {
      if (const Problem problem = why_not(type, *run.log); !problem.empty()) {
        data_error(problem.message());
      }
    }
    PlotSettings pane_settings = settings;
    pane_settings.title_runs = runs.size() > 1;
    if (type.kind == FigureKind::kScaling) {
      figure.panes = build_scaling_panes(runs, pane_settings);
    } else {
      figure.panes.push_back(type.build(runs, pane_settings));
      figure.panes.back().name = type.name;
    }
    check_limits(figure, notes);
    lay_out(figure);
    return figure;
  }

  // A panel: each pane from the runs that have its data.
  struct Planned {
    const FigureType* type;
    std::vector<RunRef> runs;
  };
  std::vector<Planned> planned;
  LeftOut left_out;
  const std::vector<std::string>& names = subset.empty() ? type.panes : subset;
  for (const auto& name : names) {
    const FigureType& pane_type = find_figure_type(name);
    if (pane_type.kind == FigureKind::kPanel || pane_type.kind == FigureKind::kScaling) {
      usage_error(cat("--subset: ", name, " cannot be a pane of a panel"));
    }
    Planned plan{&pane_type, {}};
    std::vector<Problem> problems;
    for (const auto& run : runs) {
      if (Problem problem = why_not(pane_type, *run.log); problem.empty()) {
        plan.runs.push_back(run);
      } else {
        problems.push_back(std::move(problem));
      }
    }
    if (!problems.empty() && !subset.empty() && plan.runs.empty()) {
      data_error(problems.front().message());
    }
    for (const auto& problem : problems) left_out.add(problem.what, name);
    if (!plan.runs.empty()) planned.push_back(std::move(plan));
  }
  for (const auto& [problem, panes] : left_out.by_problem) {
    notes.push_back(cat(type.name, ": ", problem, ": left out of ", join(panes, ", ")));
  }
  if (planned.empty()) {
    data_error(cat("no pane of ", type.name, " can be drawn: ", left_out.by_problem.front().first));
  }
  // Several runs: one legend above the panes, whose series keep their runs' colours.
  if (runs.size() > 1) {
    for (const auto& run : runs) {
      figure.legend.push_back({run.label, run.label, {}, {}, run.color, SeriesStyle::kLine});
    }
  }
  for (const auto& plan : planned) {
    PlotSettings pane_settings = settings;
    pane_settings.title_runs = false;
    figure.panes.push_back(plan.type->build(plan.runs, pane_settings));
    figure.panes.back().name = plan.type->name;
  }
  check_limits(figure, notes);
  lay_out(figure);
  return figure;
}

}  // namespace mbkit::plot
