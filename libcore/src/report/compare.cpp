#include "mbkit/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mbkit/plot/clock_compare.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/report/number_text.hpp"
#include "mbkit/report/report.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double relative_error(double real, double emulated) {
  if (!(real > 0) || !std::isfinite(real) || !std::isfinite(emulated)) return kNaN;
  return std::abs(emulated - real) / real;
}

GoalCheck check(const std::string& name, double value, double goal) {
  GoalCheck result{name, value, goal, std::nullopt};
  if (std::isfinite(value)) result.met = value <= goal;
  return result;
}

ComparedRun compared_run(const plot::RunLog& log, const std::vector<double>& step_times,
                         std::optional<double> target) {
  ComparedRun run;
  run.log = log.path();
  run.clock = log.virtual_clock() ? "virtual" : "wall";
  run.steps = static_cast<std::int64_t>(log.rows("steps"));
  run.evaluations = static_cast<std::int64_t>(log.rows("eval"));
  run.step_time_median = plot::median(step_times);
  run.step_time_p95 = plot::quantile(step_times, 0.95);
  run.final_accuracy = kNaN;
  if (run.evaluations == 0) return run;
  const auto& accuracy = log.column("eval", "accuracy");
  run.final_accuracy = accuracy.back();
  if (!target) return run;
  const auto reached = std::find_if(accuracy.begin(), accuracy.end(),
                                    [&](double value) { return value >= *target; });
  if (reached == accuracy.end()) return run;
  const auto row = static_cast<std::size_t>(reached - accuracy.begin());
  run.time_to_target = plot::training_times(log)[row];
  run.clock_time_to_target = log.column("eval", "time")[row];
  run.step_to_target = static_cast<std::int64_t>(log.column("eval", "step")[row]);
  return run;
}

// What a run's time-to-target cell says when it has no time.
std::string missing_time(const ComparedRun& run) {
  return run.evaluations == 0 ? "no evaluations" : "not reached";
}

// A row of the table and the CSV. Values are in `unit` of the CSV (seconds, fractions); the
// table shows them scaled by `scale` and with `decimals`.
struct Row {
  std::string key;    ///< CSV name
  std::string label;  ///< table name, with the table's unit
  std::string unit;   ///< CSV unit: "s", "fraction"
  double real = kNaN;
  double emulated = kNaN;
  std::string real_text;  ///< instead of the value ("not reached")
  std::string emulated_text;
  double error = kNaN;
  double goal = kNaN;
  std::optional<bool> met;
  double scale = 1;
  int decimals = 3;
};

Row make_row(const std::string& key, const std::string& label, const std::string& unit) {
  Row row;
  row.key = key;
  row.label = label;
  row.unit = unit;
  return row;
}

std::string time_to_target_label(double target) {
  return cat("time to ", percent_text(target));
}

std::vector<Row> rows_of(const ClockComparison& c, double time_scale, const std::string& unit) {
  std::vector<Row> rows;
  const auto step_row = [&](const char* key, const char* label, double real, double emulated,
                            double error) {
    Row row = make_row(key, cat(label, " (", unit, ")"), "s");
    row.real = real;
    row.emulated = emulated;
    row.error = error;
    row.scale = 1 / time_scale;
    return row;
  };
  rows.push_back(step_row("step_time_median", "step time, median", c.real.step_time_median,
                          c.emulated.step_time_median, c.step_time_median_error));
  rows.push_back(step_row("step_time_p95", "step time, p95", c.real.step_time_p95,
                          c.emulated.step_time_p95, c.step_time_p95_error));
  for (const auto& goal : c.checks) {
    if (goal.name == "time_to_target_error") continue;
    const bool median = goal.name == "step_time_error_median";
    Row row =
        make_row(goal.name, median ? "per-step error, median" : "per-step error, p95", "fraction");
    row.error = goal.value;
    row.goal = goal.goal;
    row.met = goal.met;
    rows.push_back(row);
  }
  if (c.target) {
    Row row = make_row("time_to_target", cat(time_to_target_label(*c.target), " (s)"), "s");
    row.real = c.real.time_to_target.value_or(kNaN);
    row.emulated = c.emulated.time_to_target.value_or(kNaN);
    if (!c.real.time_to_target) row.real_text = missing_time(c.real);
    if (!c.emulated.time_to_target) row.emulated_text = missing_time(c.emulated);
    row.error = c.time_to_target_error.value_or(kNaN);
    row.goal = kTimeToTargetGoal;
    row.met = c.checks.back().met;
    rows.push_back(row);
  }
  Row accuracy = make_row("final_accuracy", "final accuracy (%)", "fraction");
  accuracy.real = c.real.final_accuracy;
  accuracy.emulated = c.emulated.final_accuracy;
  accuracy.error = c.final_accuracy_error;
  accuracy.scale = 100;
  accuracy.decimals = 2;
  rows.push_back(accuracy);
  return rows;
}

