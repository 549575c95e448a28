// mb-plot: figures from metric logs. Options only; the work is in libcore
// (mbkit/tools/mb_plot.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_plot.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Draw figures from metric logs of mbkit training runs: curves, histograms, the induced "
      "straggler distribution, panels of them, and throughput scaling over several runs. "
      "Drawn by gnuplot into PNG, SVG or PDF.",
      "mb-plot"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::plot::PlotOptions options;
  app.add_option("logs", options.runs, "Metric logs (--log of mb-train-*)")->type_name("FILE");
  app.add_option("-t,--type", options.type, "Figure type (--list-types lists them)")
      ->capture_default_str()
      ->type_name("TYPE");
  app.add_option("-o,--output", options.output, "Figure to write: .png, .svg or .pdf")
      ->type_name("FILE");
  app.add_flag("-f,--force", options.force, "Replace existing outputs");
  app.add_option("--subset", options.subset, "Panels: the panes to draw, comma-separated")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->type_name("TYPE");
  app.add_option("--label", options.labels,
                 "Legend label of a log, once per log in order (default: what differs)")
      ->allow_extra_args(false)
      ->type_name("LABEL");
  app.add_option("--smooth", options.smooth,
                 "Smooth loss, accuracy and throughput: span of an exponential mean, in points");
  app.add_flag("--logy", options.logy, "Logarithmic y axis");
  app.add_option("--xmax", options.xmax,
                 "Upper end of the x axis: steps, counts, or seconds (units: ms, s, min, h)")
      ->type_name("X");
  app.add_option("--x-axis", options.x_axis,
                 "Curves' x axis: type (the figure type's own: step or time) or epoch")
      ->capture_default_str()
      ->type_name("type|epoch");
  app.add_option("--compute-time", options.compute_time,
                 "compute-time histogram: mbkit (computing only) or original (the AMB original's "
                 "compute_time: computing plus the induced delay)")
      ->capture_default_str()
      ->type_name("mbkit|original");
  app.add_option("--ymax", options.ymax, "Upper end of the y axis");
  auto* target = app.add_option("--target", options.target,
                                "Accuracy figures: draw this test accuracy, 0 to 1, as a line");
  app.add_option("--size", options.size, "Figure size in inches, WIDTH,HEIGHT")->type_name("W,H");
  app.add_option("--font-size", options.font_size, "Font size in points")->capture_default_str();
  app.add_option("--bins", options.bins, "Histograms: number of bins (default: automatic)");
  app.add_option("--warmup-steps", options.warmup_steps,
                 "scaling, clock-compare: steps left out at the start of each run "
                 "(default: a tenth; clock-compare: none)");
  app.add_option("--script", options.script_dir,
                 "Write the gnuplot script and data files into this directory instead of "
                 "drawing")
      ->type_name("DIR");
  app.add_option("--csv", options.csv,
                 "Also write the figure's series to this CSV file (-: standard output)")
      ->type_name("FILE");
  app.add_flag("--list-types", options.list_types, "List the figure types and exit");
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    options.has_target = target->count() > 0;
    return mbkit::tools::plot::run_plot(options, std::cout);
  });
}
