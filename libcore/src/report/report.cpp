#include "mbkit/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "mbkit/plot/run_log.hpp"
#include "mbkit/report/number_text.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The first run of `tool` with `seed`.
std::optional<std::size_t> first_run(const std::vector<RunSummary>& runs, const std::string& tool,
                                     std::uint64_t seed) {
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].tool == tool && runs[i].seed == seed) return i;
  }
  return std::nullopt;
}

std::optional<double> ratio_of(const RunSummary& run, const RunSummary& base) {
  if (!run.time_to_target || !base.time_to_target || !(*base.time_to_target > 0)) {
    return std::nullopt;
  }
  return *run.time_to_target / *base.time_to_target;
}

// What the time-to-target column says of a run that has no time.
std::string missing_time(const RunSummary& run) {
  return run.evaluations == 0 ? "no evaluations" : "not reached";
}

// ---- table ----

std::string run_pair(const Comparison& comparison) {
  return cat(comparison.tool, " / ", comparison.base_tool);
}

void write_comparison(const Report& report, const Comparison& comparison, std::ostream& out) {
  const std::string target = percent_text(*report.target);
  const std::string what = cat(run_pair(comparison), " time to ", target);
  for (const auto& seed : comparison.seeds) {
    out << "# seed " << seed.seed << ": " << what << ": ";
    if (seed.ratio) {
      const RunSummary& base = report.runs[*seed.base_run];
      const RunSummary& other = report.runs[*seed.other_run];
      out << strprintf("%.3f (%.1f s / %.1f s)\n", *seed.ratio, *other.time_to_target,
                       *base.time_to_target);
      continue;
    }
    if (!seed.base_run || !seed.other_run) {
      out << "no " << (seed.base_run ? comparison.tool : comparison.base_tool) << " log\n";
      continue;
    }
    std::vector<std::string> why;
    for (const std::size_t index : {*seed.other_run, *seed.base_run}) {
      const RunSummary& run = report.runs[index];
      if (!run.time_to_target) why.push_back(cat(run.tool, ": ", missing_time(run)));
    }
    // Both reached, yet no ratio: the base reached the target at its first instant.
    if (why.empty()) why.push_back(cat(comparison.base_tool, " reached it at time 0"));
    out << "not both reached " << target << " (" << join(why, ", ") << ")\n";
  }
  if (comparison.compared == 0) {
    out << "# " << what << ": no seed where both reached " << target << "\n";
    return;
  }
  out << "# " << what
      << strprintf(": mean %.3f over %d seed%s (min %.3f, max %.3f)\n", comparison.mean,
                   comparison.compared, comparison.compared > 1 ? "s" : "", comparison.min,
                   comparison.max);
}

// ---- CSV and JSON ----

template <class T>
std::string csv_optional(const std::optional<T>& value) {
  if (!value) return {};
  if constexpr (std::is_floating_point_v<T>) {
    return csv_number(*value);
  } else {
    return cat(*value);
  }
}

template <class T>
void json_optional(JsonWriter& json, const std::optional<T>& value) {
  if (value) {
    json.value(*value);
  } else {
    json.null();
  }
}

// The table's device column: the precision beside it where it is not fp32 ("cuda:0 bf16").
std::string device_text(const RunSummary& run) {
  return run.precision == "fp32" ? run.device : cat(run.device, " ", run.precision);
}

}  // namespace

void write_aligned(const std::vector<TableColumn>& columns,
                   const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<std::size_t> widths(columns.size());
  const bool units = std::any_of(columns.begin(), columns.end(),
                                 [](const TableColumn& column) { return !column.unit.empty(); });
  for (std::size_t c = 0; c < columns.size(); ++c) {
    widths[c] = std::max(columns[c].name.size(), columns[c].unit.size());
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  const auto line = [&](char prefix, auto cell_of) {
    std::string text(1, prefix);
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const std::string cell = cell_of(c);
      const std::string pad(widths[c] - cell.size(), ' ');
      text += "  ";
      text += columns[c].left ? cell + pad : pad + cell;
    }
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << "\n";
  };
  line('#', [&](std::size_t c) { return columns[c].name; });
  if (units) line('#', [&](std::size_t c) { return columns[c].unit; });
  for (const auto& row : rows) line(' ', [&](std::size_t c) { return row[c]; });
}