std::string verdict_text(const std::optional<bool>& met) {
  if (!met) return "-";
  return *met ? "ok" : "MISS";
}

void json_optional(JsonWriter& json, const std::optional<double>& value) {
  if (value) {
    json.value(*value);
  } else {
    json.null();
  }
}

void write_run_json(JsonWriter& json, const ComparedRun& run, bool with_target) {
  json.begin_object();
  json.key("log").value(run.log);
  json.key("clock").value(run.clock);
  json.key("steps").value(run.steps);
  json.key("evaluations").value(run.evaluations);
  json.key("step_time_median").value(run.step_time_median);
  json.key("step_time_p95").value(run.step_time_p95);
  if (with_target) {
    json.key("reached").value(run.time_to_target.has_value());
    json.key("time_to_target");
    json_optional(json, run.time_to_target);
    json.key("clock_time_to_target");
    json_optional(json, run.clock_time_to_target);
    json.key("step_to_target");
    if (run.step_to_target) {
      json.value(*run.step_to_target);
    } else {
      json.null();
    }
  }
  json.key("final_accuracy").value(run.final_accuracy);
  json.end_object();
}

}  // namespace

ClockComparison compare_clocks(const std::string& real_path, const std::string& emulated_path,
                               std::optional<double> target, int warmup_steps) {
  if (target && !(*target > 0 && *target <= 1)) {
    usage_error(cat("--target ", shortest_decimal(*target),
                    ": a test accuracy between 0 and 1 is expected (0.8 for 80%)"));
  }
  if (warmup_steps < 0) usage_error(cat("--warmup-steps ", warmup_steps, ": must be 0 or more"));
  const auto real = plot::RunLog::open(real_path);
  const auto emulated = plot::RunLog::open(emulated_path);
  if (const std::string problem = plot::clock_compare_problem(real, emulated, true);
      !problem.empty()) {
    usage_error(cat("--compare: ", problem));
  }
  ClockComparison c;
  c.repeat = !emulated.virtual_clock();
  if (!c.repeat) c.emulation = plot::emulation_settings(real, emulated);
  c.warmup_steps = warmup_steps;
  c.target = target;
  const plot::AlignedSteps steps =
      plot::align_steps(real.column("steps", "step"), real.column("steps", "step_time"),
                        emulated.column("steps", "step"), emulated.column("steps", "step_time"),
                        static_cast<std::size_t>(warmup_steps));
  const std::vector<double> errors = plot::relative_step_errors(steps);
  c.steps_compared = errors.size();
  c.step_error_median = plot::median(errors);
  c.step_error_p95 = plot::quantile(errors, 0.95);
  c.real = compared_run(real, steps.real, target);
  c.emulated = compared_run(emulated, steps.emulated, target);
  c.step_time_median_error = relative_error(c.real.step_time_median, c.emulated.step_time_median);
  c.step_time_p95_error = relative_error(c.real.step_time_p95, c.emulated.step_time_p95);
  c.final_accuracy_error = relative_error(c.real.final_accuracy, c.emulated.final_accuracy);
  c.checks.push_back(check("step_time_error_median", c.step_error_median, kStepErrorMedianGoal));
  c.checks.push_back(check("step_time_error_p95", c.step_error_p95, kStepErrorP95Goal));
  if (target) {
    if (c.real.time_to_target && c.emulated.time_to_target) {
      const double error = relative_error(*c.real.time_to_target, *c.emulated.time_to_target);
      if (std::isfinite(error)) c.time_to_target_error = error;
    }
    c.checks.push_back(
        check("time_to_target_error", c.time_to_target_error.value_or(kNaN), kTimeToTargetGoal));
  }
  return c;
}

