// The registry of figure types: curves of /steps and /eval, histograms of /workers, /collect
// and /steps, the induced straggler distribution, throughput scaling, a real run against its
// emulation, and panels of the others (the AMB original's plot set, src/plot_perf_amb.py), and
// how a figure is built from them. The builders of each family are in files of their own
// (figure_builders.hpp).
#include "mbkit/plot/figure_types.hpp"

#include <cmath>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "figure_builders.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

using figure_detail::build_clock_compare_panes;
using figure_detail::build_scaling_panes;
using figure_detail::build_straggler_distribution;
using figure_detail::build_workers_panes;
using figure_detail::check_stragglers;
using figure_detail::curve;
using figure_detail::histogram;
using figure_detail::HistogramSpec;
using figure_detail::worker_quantiles;

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
                        {"eval", "step", "accuracy", "Test accuracy (%)", std::nullopt, true, false,
                         true, KeyPlace::kBottomRight, true}));
  types.push_back(curve("accuracy-vs-time", "test accuracy against time",
                        {"eval", "time", "accuracy", "Test accuracy (%)", std::nullopt, true, false,
                         true, KeyPlace::kBottomRight, true}));
  // The DBSL paper's curves: the test split against the epoch, one curve per run.
  types.push_back(curve("accuracy-vs-epoch", "test accuracy against the epoch",
                        {"eval", "epoch", "accuracy", "Test accuracy (%)", std::nullopt, true,
                         false, true, KeyPlace::kBottomRight, true}));
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
  // From a summary (--worker-table summary, sample:K): quantiles over the workers per step.
  for (const auto& [name, what, spec] :
       std::vector<std::tuple<const char*, const char*, HistogramSpec>>{
           {"compute-time-quantiles",
            "worker computation time",
            {"", "compute_time", "Computation time", true, false}},
           {"wait-time-quantiles", "worker idle wait", {"", "wait_time", "Wait time", true, false}},
           {"batch-size-quantiles",
            "samples per worker",
            {"", "samples", "Worker batch size", false, true}},
           {"staleness-quantiles",
            "age of the workers' parameters",
            {"", "staleness", "Staleness (steps)", false, true}}}) {
    types.push_back(worker_quantiles(
        name, cat(what, ": median, p10, p90, min and max over the workers against the step"),
        spec));
  }
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
    type.build_panes = build_scaling_panes;
    types.push_back(std::move(type));
  }
  {
    FigureType type;
    type.name = "workers";
    type.kind = FigureKind::kScaling;
    type.summary =
        "mean step time against workers beside E[slowest of N delays] (FMB), and the time to "
        "--target";
    type.needs = {{"steps", "step_time"}};
    type.needs_rows_of = "logged steps";
    type.build_panes = build_workers_panes;
    type.shared_legend = true;
    types.push_back(std::move(type));
  }
  // A real run against its emulation.
  {
    FigureType type;
    type.name = "clock-compare";
    type.kind = FigureKind::kComparison;
    type.summary =
        "a real run against its emulation: step-time distributions, accuracy against training "
        "time";
    type.needs = {
        {"steps", "step"}, {"steps", "step_time"}, {"eval", "step"}, {"eval", "accuracy"}};
    type.needs_rows_of = "logged steps and evaluations (--eval-every)";
    type.build_panes = build_clock_compare_panes;
    type.shared_legend = true;
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
    if (type.kind != FigureKind::kPanel && !spans_runs(type.kind)) {
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
    case FigureKind::kComparison:
      return "comparison";
    case FigureKind::kPanel:
      return "panel";
  }
  return "figure";
}

bool spans_runs(FigureKind kind) {
  return kind == FigureKind::kScaling || kind == FigureKind::kComparison;
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
    if (need.table == "workers" && run.rows("workers") == 0 && run.rows("worker_summary") > 0) {
      return {
          cat(run.path(), ": /workers holds no rows (--worker-table ", run.field("worker_table"),
              ": per-step quantiles over the workers in /worker_summary)"),
          cat(needer, "every worker's rows: rerun with --worker-table all or sample:K")};
    }
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
    if (spans_runs(type.kind)) {
      figure.panes = type.build_panes(runs, pane_settings);
      if (type.shared_legend) {
        // Each title once, above the panes, in the style of its first series.
        std::set<std::string> listed;
        for (auto& pane : figure.panes) {
          for (auto& series : pane.series) {
            if (!series.title.empty() && listed.insert(series.title).second) {
              figure.legend.push_back(
                  {series.title, series.run, {}, {}, series.color, series.style});
            }
            series.title.clear();
          }
        }
      }
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
    if (pane_type.kind == FigureKind::kPanel || spans_runs(pane_type.kind)) {
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
