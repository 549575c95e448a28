#include "mbkit/tools/mb_plot.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

#include "mbkit/plot/bench_figures.hpp"
#include "mbkit/plot/figure_types.hpp"
#include "mbkit/plot/gnuplot.hpp"
#include "mbkit/plot/labels.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::plot {
namespace {

using namespace mbkit::plot;

void list_types(std::ostream& out) {
  out << "# type               kind          what (reads)\n";
  for (const auto& type : figure_types()) {
    std::vector<std::string> reads;
    for (const auto& need : type.needs) reads.push_back(cat("/", need.table, "/", need.column));
    std::string detail;
    if (type.kind == FigureKind::kPanel) {
      detail = cat(" (panes: ", join(type.panes, ", "), ")");
    } else if (type.kind == FigureKind::kDistribution) {
      detail = " (root attribute config: induce)";
    } else if (!reads.empty()) {
      detail = cat(" (", join(reads, ", "), ")");
    }
    out << strprintf("%-20s %-13s ", type.name.c_str(), kind_name(type.kind)) << type.summary
        << detail << "\n";
  }
  list_bench_figures(out);
}

std::pair<double, double> parse_size(const std::string& text) {
  const auto parts = split(text, ',');
  if (parts.size() != 2) usage_error(cat("--size: '", text, "' is not WIDTH,HEIGHT (inches)"));
  const double width = parse_double(parts[0], "--size");
  const double height = parse_double(parts[1], "--size");
  if (!(width > 0.5 && height > 0.5 && width <= 100 && height <= 100)) {
    usage_error(cat("--size: '", text, "': width and height must be between 0.5 and 100 inches"));
  }
  return {width, height};
}

}  // namespace

