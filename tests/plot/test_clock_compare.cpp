// mb-plot --type clock-compare and the arithmetic it shares with mb-report --compare: training
// time at each evaluation (the steps' time, not the log's clock), steps matched by number, and
// the figure's two panes from hand-made logs: the step-time distributions as steps of 1/n,
// accuracy against training time, and the refusal of logs that are not a run and its emulation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/clock_compare.hpp"
#include "mbkit/plot/figure_types.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::plot {
namespace {

TEST(ClockCompare, TrainingTimeSumsTheStepsUpToEachEvaluation) {
  // Steps 1-4 of 0.5, 1, 0.25, 2 s; evaluations after steps 2 and 4, and one before any step.
  EXPECT_EQ(training_times({1, 2, 3, 4}, {0.5, 1, 0.25, 2}, {0, 2, 4}),
            (std::vector<double>{0, 1.5, 3.75}));
  // Rows out of order read the same.
  EXPECT_EQ(training_times({3, 1, 4, 2}, {0.25, 0.5, 2, 1}, {2, 3}),
            (std::vector<double>{1.5, 1.75}));
}

TEST(ClockCompare, StepsAreMatchedByNumber) {
  const AlignedSteps steps = align_steps({1, 2, 3, 4}, {1, 2, 3, 4}, {2, 4, 5}, {20, 40, 50}, 0);
  EXPECT_EQ(steps.step, (std::vector<double>{2, 4}));
  EXPECT_EQ(steps.real, (std::vector<double>{2, 4}));
  EXPECT_EQ(steps.emulated, (std::vector<double>{20, 40}));
  EXPECT_EQ(relative_step_errors(steps), (std::vector<double>{9, 9}));
  EXPECT_EQ(align_steps({1, 2, 3, 4}, {1, 2, 3, 4}, {2, 4, 5}, {20, 40, 50}, 1).step,
            std::vector<double>{4});
  // A real step of no time has no relative error.
  EXPECT_TRUE(relative_step_errors(align_steps({1}, {0}, {1}, {1}, 0)).empty());
}

std::string write_log(const std::string& path, const std::string& clock,
                      const std::vector<double>& step_times, int batch = 32,
                      const std::string& extra_config = "") {
  metrics::RunInfo info;
  info.tool = "mb-train-fmb";
  info.version = "test";
  info.clock = clock;
  info.world_size = 2;
  info.model = "mlp";
  info.config_json = cat(R"({"workers":1,"batch_size":)", batch, R"(,"clock":")", clock, R"(")",
                         extra_config, "}");
  auto log = metrics::MetricLog::create(path, info, true);
  double time = clock == "wall" ? 5.0 : 0.0;  // the wall clock's start-up
  for (std::size_t i = 0; i < step_times.size(); ++i) {
    metrics::StepRecord step;
    step.step = static_cast<std::int64_t>(i + 1);
    step.step_time = step_times[i];
    time += step_times[i];
    step.time = time;
    log.add(step);
    if (step.step % 2 == 0) {
      metrics::EvalRecord eval;
      eval.step = step.step;
      eval.time = time;
      eval.accuracy = 0.1 * static_cast<double>(step.step);
      log.add(eval);
    }
  }
  log.close();
  return path;
}

Figure build(const std::vector<std::string>& paths, const PlotSettings& settings = {}) {
  std::vector<RunLog> logs;
  for (const auto& path : paths) logs.push_back(RunLog::open(path));
  std::vector<RunRef> runs;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    runs.push_back({&logs[i], cat("run", i), static_cast<int>(i)});
  }
  std::vector<std::string> notes;
  return build_figure(find_figure_type("clock-compare"), runs, settings, {}, notes);
}

TEST(ClockCompare, FigureHasTheDistributionsAndTheAccuracies) {
  test::TempDir dir;
  const std::string real = write_log(dir.file("real.h5"), "wall", {0.1, 0.3, 0.2, 0.2});
  const std::string emulated = write_log(dir.file("emulated.h5"), "virtual", {0.1, 0.2, 0.2, 0.1});
  const Figure figure = build({real, emulated});
  ASSERT_EQ(figure.panes.size(), 2u);
  const Pane& distribution = figure.panes[0];
  EXPECT_EQ(distribution.xlabel, "Step time (ms)");
  ASSERT_EQ(distribution.series.size(), 2u);
  // Sorted 100, 200, 200, 300 ms: up by 25% at each.
  EXPECT_EQ(distribution.series[0].x,
            (std::vector<double>{100, 100, 200, 200, 200, 200, 300, 300}));
  EXPECT_EQ(distribution.series[0].y, (std::vector<double>{0, 25, 25, 50, 50, 75, 75, 100}));
  ASSERT_EQ(distribution.vertical_lines.size(), 2u);
  EXPECT_DOUBLE_EQ(distribution.vertical_lines[0].x, 200);  // the medians
  EXPECT_DOUBLE_EQ(distribution.vertical_lines[1].x, 150);
  // Accuracy against training time: the real run's 5 s of start-up are not in it.
  const Pane& accuracy = figure.panes[1];
  EXPECT_EQ(accuracy.xlabel, "Training time (ms, each run's clock)");
  EXPECT_EQ(accuracy.series[0].x, (std::vector<double>{400, 800}));
  ASSERT_EQ(accuracy.series[1].x.size(), 2u);
  EXPECT_NEAR(accuracy.series[1].x[0], 300, 1e-9);  // 0.1 + 0.2 s
  EXPECT_NEAR(accuracy.series[1].x[1], 600, 1e-9);
  EXPECT_EQ(accuracy.series[0].y, (std::vector<double>{20, 40}));
  // One legend above the panes: the real run and its emulation.
  ASSERT_EQ(figure.legend.size(), 2u);
  EXPECT_EQ(figure.legend[0].title, "real (wall clock)");
  EXPECT_EQ(figure.legend[1].title, "emulated (virtual clock)");
}

TEST(ClockCompare, FigureRefusesWhatIsNotARunAndItsEmulation) {
  test::TempDir dir;
  const std::string real = write_log(dir.file("real.h5"), "wall", {0.1, 0.2});
  const std::string emulated = write_log(dir.file("emulated.h5"), "virtual", {0.1, 0.2});
  const std::string other = write_log(dir.file("b64.h5"), "virtual", {0.1, 0.2}, 64);
  EXPECT_MBKIT_ERROR(build({real}), ExitCode::kUsage, "clock-compare: two logs are expected");
  EXPECT_MBKIT_ERROR(build({emulated, real}), ExitCode::kUsage, "give the real run first");
  EXPECT_MBKIT_ERROR(
      build({real, other}), ExitCode::kUsage,
      cat(real, " and ", other, " are not runs of the same settings: batch_size (32 against 64)"));
}

TEST(ClockCompare, AnEmulationOnACommModelFileIsARunOfTheSameSettings) {
  // --comm-model FILE.h5 records the file's values too (comm_model_values): a model as much
  // as the file's name is.
  test::TempDir dir;
  const std::string real = write_log(dir.file("real.h5"), "wall", {0.1, 0.2});
  const std::string emulated =
      write_log(dir.file("emulated.h5"), "virtual", {0.1, 0.2}, 32,
                R"(,"comm_model":"link.h5","comm_model_values":"0.001,8e-09")");
  EXPECT_EQ(clock_compare_problem(RunLog::open(real), RunLog::open(emulated)), "");
}

}  // namespace
}  // namespace mbkit::plot
