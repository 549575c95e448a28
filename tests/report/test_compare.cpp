// mb-report --compare: a real run against its emulation, on logs whose step times and
// evaluations are chosen here, so that every figure is computed by hand: per-step relative
// errors matched by step number (median and 95th percentile, numpy's linear interpolation),
// step-time medians, time to target as training time, goals met or missed, a real run against
// its repeat, and the refusal of logs that are not a run and its emulation or its repeat.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/report/compare.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::report {
namespace {

struct Eval {
  std::int64_t step;
  double accuracy;
};

struct RunSpec {
  std::string clock = "wall";
  std::vector<std::int64_t> steps = {1, 2, 3, 4, 5};
  std::vector<double> step_times;
  std::vector<Eval> evals;
  std::string config = R"("batch_size":32,"seed":1)";
  double start_up = 0;  ///< seconds before the first step (the wall clock's log time counts it)
  double per_eval = 0;  ///< seconds each evaluation adds to the log's time
  int world_size = 2;   ///< 1: the workers emulated in one process (--emulate)
};

std::string write_run(const std::string& path, const RunSpec& run) {
  metrics::RunInfo info;
  info.tool = "mb-train-fmb";
  info.version = "test";
  info.clock = run.clock;
  info.world_size = run.world_size;
  info.model = "mlp";
  info.dataset = "toy";
  info.config_json = cat(R"({"workers":1,"comm":"ps","world_size":)", run.world_size,
                         R"(,"clock":")", run.clock, R"(",)", run.config, "}");
  auto log = metrics::MetricLog::create(path, info, true);
  double time = run.start_up;
  std::size_t next_eval = 0;
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    metrics::StepRecord step;
    step.step = run.steps[i];
    step.step_time = run.step_times[i];
    time += step.step_time;
    step.time = time;
    step.samples = 32;
    log.add(step);
    while (next_eval < run.evals.size() && run.evals[next_eval].step == step.step) {
      metrics::EvalRecord eval;
      eval.step = step.step;
      eval.accuracy = run.evals[next_eval].accuracy;
      eval.time = time;
      log.add(eval);
      time += run.per_eval;
      ++next_eval;
    }
  }
  log.close();
  return path;
}

// The cells of the line of `text` that starts with `label` (after the table's leading spaces),
// split where two spaces or more separate them; a CSV line whole when `separator` is given.
std::vector<std::string> row_of(const std::string& text, const std::string& label,
                                const std::string& separator = "  ") {
  for (const auto& line : split(text, '\n')) {
    const auto start = line.find_first_not_of(' ');
    if (start == std::string::npos || line.compare(start, label.size(), label) != 0) continue;
    if (separator != "  ") return {line};
    std::vector<std::string> cells;
    std::size_t at = start;
    while (at < line.size()) {
      std::size_t end = line.find("  ", at);
      if (end == std::string::npos) end = line.size();
      cells.push_back(line.substr(at, end - at));
      at = line.find_first_not_of(' ', end);
      if (at == std::string::npos) break;
    }
    return cells;
  }
  return {};
}

// The real run: steps of 0.1, 0.2, 0.1, 0.4, 0.1 s, 80% reached at step 4; its log's clock also
// counts 1 s of start-up and 0.5 s per evaluation.
RunSpec real_run() {
  RunSpec run;
  run.step_times = {0.10, 0.20, 0.10, 0.40, 0.10};
  run.evals = {{2, 0.5}, {4, 0.8}, {5, 0.85}};
  run.start_up = 1.0;
  run.per_eval = 0.5;
  return run;
}

// Its emulation: per-step errors 0.1, 0.1, 0, 0.25, 0.2; 80% reached at step 5.
RunSpec emulated_run() {
  RunSpec run;
  run.clock = "virtual";
  run.step_times = {0.11, 0.18, 0.10, 0.30, 0.12};
  run.evals = {{2, 0.6}, {4, 0.7}, {5, 0.82}};
  return run;
}