std::string percent_text(double fraction) {
  return strprintf("%.4g%%", 100 * fraction);
}

RunSummary summarize_run(const plot::RunLog& log, std::optional<double> target) {
  RunSummary run;
  const metrics::RunInfo& info = log.info();
  run.log = log.path();
  run.tool = info.tool;
  run.model = info.model;
  run.workers = log.workers();
  run.seed = info.seed;
  run.clock = info.clock;
  run.device = log.field("device");
  if (run.device.empty()) run.device = "cpu";  // logs from before --device
  run.precision = info.precision;
  run.steps = static_cast<std::int64_t>(log.rows("steps"));
  if (run.steps > 0) {
    const auto& samples = log.column("steps", "samples");
    run.samples = std::accumulate(samples.begin(), samples.end(), 0.0);
    run.time = log.column("steps", "time").back();
  }
  if (log.rows("worker_summary") > 0) {
    // --worker-table summary or sample:K: the mean over every worker's rows, from each step's.
    const auto& means = log.column("worker_summary", "samples_mean");
    const auto& workers = log.column("worker_summary", "workers");
    double sum = 0, rows = 0;
    for (std::size_t i = 0; i < means.size(); ++i) {
      sum += means[i] * workers[i];
      rows += workers[i];
    }
    run.samples_per_worker = rows > 0 ? sum / rows : kNaN;
  } else if (log.rows("workers") > 0) {
    const auto& samples = log.column("workers", "samples");
    run.samples_per_worker =
        std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  } else if (run.steps > 0) {
    run.samples_per_worker = run.samples / static_cast<double>(run.steps) /
                             static_cast<double>(std::max(run.workers, 1));
  } else {
    run.samples_per_worker = kNaN;
  }
  run.samples_per_second = run.time > 0 ? run.samples / run.time : kNaN;
  run.evaluations = static_cast<std::int64_t>(log.rows("eval"));
  run.final_accuracy = kNaN;
  run.best_accuracy = kNaN;
  if (run.evaluations > 0) {
    const auto& accuracy = log.column("eval", "accuracy");
    run.final_accuracy = accuracy.back();
    run.best_accuracy = *std::max_element(accuracy.begin(), accuracy.end());
    if (target) {
      const auto reached = std::find_if(accuracy.begin(), accuracy.end(),
                                        [&](double value) { return value >= *target; });
      if (reached != accuracy.end()) {
        const auto row = static_cast<std::size_t>(reached - accuracy.begin());
        run.time_to_target = log.column("eval", "time")[row];
        run.step_to_target = static_cast<std::int64_t>(log.column("eval", "step")[row]);
      }
    }
  }
  return run;
}

