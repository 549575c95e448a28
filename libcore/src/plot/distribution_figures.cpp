// Distributions: histograms of what the workers, the master and the steps measured (the AMB
// original's hist_*), and the straggler delay distribution a run induced, from its config.
#include <algorithm>
#include <cmath>
#include <utility>

#include "figure_builders.hpp"

namespace mbkit::plot::figure_detail {
namespace {

Pane build_histogram(const HistogramSpec& spec, const std::vector<RunRef>& runs,
                     const PlotSettings& settings) {
  Pane pane;
  pane.ylabel = spec.table == "workers" ? "Fraction of worker steps" : "Fraction of steps";
  // --worker-table sample:K: the rows of K workers drawn from the seed, not all of them.
  for (const auto& run : runs) {
    if (spec.table == "workers" && run.log->field("worker_table").starts_with("sample:")) {
      pane.ylabel = "Fraction of sampled worker steps";
    }
  }
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

}  // namespace

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

namespace {

std::string profile_title(const emulation::StragglerProfile& profile, const TimeUnit& unit) {
  // A custom profile by its components when they are short enough for a legend.
  const std::string spec = profile.spec();
  const std::string name = profile.name == "custom" && spec.size() <= 32 ? spec : profile.name;
  return cat(name, " (mean ", short_number(profile.expected_delay() / unit.seconds), " ", unit.name,
             ")");
}

}  // namespace

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
  if (const std::string induce = run.field("induce"); induce.starts_with("trace:")) {
    return {cat(run.path(), ": the run replayed a trace (config induce is ", induce,
                "), which has no distribution to draw"),
            "distribution straggler-dist needs a run with an --induce profile"};
  }
  return {cat(run.path(), ": the run induced no stragglers (config induce is empty)"),
          "distribution straggler-dist needs a run with --induce"};
}

}  // namespace mbkit::plot::figure_detail