TEST(Compare, ErrorsAndTimeToTargetByHand) {
  test::TempDir dir;
  const std::string real = write_run(dir.file("real.h5"), real_run());
  const std::string emulated = write_run(dir.file("emulated.h5"), emulated_run());
  const ClockComparison c = compare_clocks(real, emulated, 0.8, 0);
  EXPECT_EQ(c.steps_compared, 5u);
  // Errors sorted: 0, 0.1, 0.1, 0.2, 0.25; p95 at position 0.95 x 4 = 3.8.
  EXPECT_NEAR(c.step_error_median, 0.1, 1e-12);
  EXPECT_NEAR(c.step_error_p95, 0.2 + 0.8 * 0.05, 1e-12);
  // Real step times sorted: 0.1, 0.1, 0.1, 0.2, 0.4; emulated: 0.10, 0.11, 0.12, 0.18, 0.30.
  EXPECT_NEAR(c.real.step_time_median, 0.1, 1e-12);
  EXPECT_NEAR(c.real.step_time_p95, 0.2 + 0.8 * 0.2, 1e-12);
  EXPECT_NEAR(c.emulated.step_time_median, 0.12, 1e-12);
  EXPECT_NEAR(c.emulated.step_time_p95, 0.18 + 0.8 * 0.12, 1e-12);
  EXPECT_NEAR(c.step_time_median_error, 0.2, 1e-12);
  // Training time: the real run's start-up and evaluations are not in it, its log's time is.
  ASSERT_TRUE(c.real.time_to_target && c.emulated.time_to_target);
  EXPECT_NEAR(*c.real.time_to_target, 0.8, 1e-12);
  EXPECT_NEAR(*c.real.clock_time_to_target, 1.0 + 0.8 + 0.5, 1e-12);
  EXPECT_EQ(*c.real.step_to_target, 4);
  EXPECT_NEAR(*c.emulated.time_to_target, 0.81, 1e-12);
  EXPECT_EQ(*c.emulated.step_to_target, 5);
  ASSERT_TRUE(c.time_to_target_error);
  EXPECT_NEAR(*c.time_to_target_error, 0.01 / 0.8, 1e-12);
  EXPECT_NEAR(c.final_accuracy_error, 0.03 / 0.85, 1e-12);
  ASSERT_EQ(c.checks.size(), 3u);
  EXPECT_EQ(c.checks[0].met, std::optional<bool>(false));  // 10% > 5%
  EXPECT_EQ(c.checks[1].met, std::optional<bool>(false));  // 24% > 10%
  EXPECT_EQ(c.checks[2].met, std::optional<bool>(true));   // 1.25% <= 5%

  std::ostringstream table;
  write_compare_table(c, table);
  EXPECT_EQ(row_of(table.str(), "per-step error, median"),
            (std::vector<std::string>{"per-step error, median", "-", "-", "10.0", "5", "MISS"}));
  EXPECT_EQ(row_of(table.str(), "time to 80% (s)"),
            (std::vector<std::string>{"time to 80% (s)", "0.800", "0.810", "1.2", "5", "ok"}));
  EXPECT_EQ(
      row_of(table.str(), "step time, median (ms)"),
      (std::vector<std::string>{"step time, median (ms)", "100.000", "120.000", "20.0", "-", "-"}));
  EXPECT_NE(table.str().find("# goals met: 1 of 3\n"), std::string::npos) << table.str();
  std::ostringstream csv;
  write_compare_csv(c, csv);
  const auto fields = split(row_of(csv.str(), "time_to_target", ",")[0], ',');
  ASSERT_EQ(fields.size(), 7u) << csv.str();
  EXPECT_EQ(fields[1], "s");
  EXPECT_NEAR(std::stod(fields[2]), 0.8, 1e-12);
  EXPECT_NEAR(std::stod(fields[3]), 0.81, 1e-12);
  EXPECT_NEAR(std::stod(fields[4]), 0.0125, 1e-12);
  EXPECT_EQ(fields[6], "true");
}

