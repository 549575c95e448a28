#include "mbkit/plot/clock_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "mbkit/plot/config.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

bool is_free(const std::string& key) {
  const auto& free = clock_compare_free_keys();
  return std::find(free.begin(), free.end(), key) != free.end();
}

std::string value_text(const std::string& value) {
  return value.empty() ? std::string("none") : value;
}

}  // namespace

const std::vector<std::string>& clock_compare_free_keys() {
  // comm_model_values: a --comm-model FILE's values, recorded beside the file's name.
  static const std::vector<std::string> kKeys = {
      "clock", "comm_model", "comm_model_values", "compute_model", "emulate",   "world_size",
      "data",  "test_data",  "comm_timeout",      "slowdown",      "cpu_quota", "cpu_quota_tick"};
  return kKeys;
}

std::string clock_compare_problem(const RunLog& real, const RunLog& emulated, bool repeat_allowed) {
  const std::string& a = real.path();
  const std::string& b = emulated.path();
  const bool real_virtual = real.virtual_clock();
  const bool emulated_virtual = emulated.virtual_clock();
  const bool repeat = repeat_allowed && !real_virtual && !emulated_virtual;
  if (!real_virtual && !emulated_virtual && !repeat) {
    return cat(a, " and ", b,
               " both ran on the wall clock: the second must be the emulation (--clock virtual)");
  }
  if (real_virtual && emulated_virtual) {
    return cat(a, " and ", b,
               " both ran on the virtual clock: the first must be the real run (--clock wall)");
  }
  if (real_virtual) {
    return cat(a, " ran on the virtual clock and ", b,
               " on the wall clock: give the real run first (REAL.h5 EMULATED.h5)");
  }
  // Every configuration key either has, and the attributes that say what ran, but those an
  // emulation may set otherwise. The stored configuration as it is, not the description of
  // labels, which leaves out what a single process does not use (an --emulate run's comm).
  // A repeat is a real run again: only where its data are and its timeout may differ.
  const auto free_key = [repeat](const std::string& key) {
    return repeat ? key == "data" || key == "test_data" || key == "comm_timeout" : is_free(key);
  };
  const auto settings_of = [&free_key](const RunLog& log) {
    FlatConfig fields;
    if (!log.info().config_json.empty()) {
      fields = flatten_json_object(log.info().config_json, cat(log.path(), ": config"));
    }
    // Measured at start (--allreduce auto), not set.
    std::erase_if(fields, [&free_key](const auto& field) {
      return field.first.starts_with("allreduce_trial.") || free_key(field.first);
    });
    fields["tool"] = log.info().tool;
    fields["model"] = log.info().model;
    fields["dataset"] = log.info().dataset;
    return fields;
  };
  const FlatConfig x = settings_of(real);
  const FlatConfig y = settings_of(emulated);
  std::set<std::string> keys;
  for (const auto* fields : {&x, &y}) {
    for (const auto& [key, value] : *fields) keys.insert(key);
  }
  std::vector<std::string> differences;
  for (const auto& key : keys) {
    const auto in_x = x.find(key);
    const auto in_y = y.find(key);
    const std::string a_value = in_x == x.end() ? std::string() : in_x->second;
    const std::string b_value = in_y == y.end() ? std::string() : in_y->second;
    // --emulate sums its workers in the process ("in-process"): it stands for any transport.
    if (key == "allreduce" && (a_value == "in-process" || b_value == "in-process")) continue;
    if (a_value != b_value) {
      differences.push_back(
          cat(key, " (", value_text(a_value), " against ", value_text(b_value), ")"));
    }
  }
  if (real.info().precision != emulated.info().precision && !keys.contains("precision")) {
    differences.push_back(
        cat("precision (", real.info().precision, " against ", emulated.info().precision, ")"));
  }
  if (real.workers() != emulated.workers() && !keys.contains("workers")) {
    differences.push_back(cat("workers (", real.workers(), " against ", emulated.workers(), ")"));
  }
  if (differences.empty()) return {};
  return cat(a, " and ", b, " are not runs of the same settings: ", join(differences, ", "),
             repeat ? " (a repeat of a real run must have all of them the same)"
                    : " (only the clock and the emulation's models may differ)");
}

