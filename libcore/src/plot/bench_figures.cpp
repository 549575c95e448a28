#include "mbkit/plot/bench_figures.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "mbkit/results/bandwidth_results.hpp"
#include "mbkit/results/partition_timings.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

Pane pane_of(const std::string& name, const std::string& xlabel, const std::string& ylabel) {
  Pane pane;
  pane.name = name;
  pane.xlabel = xlabel;
  pane.ylabel = ylabel;
  return pane;
}

Series line_of(const std::string& title, const std::string& run, int color) {
  Series series;
  series.title = title;
  series.run = run;
  series.color = color;
  series.style = SeriesStyle::kLinePoints;
  return series;
}

// One line per batch size of a partitions file: (P, median step seconds) over every rank.
std::map<int, std::vector<std::pair<int, double>>> lines_of(const results::PartitionsRun& run) {
  std::map<std::pair<int, int>, std::vector<double>> pooled;
  for (const auto& row : run.rows) {
    auto& times = pooled[{row.split.batch, row.split.partitions}];
    times.insert(times.end(), row.seconds.begin(), row.seconds.end());
  }
  std::map<int, std::vector<std::pair<int, double>>> lines;
  for (const auto& [split, times] : pooled) {
    lines[split.first].emplace_back(split.second, results::spread_of(times).median);
  }
  return lines;
}

Figure partitions_figure(const std::vector<std::string>& paths) {
  Figure figure;
  figure.type = "partitions";
  Pane per_step = pane_of("time-per-step", "Number of microbatches P", "Time per step (ms)");
  Pane per_sample = pane_of("time-per-sample", "Microbatch size B/P", "Time per sample (us)");
  int color = 0;
  for (const auto& path : paths) {
    const results::PartitionsRun run = results::read_partitions_file(path);
    const std::string prefix = paths.size() > 1 ? cat(run.model, " ") : std::string();
    for (const auto& [batch, points] : lines_of(run)) {
      Series step = line_of(cat(prefix, "B=", batch), path, color);
      Series sample = step;
      for (const auto& [partitions, seconds] : points) {
        step.x.push_back(partitions);
        step.y.push_back(seconds * 1e3);
        sample.x.push_back(static_cast<double>(batch) / partitions);
        sample.y.push_back(seconds * 1e6 / batch);
      }
      per_step.series.push_back(std::move(step));
      per_sample.series.push_back(std::move(sample));
      ++color;
    }
    figure.sources.push_back(path);
  }
  for (Pane* pane : {&per_step, &per_sample}) {
    pane->logx = pane->logy = true;
    figure.panes.push_back(std::move(*pane));
  }
  lay_out(figure);
  return figure;
}

Figure bandwidth_figure(const std::vector<std::string>& paths) {
  Figure figure;
  figure.type = "bandwidth-vs-workers";
  Pane pane =
      pane_of("bandwidth-vs-workers", "Number of workers (ranks)", "Time of an iteration (us)");
  // (file, operation, size) -> (ranks, time)
  std::map<std::tuple<std::string, std::string, std::size_t>, std::map<int, double>> lines;
  for (const auto& path : paths) {
    for (const auto& run : results::read_runs(path)) {
      for (const auto& row : run.rows) lines[{path, row.op, row.bytes}][run.ranks] = row.avg_us;
    }
    figure.sources.push_back(path);
  }
  int color = 0;
  for (const auto& [key, points] : lines) {
    const auto& [path, op, bytes] = key;
    Series series = line_of(cat(op, " ", human_bytes(static_cast<double>(bytes))), path, color++);
    for (const auto& [ranks, us] : points) {
      series.x.push_back(ranks);
      series.y.push_back(us);
      pane.xtics.push_back(ranks);
    }
    pane.series.push_back(std::move(series));
  }
  pane.integer_x = true;
  pane.logy = true;
  figure.panes.push_back(std::move(pane));
  lay_out(figure);
  return figure;
}

}  // namespace

const std::vector<std::string>& bench_figure_names() {
  static const std::vector<std::string> names = {"partitions", "bandwidth-vs-workers"};
  return names;
}

bool is_bench_figure(const std::string& type) {
  const auto& names = bench_figure_names();
  return std::find(names.begin(), names.end(), type) != names.end();
}

void list_bench_figures(std::ostream& out) {
  out << strprintf("%-20s %-13s ", "partitions", "benchmark")
      << "time per step against P and per sample against B/P, log-log, a line per B "
         "(mb-bench-partitions -o files)\n";
  out << strprintf("%-20s %-13s ", "bandwidth-vs-workers", "benchmark")
      << "time of an iteration against the ranks, a line per operation and size "
         "(mb-bench-bandwidth --append files)\n";
}

Figure bench_figure(const std::string& type, const std::vector<std::string>& paths) {
  if (type == "partitions") return partitions_figure(paths);
  if (type == "bandwidth-vs-workers") return bandwidth_figure(paths);
  usage_error(cat("--type ", type, " is not a benchmark figure"));
}

}  // namespace mbkit::plot