int run_plot(const PlotOptions& options, std::ostream& out) {
  if (options.list_types) {
    list_types(out);
    return 0;
  }
  // The command line first, before any file is read.
  if (options.runs.empty()) usage_error("no metric log given (mb-plot RUN.h5 ... --type TYPE)");
  if (options.output.empty() && options.script_dir.empty() && options.csv.empty()) {
    usage_error("nothing to write: give -o FIG.png|svg|pdf, --script DIR or --csv FILE");
  }
  // The benchmark tools' figures read their files, not metric logs.
  const bool bench = is_bench_figure(options.type);
  const FigureType* type = bench ? nullptr : &find_figure_type(options.type);
  if (!options.subset.empty() && (type == nullptr || type->kind != FigureKind::kPanel)) {
    usage_error(cat("--subset chooses the panes of a panel type; ", options.type, " is a ",
                    type == nullptr ? "benchmark figure" : kind_name(type->kind)));
  }
  for (const auto& name : options.subset) {
    const FigureType& pane = find_figure_type(name);
    if (pane.kind == FigureKind::kPanel || spans_runs(pane.kind)) {
      usage_error(cat("--subset: ", name, " cannot be a pane of a panel"));
    }
  }
  if (!options.labels.empty() && options.labels.size() != options.runs.size()) {
    usage_error(cat("--label: ", options.labels.size(), " labels for ", options.runs.size(),
                    " logs; give one per log, in the order of the logs"));
  }
  if (!(options.smooth >= 0) || !std::isfinite(options.smooth)) {
    usage_error("--smooth must be a span of 0 (off) or more points");
  }
  if (options.bins < 0 || options.bins > 1000) usage_error("--bins must be between 0 and 1000");
  if (options.warmup_steps < -1) usage_error("--warmup-steps must be 0 or more");
  if (!(options.font_size >= 4 && options.font_size <= 72)) {
    usage_error("--font-size must be between 4 and 72 points");
  }
  if (!(options.ymax >= 0) || !std::isfinite(options.ymax)) {
    usage_error("--ymax must be a positive number");
  }
  if (options.has_target && !(options.target > 0 && options.target <= 1)) {
    usage_error(cat("--target ", shortest_decimal(options.target),
                    ": a test accuracy between 0 and 1 is expected (0.8 for 80%)"));
  }
  if (options.x_axis != "type" && options.x_axis != "epoch") {
    usage_error(cat("--x-axis: '", options.x_axis, "' is not type or epoch"));
  }
  if (options.compute_time != "mbkit" && options.compute_time != "original") {
    usage_error(cat("--compute-time: '", options.compute_time, "' is not mbkit or original"));
  }
  PlotSettings settings;
  settings.x_epoch = options.x_axis == "epoch";
  settings.compute_with_sleep = options.compute_time == "original";
  settings.smooth = options.smooth;
  settings.logy = options.logy;
  settings.bins = options.bins;
  settings.warmup_steps = options.warmup_steps;
  settings.ymax = options.ymax > 0 ? options.ymax : kUnset;
  settings.target = options.has_target ? options.target : kUnset;
  settings.user_labels = !options.labels.empty();
  if (!options.xmax.empty()) {
    settings.xmax = parse_duration(options.xmax, "--xmax");
    if (!(settings.xmax > 0)) usage_error("--xmax must be positive");
  }
  DrawOptions draw;
  if (!options.output.empty()) draw.format = image_format_of(options.output, "-o");
  if (!options.size.empty()) std::tie(draw.width, draw.height) = parse_size(options.size);
  draw.font_size = options.font_size;

  // Outputs that exist are replaced only with --force, as by every mbkit tool.
  const bool drawing = !options.output.empty() && options.script_dir.empty();
  if (drawing) fs::require_replaceable(options.output, options.force);
  const bool csv_to_stdout = options.csv == "-";
  if (!options.csv.empty() && !csv_to_stdout) fs::require_replaceable(options.csv, options.force);
  const std::string script_path =
      options.script_dir.empty() ? std::string() : fs::join_path(options.script_dir, "plot.gp");
  if (!options.script_dir.empty()) {
    if (fs::exists(options.script_dir) && !fs::is_directory(options.script_dir)) {
      fail(cat("--script: ", options.script_dir, " exists and is not a directory"));
    }
    fs::require_replaceable(script_path, options.force);
  }

  // The logs, and the figure: every data error comes before anything is written.
  std::vector<RunLog> logs;
  logs.reserve(options.runs.size());
  for (const auto& path : bench ? std::vector<std::string>{} : options.runs) {
    logs.push_back(RunLog::open(path));
  }
  std::vector<std::string> labels = options.labels;
  if (labels.empty()) {
    std::vector<RunDescription> descriptions;
    for (const auto& log : logs) descriptions.push_back(log.description());
    labels = derive_labels(descriptions);
  }
  std::vector<RunRef> runs;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    runs.push_back({&logs[i], labels[i], static_cast<int>(i)});
  }
  std::vector<std::string> notes;
  const Figure figure = bench ? bench_figure(options.type, options.runs)
                              : build_figure(*type, runs, settings, options.subset, notes);
  for (const auto& note : notes) log::warn(note);

  // Draw and write under temporary names; rename only when everything succeeded.
  std::optional<fs::AtomicOutput> image;
  std::optional<fs::AtomicOutput> csv;
  if (drawing) {
    image.emplace(options.output);
    draw_with_gnuplot(figure, draw, image->temp_path(), options.output, options.gnuplot);
  }
  if (!options.csv.empty() && !csv_to_stdout) {
    csv.emplace(options.csv);
    std::ofstream file(csv->temp_path(), std::ios::binary | std::ios::trunc);
    write_csv(figure, file);
    file.close();
    if (!file) fail(cat("cannot write ", options.csv, ": ", std::strerror(errno)));
  }
  if (!options.script_dir.empty()) {
    fs::make_directories(options.script_dir);
    const std::string drawn = options.output.empty() ? cat("figure", extension_of(draw.format))
                                                     : fs::base_name(options.output);
    write_gnuplot_files(figure, draw, options.script_dir, drawn);
  }
  if (image) image->commit();
  if (csv) csv->commit();
  if (csv_to_stdout) write_csv(figure, out);

  const std::string what =
      cat(options.type, " of ", options.runs.size(),
          options.runs.size() == 1 ? (bench ? " file" : " log") : (bench ? " files" : " logs"),
          figure.panes.size() > 1 ? cat(", ", figure.panes.size(), " panes") : std::string());
  if (image) log::info(cat("wrote ", options.output, ": ", what));
  if (csv) log::info(cat("wrote ", options.csv, ": the series of ", what));
  if (!options.script_dir.empty()) {
    log::info(cat("wrote ", script_path, " and its data: ", what, "; run it in ",
                  options.script_dir, " with gnuplot plot.gp"));
  }
  return 0;
}

}  // namespace mbkit::tools::plot