Report build_report(const std::vector<std::string>& logs, std::optional<double> target) {
  if (logs.empty()) usage_error("no metric log given (mb-report RUN.h5 ...)");
  if (target && !(*target > 0 && *target <= 1)) {
    usage_error(cat("--target ", shortest_decimal(*target),
                    ": a test accuracy between 0 and 1 is expected (0.8 for 80%)"));
  }
  Report report;
  report.target = target;
  for (const auto& path : logs) {
    report.runs.push_back(summarize_run(plot::RunLog::open(path), target));
  }
  if (!target) return report;

  std::vector<std::string> tools;
  for (const auto& run : report.runs) {
    if (std::find(tools.begin(), tools.end(), run.tool) == tools.end()) tools.push_back(run.tool);
  }
  auto& runs = report.runs;
  for (auto& run : runs) {
    run.base = tools.size() > 1 ? first_run(runs, tools[0], run.seed) : std::size_t{0};
    if (run.base) run.ratio_to_base = ratio_of(run, runs[*run.base]);
  }
  for (std::size_t t = 1; t < tools.size(); ++t) {
    Comparison comparison;
    comparison.base_tool = tools[0];
    comparison.tool = tools[t];
    std::set<std::uint64_t> seeds;
    for (const auto& run : runs) {
      if (run.tool == tools[0] || run.tool == tools[t]) seeds.insert(run.seed);
    }
    std::vector<double> ratios;
    for (const std::uint64_t seed : seeds) {
      SeedRatio entry;
      entry.seed = seed;
      entry.base_run = first_run(runs, tools[0], seed);
      entry.other_run = first_run(runs, tools[t], seed);
      if (entry.base_run && entry.other_run) {
        entry.ratio = ratio_of(runs[*entry.other_run], runs[*entry.base_run]);
      }
      if (entry.ratio) ratios.push_back(*entry.ratio);
      comparison.seeds.push_back(entry);
    }
    comparison.compared = static_cast<int>(ratios.size());
    comparison.mean = comparison.min = comparison.max = kNaN;
    if (!ratios.empty()) {
      comparison.mean =
          std::accumulate(ratios.begin(), ratios.end(), 0.0) / static_cast<double>(ratios.size());
      comparison.min = *std::min_element(ratios.begin(), ratios.end());
      comparison.max = *std::max_element(ratios.begin(), ratios.end());
    }
    report.comparisons.push_back(std::move(comparison));
  }
  return report;
}

void write_table(const Report& report, std::ostream& out) {
  if (report.target) {
    out << "# time to " << percent_text(*report.target) << ": the first evaluation at or above "
        << percent_text(*report.target)
        << " test accuracy, in the log's clock (virtual: emulated seconds)\n";
  }
  std::vector<TableColumn> columns = {{"run", "", false},
                                      {"log", "", true},
                                      {"tool", "", true},
                                      {"model", "", true},
                                      {"workers", "", false},
                                      {"seed", "", false},
                                      {"clock", "", true},
                                      {"device", "", true},
                                      {"steps", "", false},
                                      {"samples", "", false},
                                      {"samples/worker", "(per step)", false},
                                      {"time", "(s)", false},
                                      {"samples/s", "", false},
                                      {"final acc", "(%)", false},
                                      {"best acc", "(%)", false}};
  if (report.target) {
    columns.push_back({cat("time to ", percent_text(*report.target)), "(s)", false});
    columns.push_back({"at step", "", false});
    columns.push_back({"base", "(run)", false});
    columns.push_back({"ratio", "(x base)", false});
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < report.runs.size(); ++i) {
    const RunSummary& run = report.runs[i];
    std::vector<std::string> row = {cat(i + 1),
                                    run.log,
                                    run.tool,
                                    run.model.empty() ? "-" : run.model,
                                    cat(run.workers),
                                    cat(run.seed),
                                    run.clock,
                                    device_text(run),
                                    cat(run.steps),
                                    fixed(run.samples, 0),
                                    fixed(run.samples_per_worker, 1),
                                    fixed(run.time, 1),
                                    fixed(run.samples_per_second, 1),
                                    fixed(100 * run.final_accuracy, 2),
                                    fixed(100 * run.best_accuracy, 2)};
    if (report.target) {
      row.push_back(run.time_to_target ? fixed(*run.time_to_target, 1) : missing_time(run));
      row.push_back(run.step_to_target ? cat(*run.step_to_target) : "-");
      row.push_back(run.base ? cat(*run.base + 1) : "-");
      row.push_back(run.ratio_to_base ? fixed(*run.ratio_to_base, 3) : "-");
    }
    rows.push_back(std::move(row));
  }
  write_aligned(columns, rows, out);
  for (const auto& comparison : report.comparisons) {
    out << "#\n";
    write_comparison(report, comparison, out);
  }
}

