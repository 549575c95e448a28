// The figure types of mb-plot, in one registry: each declares the datasets it reads (so that a
// log lacking them is refused with a message naming the dataset, before anything is written)
// and builds its pane from the runs. A panel is a list of other types. Adding a figure type
// is one entry in the registry (src/plot/figure_types.cpp) and, if it reads new data, one
// builder in its family's file (src/plot/figure_builders.hpp lists them).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mbkit/plot/figure.hpp"
#include "mbkit/plot/run_log.hpp"

namespace mbkit::plot {

enum class FigureKind { kCurve, kHistogram, kDistribution, kScaling, kComparison, kPanel };

/// "curve", "histogram", "distribution", "scaling", "comparison", "panel".
const char* kind_name(FigureKind kind);

/// True for the kinds drawn from all the runs at once (scaling, comparison): never a pane of a
/// panel.
bool spans_runs(FigureKind kind);

/// A run as a figure draws it.
struct RunRef {
  const RunLog* log = nullptr;
  std::string label;
  int color = 0;  ///< the run's position among the figure's runs
};

/// What the command line says about how to draw, shared by every type.
struct PlotSettings {
  double smooth = 0;                ///< --smooth: span of the exponential mean, in points (0: off)
  bool logy = false;                ///< --logy
  bool x_epoch = false;             ///< --x-axis epoch: every curve against the epoch
  bool compute_with_sleep = false;  ///< --compute-time original: compute + induced delay
  double xmax = kUnset;             ///< --xmax, in the x axis' base unit (steps, seconds, counts)
  double ymax = kUnset;             ///< --ymax, in the y axis' unit
  double target = kUnset;           ///< --target: test accuracy (a fraction) drawn as a line
  int bins = 0;                     ///< --bins (0: automatic)
  int warmup_steps = -1;            ///< --warmup-steps (-1: a tenth of the steps)
  bool user_labels = false;         ///< the labels came from --label (scaling groups runs by them)
  /// Title the series with their runs' labels (false for a single run, and in the panes of a
  /// panel but the first, where colours already say which run is which).
  bool title_runs = true;
};

/// A dataset a figure type reads from every run.
struct Requirement {
  std::string table;   ///< "workers"
  std::string column;  ///< "compute_time"
};

/// Why a run cannot be drawn as a type.
struct Problem {
  std::string what;   ///< "run.h5: /workers has no rows"; "" when there is no problem
  std::string needs;  ///< "histogram compute-time needs a distributed run"
  bool empty() const { return what.empty(); }
  std::string message() const { return needs.empty() ? what : what + " (" + needs + ")"; }
};

struct FigureType {
  std::string name;  ///< "loss-vs-step"
  FigureKind kind = FigureKind::kCurve;
  std::string summary;  ///< one line, for --list-types
  std::vector<Requirement> needs;
  /// What kind of run has rows in the tables it needs ("a distributed run"), for messages.
  std::string needs_rows_of;
  /// Further conditions on a run, beyond its datasets.
  std::function<Problem(const RunLog&)> check;
  /// The pane, from runs that passed the checks. Empty for panels.
  std::function<Pane(const std::vector<RunRef>&, const PlotSettings&)> build;
  /// Scaling and comparison types: their panes, from all the runs at once.
  std::function<std::vector<Pane>(const std::vector<RunRef>&, const PlotSettings&)> build_panes;
  /// The panes' titled series make one legend above them (many lines, small panes).
  bool shared_legend = false;
  /// Panels: the types of their panes, in order.
  std::vector<std::string> panes;
};

/// Every figure type, in the order --list-types prints them.
const std::vector<FigureType>& figure_types();

/// The type called `name`; a usage error listing the known types otherwise.
const FigureType& find_figure_type(const std::string& name);

/// Why `run` cannot be drawn as `type` (its message names the file and what is missing:
/// "run.h5: /workers has no rows (histogram compute-time needs a distributed run)"), or an
/// empty Problem when it can.
Problem why_not(const FigureType& type, const RunLog& run);

/// Builds the figure of `type` from `runs`. A single type needs every run to have its data
/// (data error otherwise). A panel draws its panes (`subset` when not empty) from the runs that
/// have their data: a pane no run can show is left out, with a line in `notes` (one per
/// problem, naming the panes it left out), unless it was asked for with `subset`, which makes
/// it an error.
Figure build_figure(const FigureType& type, const std::vector<RunRef>& runs,
                    const PlotSettings& settings, const std::vector<std::string>& subset,
                    std::vector<std::string>& notes);

}  // namespace mbkit::plot