std::string emulation_settings(const RunLog& real, const RunLog& emulated) {
  // The models the virtual clock ran on (root attributes: given, or measured at start).
  const auto model_text = [](const std::string& model) {
    std::vector<std::string> numbers;
    for (const auto& part : split(model, ',')) {
      char* end = nullptr;
      const double value = std::strtod(part.c_str(), &end);
      if (part.empty() || end != part.c_str() + part.size()) return model;  // not numbers
      numbers.push_back(strprintf("%.4g", value));
    }
    return join(numbers, ",");
  };
  const metrics::RunInfo& info = emulated.info();
  std::vector<std::string> settings;
  settings.push_back(info.comm_model.empty() ? std::string("comm model: none")
                                             : cat("comm model ", model_text(info.comm_model)));
  settings.push_back(info.compute_model.empty()
                         ? std::string("compute model: CPU time")
                         : cat("compute model ", model_text(info.compute_model)));
  for (const char* key : {"emulate", "slowdown", "cpu_quota", "cpu_quota_tick"}) {
    const std::string value = emulated.field(key);
    if (!value.empty() && value != "0" && value != real.field(key)) {
      settings.push_back(cat(key, " ", value));
    }
  }
  return join(settings, "; ");
}

AlignedSteps align_steps(const std::vector<double>& real_steps,
                         const std::vector<double>& real_times,
                         const std::vector<double>& emulated_steps,
                         const std::vector<double>& emulated_times, std::size_t warmup) {
  // The first row of each step number (a resumed run logs none twice; this only makes the
  // matching well defined).
  std::map<double, double> emulated;
  for (std::size_t i = 0; i < emulated_steps.size() && i < emulated_times.size(); ++i) {
    emulated.emplace(emulated_steps[i], emulated_times[i]);
  }
  std::map<double, double> real;
  for (std::size_t i = 0; i < real_steps.size() && i < real_times.size(); ++i) {
    real.emplace(real_steps[i], real_times[i]);
  }
  AlignedSteps aligned;
  std::size_t matched = 0;
  for (const auto& [step, time] : real) {
    const auto found = emulated.find(step);
    if (found == emulated.end()) continue;
    if (matched++ < warmup) continue;
    aligned.step.push_back(step);
    aligned.real.push_back(time);
    aligned.emulated.push_back(found->second);
  }
  return aligned;
}

std::vector<double> relative_step_errors(const AlignedSteps& steps) {
  std::vector<double> errors;
  for (std::size_t i = 0; i < steps.step.size(); ++i) {
    const double real = steps.real[i];
    const double emulated = steps.emulated[i];
    if (!(real > 0) || !std::isfinite(real) || !std::isfinite(emulated)) continue;
    errors.push_back(std::abs(emulated - real) / real);
  }
  return errors;
}

std::vector<double> training_times(const std::vector<double>& steps,
                                   const std::vector<double>& step_times,
                                   const std::vector<double>& eval_steps) {
  // Running sums by step number (rows are in step order in a log, but need not be here).
  std::map<double, double> by_step;
  for (std::size_t i = 0; i < steps.size() && i < step_times.size(); ++i) {
    if (std::isfinite(step_times[i])) by_step[steps[i]] += step_times[i];
  }
  std::vector<double> numbers;
  std::vector<double> sums;
  double total = 0;
  for (const auto& [step, seconds] : by_step) {
    total += seconds;
    numbers.push_back(step);
    sums.push_back(total);
  }
  std::vector<double> times;
  for (const double eval_step : eval_steps) {
    const auto after = std::upper_bound(numbers.begin(), numbers.end(), eval_step);
    times.push_back(after == numbers.begin()
                        ? 0.0
                        : sums[static_cast<std::size_t>(after - numbers.begin() - 1)]);
  }
  return times;
}

std::vector<double> training_times(const RunLog& log) {
  return training_times(log.column("steps", "step"), log.column("steps", "step_time"),
                        log.column("eval", "step"));
}

}  // namespace mbkit::plot