void write_compare_table(const ClockComparison& c, std::ostream& out) {
  const std::string second = c.repeat ? "repeat" : "emulated";
  if (c.repeat) {
    out << "# real: " << c.real.log << " (wall clock); repeat: " << c.emulated.log
        << " (wall clock, the same settings run again: how far real runs are apart)\n";
  } else {
    out << "# real: " << c.real.log << " (wall clock); emulated: " << c.emulated.log
        << " (virtual clock" << (c.emulation.empty() ? "" : cat("; ", c.emulation)) << ")\n";
  }
  out << "# error: |" << second << " - real| / real; per-step error: of each of the "
      << c.steps_compared << " steps both runs logged, matched by step";
  if (c.warmup_steps > 0) out << ", after " << c.warmup_steps << " warm-up steps";
  out << "\n";
  if (c.target) {
    out << "# " << time_to_target_label(*c.target)
        << ": the steps' time (/steps/step_time) up to the first evaluation at or above "
        << percent_text(*c.target)
        << (c.repeat ? " test accuracy: without the runs' start-up and evaluations\n"
                     : " test accuracy: without the real run's start-up and evaluations, which "
                       "the virtual clock does not count\n");
  }
  double longest = std::max(c.real.step_time_p95, c.emulated.step_time_p95);
  if (!std::isfinite(longest)) longest = 0;
  const TimeUnit unit = choose_time_unit(longest);
  const std::vector<TableColumn> columns = {{"quantity", "", true},     {"real", "", false},
                                            {second, "", false},        {"error", "(%)", false},
                                            {"goal", "(% max)", false}, {"verdict", "", true}};
  std::vector<std::vector<std::string>> cells;
  for (const Row& row : rows_of(c, unit.seconds, unit.name)) {
    const auto value = [&](double v, const std::string& text) {
      return text.empty() ? fixed(v * row.scale, row.decimals) : text;
    };
    cells.push_back({row.label, value(row.real, row.real_text),
                     value(row.emulated, row.emulated_text), fixed(100 * row.error, 1),
                     fixed(100 * row.goal, 0), verdict_text(row.met)});
  }
  write_aligned(columns, cells, out);
  int checked = 0;
  int met = 0;
  for (const auto& goal : c.checks) {
    checked += goal.met ? 1 : 0;
    met += goal.met && *goal.met ? 1 : 0;
  }
  out << "# goals met: " << met << " of " << checked;
  if (checked < static_cast<int>(c.checks.size())) {
    out << " checked (" << c.checks.size() - static_cast<std::size_t>(checked)
        << " without a value)";
  }
  out << "\n";
}

void write_compare_json(const ClockComparison& c, std::ostream& out) {
  JsonWriter json(out);
  json.begin_object();
  json.key("real");
  write_run_json(json, c.real, c.target.has_value());
  json.key("emulated");
  write_run_json(json, c.emulated, c.target.has_value());
  json.key("emulation").value(c.emulation);
  json.key("repeat").value(c.repeat);
  json.key("warmup_steps").value(c.warmup_steps);
  json.key("steps_compared").value(static_cast<std::int64_t>(c.steps_compared));
  json.key("step_time_error").begin_object();
  json.key("median").value(c.step_error_median);
  json.key("p95").value(c.step_error_p95);
  json.end_object();
  json.key("step_time_median_error").value(c.step_time_median_error);
  json.key("step_time_p95_error").value(c.step_time_p95_error);
  json.key("target");
  json_optional(json, c.target);
  json.key("time_to_target_error");
  json_optional(json, c.time_to_target_error);
  json.key("final_accuracy_error").value(c.final_accuracy_error);
  json.key("checks").begin_array();
  int met = 0;
  int checked = 0;
  for (const auto& goal : c.checks) {
    json.begin_object();
    json.key("name").value(goal.name);
    json.key("value").value(goal.value);
    json.key("goal").value(goal.goal);
    json.key("met");
    if (goal.met) {
      json.value(*goal.met);
      ++checked;
      met += *goal.met ? 1 : 0;
    } else {
      json.null();
    }
    json.end_object();
  }
  json.end_array();
  json.key("goals_checked").value(checked);
  json.key("goals_met").value(met);
  json.end_object();
  out << "\n";
}

void write_compare_csv(const ClockComparison& c, std::ostream& out) {
  out << "quantity,unit,real,emulated,error,goal,met\n";
  for (const Row& row : rows_of(c, 1, "s")) {
    out << join({row.key, row.unit, csv_number(row.real), csv_number(row.emulated),
                 csv_number(row.error), csv_number(row.goal),
                 row.met ? std::string(*row.met ? "true" : "false") : std::string()},
                ",")
        << "\n";
  }
}

}  // namespace mbkit::report
