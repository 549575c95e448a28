#include "mbkit/report/scaling.hpp"

#include <cmath>
#include <map>

#include "mbkit/plot/run_log.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/report/number_text.hpp"
#include "mbkit/report/report.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {
namespace {

// The steady steps of one run: its median, and its columns for pooling.
struct RunSteps {
  double median = 0;
  std::vector<double> samples, seconds, throughput;
};

RunSteps steady_steps(const plot::RunLog& log, int requested) {
  const auto& throughput = log.column("steps", "throughput");
  const std::size_t skip = plot::warmup_steps(throughput.size(), requested);
  if (skip >= throughput.size()) {
    data_error(cat(log.path(), ": ", throughput.size(), " steps, all of them warm-up (",
                   requested >= 0 ? "--warmup-steps " : "warm-up ", skip, ")"));
  }
  const auto& samples = log.column("steps", "samples");
  const auto& seconds = log.column("steps", "step_time");
  const auto from = static_cast<std::ptrdiff_t>(skip);
  RunSteps steps;
  steps.median = plot::throughput_stats(samples, seconds, throughput, skip).median;
  steps.samples.assign(samples.begin() + from, samples.end());
  steps.seconds.assign(seconds.begin() + from, seconds.end());
  steps.throughput.assign(throughput.begin() + from, throughput.end());
  return steps;
}

// The model and its configuration: "mlp hidden=256" (model_config keys that differ from
// `other`'s only, so that the text shows what differs).
std::string model_text(const plot::RunLog& log, const plot::RunLog& other) {
  std::string text = log.info().model.empty() ? std::string("-") : log.info().model;
  for (const auto& [key, value] : log.description().fields) {
    if (key.starts_with("model_config.") && other.field(key) != value) {
      text += cat(" ", key.substr(std::string("model_config.").size()), "=", value);
    }
  }
  return text;
}

// What differs between two runs that a scaling table cannot compare: what each worker
// computes (tool, model and its configuration, dataset) and on what (device and precision,
// clock); "" when nothing does.
std::string setup_difference(const plot::RunLog& first, const plot::RunLog& run) {
  const auto differ = [&](const char* what, const std::string& a, const std::string& b) {
    return a == b ? std::string() : cat(what, " (", a, " against ", b, ")");
  };
  const metrics::RunInfo& a = first.info();
  const metrics::RunInfo& b = run.info();
  std::string difference = differ("tools", a.tool, b.tool);
  if (difference.empty()) {
    difference = differ("models", model_text(first, run), model_text(run, first));
  }
  if (difference.empty()) difference = differ("datasets", a.dataset, b.dataset);
  if (difference.empty()) {
    const auto device_of = [](const plot::RunLog& log) {
      const std::string device = log.field("device").empty() ? "cpu" : log.field("device");
      return cat(device, " ", log.info().precision);
    };
    difference = differ("devices", device_of(first), device_of(run));
  }
  if (difference.empty()) difference = differ("clocks", a.clock, b.clock);
  return difference;
}

std::string base_text(const ScalingReport& report) {
  if (report.base_workers == 1) return "speedup against the 1-worker run";
  return cat("speedup against the ", shortest_decimal(report.base_workers),
             "-worker run, taken to have scaled perfectly (no 1-worker run)");
}

}  // namespace

