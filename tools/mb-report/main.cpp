// mb-report: summaries of training runs from their metric logs. Options only; the work is in
// libcore (mbkit/tools/mb_report.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_report.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Summarise training runs from their metric logs: a row per run (tool, model, workers, "
      "clock, steps, samples, time, throughput, final and best test accuracy) and, with "
      "--target, the time each took to reach that test accuracy and the ratios of those times "
      "between tools, seed by seed.",
      "mb-report"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::report::ReportOptions options;
  app.add_option("logs", options.logs, "Metric logs (--log of mb-train-*)")->type_name("FILE");
  auto* target = app.add_option("--target", options.target,
                                "Test accuracy, 0 to 1: report the time each run took to reach it");
  app.add_flag("--json", options.json, "Print JSON instead of a table");
  app.add_flag("--csv", options.csv, "Print CSV instead of a table");
  app.add_option("-o,--output", options.output, "Write the report to this file instead")
      ->type_name("FILE");
  app.add_option("--trace", options.trace,
                 "Write the run's timeline to this file as a Chrome trace (Perfetto, "
                 "chrome://tracing): a track per rank, one log")
      ->type_name("FILE");
  app.add_flag("--scaling", options.scaling,
               "Throughput against the number of workers: samples/s, speedup, efficiency, "
               "images/sec +/- jitter");
  app.add_flag("--compare", options.compare,
               "Two logs, a real (wall-clock) run and its emulation (--clock virtual), or its "
               "repeat (the same settings on the wall clock again): per-step time error, time "
               "to --target and its error, final accuracy, against the emulator's goals");
  auto* warmup = app.add_option("--warmup-steps", options.warmup_steps,
                                "--scaling, --compare: steps left out at the start of each run "
                                "(default: a tenth; --compare: none)");
  app.add_flag("-f,--force", options.force, "Replace an existing output file");
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    options.has_target = target->count() > 0;
    options.has_warmup = warmup->count() > 0;
    return mbkit::tools::report::run_report(options, std::cout);
  });
}
