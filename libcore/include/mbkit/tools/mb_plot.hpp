// mb-plot: figures from metric logs (the library side of the tool). Reads the logs, builds the
// figure of a registered type (plot/figure_types.hpp) and draws it with gnuplot into a PNG, SVG
// or PDF, or writes the gnuplot script and data for the user to edit, or the series as CSV.
// Every output appears complete or not at all: gnuplot draws into a temporary beside the
// output, renamed when it succeeded.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mbkit::tools::plot {

struct PlotOptions {
  std::vector<std::string> runs;  ///< metric logs
  std::string type = "panel";
  std::string output;               ///< FIG.png|svg|pdf
  bool force = false;               ///< replace existing outputs
  std::vector<std::string> subset;  ///< panes of a panel
  std::vector<std::string> labels;  ///< one per run, replacing the derived ones
  double smooth = 0;                ///< span of the exponential mean (points)
  bool logy = false;
  std::string xmax;                    ///< number, or a duration with a unit ("30min")
  std::string x_axis = "type";         ///< type (each curve's own x) or epoch
  std::string compute_time = "mbkit";  ///< compute-time histogram: mbkit or original
  double ymax = 0;                     ///< 0: automatic
  double target = 0;                   ///< test accuracy in (0, 1]; with has_target only
  bool has_target = false;
  std::string size;  ///< "W,H" in inches
  double font_size = 10;
  int bins = 0;
  int warmup_steps = -1;
  std::string script_dir;  ///< write the gnuplot script and data here instead
  std::string csv;         ///< also write the series here
  bool list_types = false;
  std::string gnuplot = "gnuplot";  ///< the program run
};

/// Draws the figure (or lists the types on `out` with list_types). Returns the exit status.
int run_plot(const PlotOptions& options, std::ostream& out);

}  // namespace mbkit::tools::plot