TEST(Compare, StepsMatchedByNumberAfterTheWarmUp) {
  test::TempDir dir;
  RunSpec emulated = emulated_run();
  // Step 3 missing from the emulation: steps 1, 2, 4, 5 are compared.
  emulated.steps = {1, 2, 4, 5};
  emulated.step_times = {0.11, 0.18, 0.30, 0.12};
  const std::string real = write_run(dir.file("real.h5"), real_run());
  const std::string emulation = write_run(dir.file("emulated.h5"), emulated);
  const ClockComparison all = compare_clocks(real, emulation, std::nullopt, 0);
  EXPECT_EQ(all.steps_compared, 4u);
  EXPECT_NEAR(all.step_error_median, 0.15, 1e-12);  // 0.1, 0.1, 0.2, 0.25
  EXPECT_EQ(all.checks.size(), 2u);                 // no target: no time to check
  // Two warm-up steps: 4 and 5 are left, errors 0.25 and 0.2.
  const ClockComparison later = compare_clocks(real, emulation, std::nullopt, 2);
  EXPECT_EQ(later.steps_compared, 2u);
  EXPECT_NEAR(later.step_error_median, 0.225, 1e-12);
  EXPECT_NEAR(later.real.step_time_median, 0.25, 1e-12);
}

TEST(Compare, TargetNotReachedIsSaidInTheRow) {
  test::TempDir dir;
  const std::string real = write_run(dir.file("real.h5"), real_run());
  const std::string emulated = write_run(dir.file("emulated.h5"), emulated_run());
  const ClockComparison c = compare_clocks(real, emulated, 0.84, 0);
  EXPECT_TRUE(c.real.time_to_target);
  EXPECT_FALSE(c.emulated.time_to_target);
  EXPECT_FALSE(c.time_to_target_error);
  EXPECT_FALSE(c.checks[2].met);
  std::ostringstream table;
  write_compare_table(c, table);
  EXPECT_NE(table.str().find("not reached"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("# goals met: 0 of 2 checked (1 without a value)"), std::string::npos)
      << table.str();
}

TEST(Compare, ARealRunAgainstItsRepeat) {
  test::TempDir dir;
  const std::string real = write_run(dir.file("real.h5"), real_run());
  // The same settings run again on the wall clock: the emulated run's steps and evaluations.
  RunSpec again = emulated_run();
  again.clock = "wall";
  const std::string repeat = write_run(dir.file("repeat.h5"), again);
  const ClockComparison c = compare_clocks(real, repeat, 0.8, 0);
  EXPECT_TRUE(c.repeat);
  EXPECT_EQ(c.emulation, "");
  // The figures are the emulation's of ErrorsAndTimeToTargetByHand.
  EXPECT_NEAR(c.step_error_median, 0.1, 1e-12);
  EXPECT_NEAR(c.step_error_p95, 0.2 + 0.8 * 0.05, 1e-12);
  ASSERT_TRUE(c.time_to_target_error);
  EXPECT_NEAR(*c.time_to_target_error, 0.01 / 0.8, 1e-12);
  std::ostringstream table;
  write_compare_table(c, table);
  EXPECT_NE(table.str().find(cat("# real: ", real, " (wall clock); repeat: ", repeat,
                                 " (wall clock, the same settings run again")),
            std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("# error: |repeat - real| / real;"), std::string::npos);
  // The second column is the repeat's; nothing in the table says emulated.
  EXPECT_EQ(table.str().find("emulated"), std::string::npos) << table.str();
  std::ostringstream json;
  write_compare_json(c, json);
  EXPECT_NE(json.str().find(R"("repeat": true)"), std::string::npos) << json.str();
  // A repeat has every setting the same: what an emulation may set otherwise is a difference.
  RunSpec slowed = again;
  slowed.config = R"("batch_size":32,"seed":1,"slowdown":"1=2","data":"elsewhere/toy.h5")";
  EXPECT_MBKIT_ERROR(compare_clocks(real, write_run(dir.file("slowed.h5"), slowed), 0.8, 0),
                     ExitCode::kUsage,
                     "are not runs of the same settings: slowdown (none against 1=2) (a repeat "
                     "of a real run must have all of them the same)");
}

TEST(Compare, RefusesWhatIsNotARunAndItsEmulation) {
  test::TempDir dir;
  const std::string real = write_run(dir.file("real.h5"), real_run());
  const std::string emulated = write_run(dir.file("emulated.h5"), emulated_run());
  RunSpec wide = emulated_run();
  wide.config = R"("batch_size":64,"seed":2)";
  const std::string other = write_run(dir.file("b64.h5"), wide);
  EXPECT_MBKIT_ERROR(compare_clocks(real, other, std::nullopt, 0), ExitCode::kUsage,
                     cat("--compare: ", real, " and ", other,
                         " are not runs of the same settings: batch_size (32 against 64), seed "
                         "(1 against 2)"));
  EXPECT_MBKIT_ERROR(compare_clocks(emulated, real, std::nullopt, 0), ExitCode::kUsage,
                     cat("--compare: ", emulated, " ran on the virtual clock and ", real,
                         " on the wall clock: give the real run first"));
  EXPECT_MBKIT_ERROR(compare_clocks(emulated, emulated, std::nullopt, 0), ExitCode::kUsage,
                     "both ran on the virtual clock");
  EXPECT_MBKIT_ERROR(compare_clocks(real, emulated, 1.5, 0), ExitCode::kUsage, "--target 1.5");
  EXPECT_MBKIT_ERROR(compare_clocks(real, dir.file("missing.h5"), std::nullopt, 0),
                     ExitCode::kBadData, "missing.h5");
  // What an emulation may set otherwise: its models, a slowdown, where the data are.
  RunSpec slowed = emulated_run();
  slowed.config = R"("batch_size":32,"seed":1,"slowdown":"1=2","data":"elsewhere/toy.h5",)"
                  R"("compute_model":"1e-4,2e-3")";
  const ClockComparison c =
      compare_clocks(real, write_run(dir.file("slowed.h5"), slowed), std::nullopt, 0);
  EXPECT_NE(c.emulation.find("slowdown 1=2"), std::string::npos) << c.emulation;
  // The workers emulated inside one process: the exchange options of its configuration count.
  RunSpec inside = emulated_run();
  inside.world_size = 1;
  inside.config = R"("batch_size":32,"seed":1,"emulate":1)";
  const ClockComparison one =
      compare_clocks(real, write_run(dir.file("inside.h5"), inside), std::nullopt, 0);
  EXPECT_NE(one.emulation.find("emulate 1"), std::string::npos) << one.emulation;
  // A cgroup's quota emulated by --cpu-quota, the worker inside one process: its sum is
  // "in-process" where the real run's was "auto".
  RunSpec auto_sum = real_run();
  auto_sum.config = R"("batch_size":32,"seed":1,"allreduce":"auto")";
  RunSpec quota = emulated_run();
  quota.world_size = 1;
  quota.config =
      R"("batch_size":32,"seed":1,"emulate":1,"allreduce":"in-process","cpu_quota":"1=0.05/0.1")";
  const ClockComparison q = compare_clocks(write_run(dir.file("auto.h5"), auto_sum),
                                           write_run(dir.file("quota.h5"), quota), std::nullopt, 0);
  EXPECT_NE(q.emulation.find("cpu_quota 1=0.05/0.1"), std::string::npos) << q.emulation;
  // Any other sum is a setting of its own.
  RunSpec shm = emulated_run();
  shm.config = R"("batch_size":32,"seed":1,"allreduce":"shm")";
  EXPECT_MBKIT_ERROR(compare_clocks(write_run(dir.file("auto2.h5"), auto_sum),
                                    write_run(dir.file("shm.h5"), shm), std::nullopt, 0),
                     ExitCode::kUsage, "allreduce (auto against shm)");
}

}  // namespace
}  // namespace mbkit::report