void write_json(const Report& report, std::ostream& out) {
  JsonWriter json(out);
  json.begin_object();
  json.key("target");
  json_optional(json, report.target);
  json.key("runs").begin_array();
  for (std::size_t i = 0; i < report.runs.size(); ++i) {
    const RunSummary& run = report.runs[i];
    json.begin_object();
    json.key("run").value(static_cast<std::int64_t>(i + 1));
    json.key("log").value(run.log);
    json.key("tool").value(run.tool);
    json.key("model").value(run.model);
    json.key("workers").value(run.workers);
    json.key("seed").value(run.seed);
    json.key("clock").value(run.clock);
    json.key("device").value(run.device);
    json.key("precision").value(run.precision);
    json.key("steps").value(run.steps);
    json.key("samples").value(run.samples);
    json.key("samples_per_worker").value(run.samples_per_worker);
    json.key("time").value(run.time);
    json.key("samples_per_second").value(run.samples_per_second);
    json.key("evaluations").value(run.evaluations);
    json.key("final_accuracy").value(run.final_accuracy);
    json.key("best_accuracy").value(run.best_accuracy);
    if (report.target) {
      json.key("reached").value(run.time_to_target.has_value());
      json.key("time_to_target");
      json_optional(json, run.time_to_target);
      json.key("step_to_target");
      json_optional(json, run.step_to_target);
      json.key("base_run");
      json_optional(json, run.base ? std::optional<std::int64_t>(*run.base + 1) : std::nullopt);
      json.key("ratio_to_base");
      json_optional(json, run.ratio_to_base);
    }
    json.end_object();
  }
  json.end_array();
  if (report.target) {
    json.key("comparisons").begin_array();
    for (const auto& comparison : report.comparisons) {
      json.begin_object();
      json.key("base_tool").value(comparison.base_tool);
      json.key("tool").value(comparison.tool);
      json.key("seeds").begin_array();
      for (const auto& seed : comparison.seeds) {
        const auto run_number = [](const std::optional<std::size_t>& index) {
          return index ? std::optional<std::int64_t>(*index + 1) : std::nullopt;
        };
        json.begin_object();
        json.key("seed").value(seed.seed);
        json.key("base_run");
        json_optional(json, run_number(seed.base_run));
        json.key("run");
        json_optional(json, run_number(seed.other_run));
        json.key("ratio");
        json_optional(json, seed.ratio);
        json.end_object();
      }
      json.end_array();
      json.key("compared").value(comparison.compared);
      json.key("mean").value(comparison.mean);
      json.key("min").value(comparison.min);
      json.key("max").value(comparison.max);
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
  out << "\n";
}

void write_csv(const Report& report, std::ostream& out) {
  std::vector<std::string> header = {
      "run",          "log",           "tool",        "model",
      "workers",      "seed",          "clock",       "device",
      "precision",    "steps",         "samples",     "samples_per_worker",
      "time_s",       "samples_per_s", "evaluations", "final_accuracy",
      "best_accuracy"};
  if (report.target) {
    for (const char* name :
         {"target", "reached", "time_to_target_s", "step_to_target", "base_run", "ratio_to_base"}) {
      header.emplace_back(name);
    }
  }
  out << join(header, ",") << "\n";
  for (std::size_t i = 0; i < report.runs.size(); ++i) {
    const RunSummary& run = report.runs[i];
    std::vector<std::string> fields = {cat(i + 1),
                                       csv_quote(run.log),
                                       csv_quote(run.tool),
                                       csv_quote(run.model),
                                       cat(run.workers),
                                       cat(run.seed),
                                       csv_quote(run.clock),
                                       csv_quote(run.device),
                                       csv_quote(run.precision),
                                       cat(run.steps),
                                       csv_number(run.samples),
                                       csv_number(run.samples_per_worker),
                                       csv_number(run.time),
                                       csv_number(run.samples_per_second),
                                       cat(run.evaluations),
                                       csv_number(run.final_accuracy),
                                       csv_number(run.best_accuracy)};
    if (report.target) {
      fields.push_back(csv_number(*report.target));
      fields.emplace_back(run.time_to_target ? "true" : "false");
      fields.push_back(csv_optional(run.time_to_target));
      fields.push_back(csv_optional(run.step_to_target));
      fields.push_back(run.base ? cat(*run.base + 1) : std::string());
      fields.push_back(csv_optional(run.ratio_to_base));
    }
    out << join(fields, ",") << "\n";
  }
}

}  // namespace mbkit::report