ScalingReport build_scaling(const std::vector<std::string>& logs, int warmup_steps) {
  if (logs.empty()) usage_error("no metric log given (mb-report --scaling RUN.h5 ...)");
  if (warmup_steps < -1) usage_error("--warmup-steps must be 0 or more");
  ScalingReport report;
  report.warmup_steps = warmup_steps;
  std::vector<plot::ScalingPoint> points;
  std::map<double, ScalingEntry> entries;
  std::map<double, RunSteps> pooled;
  const auto first = plot::RunLog::open(logs.front());
  for (const auto& path : logs) {
    const auto log = plot::RunLog::open(path);
    if (const std::string difference = setup_difference(first, log); !difference.empty()) {
      usage_error(cat("--scaling: ", first.path(), " and ", path, " are runs of different ",
                      difference,
                      "; a scaling table compares one setup on different numbers "
                      "of workers"));
    }
    const double workers = log.workers();
    RunSteps steps = steady_steps(log, warmup_steps);
    points.push_back({workers, steps.median});
    entries[workers].logs.push_back(path);
    RunSteps& pool = pooled[workers];
    for (auto [to, from] :
         {std::pair{&pool.samples, &steps.samples}, std::pair{&pool.seconds, &steps.seconds},
          std::pair{&pool.throughput, &steps.throughput}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
  }
  for (const plot::ScalingRow& row : plot::scaling_table(points)) {
    ScalingEntry entry = std::move(entries[row.workers]);
    const RunSteps& pool = pooled[row.workers];
    const auto stats = plot::throughput_stats(pool.samples, pool.seconds, pool.throughput);
    entry.workers = row.workers;
    entry.steps = stats.steps;
    entry.throughput = row.throughput;
    entry.mean = stats.mean;
    entry.uncertainty = stats.uncertainty;
    entry.jitter = stats.jitter;
    entry.speedup = row.speedup;
    entry.efficiency = row.efficiency;
    report.rows.push_back(std::move(entry));
  }
  report.base_workers = report.rows.front().workers;
  return report;
}

void write_scaling_table(const ScalingReport& report, std::ostream& out) {
  out << "# samples/s: the median over steps after "
      << (report.warmup_steps >= 0 ? cat(report.warmup_steps, " warm-up steps")
                                   : std::string("the warm-up (a tenth of the steps)"))
      << "; " << base_text(report) << "\n";
  const std::vector<TableColumn> columns = {
      {"workers", "", false},         {"runs", "", false},       {"steps", "", false},
      {"samples/s", "", false},       {"speedup", "(x)", false}, {"efficiency", "(%)", false},
      {"mean", "(samples/s)", false}, {"+/-", "", false},        {"jitter", "", false}};
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : report.rows) {
    rows.push_back({shortest_decimal(row.workers), cat(row.logs.size()), cat(row.steps),
                    fixed(row.throughput, 1), fixed(row.speedup, 3), fixed(100 * row.efficiency, 1),
                    fixed(row.mean, 1), fixed(row.uncertainty, 1), fixed(row.jitter, 1)});
  }
  write_aligned(columns, rows, out);
  out << "#\n";
  for (const auto& row : report.rows) {
    out << "# " << shortest_decimal(row.workers) << (row.workers == 1 ? " worker" : " workers")
        << strprintf(": images/sec: %.1f +/- %.1f (jitter = %.1f)\n", row.mean, row.uncertainty,
                     row.jitter);
  }
}

void write_scaling_json(const ScalingReport& report, std::ostream& out) {
  JsonWriter json(out);
  json.begin_object();
  json.key("warmup_steps").value(report.warmup_steps);
  json.key("base_workers").value(report.base_workers);
  json.key("rows").begin_array();
  for (const auto& row : report.rows) {
    json.begin_object();
    json.key("workers").value(row.workers);
    json.key("logs").array(row.logs);
    json.key("steps").value(static_cast<std::int64_t>(row.steps));
    json.key("samples_per_second").value(row.throughput);
    json.key("speedup").value(row.speedup);
    json.key("efficiency").value(row.efficiency);
    json.key("mean").value(row.mean);
    json.key("uncertainty").value(row.uncertainty);
    json.key("jitter").value(row.jitter);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out << "\n";
}

void write_scaling_csv(const ScalingReport& report, std::ostream& out) {
  out << "workers,runs,steps,samples_per_s,speedup,efficiency,mean_samples_per_s,uncertainty,"
         "jitter\n";
  for (const auto& row : report.rows) {
    out << join({csv_number(row.workers), cat(row.logs.size()), cat(row.steps),
                 csv_number(row.throughput), csv_number(row.speedup), csv_number(row.efficiency),
                 csv_number(row.mean), csv_number(row.uncertainty), csv_number(row.jitter)},
                ",")
        << "\n";
  }
}

}  // namespace mbkit::report
