// mb-report --scaling: tf_cnn_benchmarks' statistics of per-step rates (mean over the steps'
// time, uncertainty, jitter as 1.4826 x the median absolute deviation) on hand-picked rates,
// and the table of hand-made logs: warm-up left out, runs of one worker count pooled, speedup
// against the fewest workers when there is no one-worker run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/report/scaling.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::report {
namespace {

TEST(ThroughputStats, AreTfCnnBenchmarksPerfTiming) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // The first step is warm-up; the last took no (emulated) time: no rate.
  const std::vector<double> rates = {1, 10, 12, 11, 50, nan};
  std::vector<double> samples(rates.size(), 10.0);
  std::vector<double> seconds;
  for (const double rate : rates) seconds.push_back(std::isfinite(rate) ? 10 / rate : 0.0);
  const auto stats = plot::throughput_stats(samples, seconds, rates, 1);
  EXPECT_EQ(stats.steps, 4u);
  EXPECT_DOUBLE_EQ(stats.median, 11.5);
  EXPECT_DOUBLE_EQ(stats.mean, 40 / (1 + 10.0 / 12 + 10.0 / 11 + 0.2));
  // numpy: np.std([10, 12, 11, 50]) / 2
  EXPECT_NEAR(stats.uncertainty, 16.902293 / 2, 1e-6);
  // |rate - 11.5| = 1.5, 0.5, 0.5, 38.5: their median is 1.
  EXPECT_DOUBLE_EQ(stats.jitter, 1.4826);
  EXPECT_TRUE(std::isnan(plot::throughput_stats(samples, seconds, rates, 6).median));
}

// A run of `workers` workers, 10 steps: the first at 1 sample/s, the others at `rate`.
std::string write_run(const std::string& path, int workers, double rate,
                      const std::string& tool = "mb-train-fmb", int hidden = 16) {
  metrics::RunInfo info;
  info.tool = tool;
  info.version = "test";
  info.config_json =
      cat(R"({"workers":)", workers, R"(,"model_config":{"hidden":")", hidden, R"("}})");
  info.world_size = workers;
  info.model = "mlp";
  auto log = metrics::MetricLog::create(path, info, true);
  double time = 0;
  for (int s = 1; s <= 10; ++s) {
    metrics::StepRecord step;
    step.step = s;
    step.samples = 64 * workers;
    step.throughput = s == 1 ? 1.0 : rate;
    step.step_time = static_cast<double>(step.samples) / step.throughput;
    time += step.step_time;
    step.time = time;
    log.add(step);
  }
  log.close();
  return path;
}

TEST(Scaling, AgainstTheFewestWorkersWithRunsPooled) {
  test::TempDir dir;
  const std::vector<std::string> logs = {write_run(dir.file("w4a.h5"), 4, 180),
                                         write_run(dir.file("w2.h5"), 2, 100),
                                         write_run(dir.file("w4b.h5"), 4, 200)};
  const ScalingReport report = build_scaling(logs, -1);
  EXPECT_EQ(report.base_workers, 2);
  ASSERT_EQ(report.rows.size(), 2u);
  const ScalingEntry& two = report.rows[0];
  const ScalingEntry& four = report.rows[1];
  EXPECT_EQ(two.workers, 2);
  EXPECT_EQ(two.logs, std::vector<std::string>{logs[1]});
  EXPECT_EQ(two.steps, 9u);  // a tenth of the steps is warm-up
  EXPECT_DOUBLE_EQ(two.throughput, 100);
  EXPECT_DOUBLE_EQ(two.speedup, 2);
  EXPECT_DOUBLE_EQ(two.efficiency, 1);
  EXPECT_DOUBLE_EQ(two.jitter, 0);
  EXPECT_EQ(four.logs, (std::vector<std::string>{logs[0], logs[2]}));
  EXPECT_EQ(four.steps, 18u);
  EXPECT_DOUBLE_EQ(four.throughput, 190);  // the median of the runs' medians
  EXPECT_DOUBLE_EQ(four.speedup, 3.8);
  EXPECT_DOUBLE_EQ(four.efficiency, 0.95);
  // The pooled steps: 9 at 180 and 9 at 200, 256 samples each.
  EXPECT_DOUBLE_EQ(four.mean, 18 * 256 / (9 * 256 / 180.0 + 9 * 256 / 200.0));
  EXPECT_DOUBLE_EQ(four.uncertainty, 10 / std::sqrt(18.0));
  EXPECT_DOUBLE_EQ(four.jitter, 1.4826 * 10);

  std::ostringstream table;
  write_scaling_table(report, table);
  EXPECT_NE(table.str().find("speedup against the 2-worker run, taken to have scaled perfectly"),
            std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("# 4 workers: images/sec: 189.5 +/- 2.4 (jitter = 14.8)"),
            std::string::npos)
      << table.str();
  std::ostringstream csv;
  write_scaling_csv(report, csv);
  EXPECT_NE(csv.str().find("\n4,2,18,190,3.8,0.95,"), std::string::npos) << csv.str();

  // With no warm-up the slow first steps count: every run's median stays, steps grow.
  const ScalingReport all = build_scaling(logs, 0);
  EXPECT_EQ(all.rows[1].steps, 20u);
  EXPECT_DOUBLE_EQ(all.rows[1].throughput, 190);
}

TEST(Scaling, RunsOfDifferentSetupsAreRefusedNamingBoth) {
  test::TempDir dir;
  const std::string one = write_run(dir.file("w1.h5"), 1, 50);
  const std::string wide = write_run(dir.file("w2-wide.h5"), 2, 100, "mb-train-fmb", 256);
  const std::string dbsl = write_run(dir.file("w2-dbsl.h5"), 2, 100, "mb-train-dbsl");
  EXPECT_MBKIT_ERROR(build_scaling({one, wide}, -1), ExitCode::kUsage,
                     cat("--scaling: ", one, " and ", wide,
                         " are runs of different models (mlp hidden=16 against mlp hidden=256)"));
  EXPECT_MBKIT_ERROR(build_scaling({one, dbsl}, -1), ExitCode::kUsage,
                     cat("--scaling: ", one, " and ", dbsl,
                         " are runs of different tools (mb-train-fmb against mb-train-dbsl)"));
  EXPECT_EQ(build_scaling({one, write_run(dir.file("w2.h5"), 2, 100)}, -1).rows.size(), 2u);
}

TEST(Scaling, BadInput) {
  test::TempDir dir;
  const std::string log = write_run(dir.file("w1.h5"), 1, 50);
  const auto code = [](const std::vector<std::string>& logs, int warmup) {
    try {
      build_scaling(logs, warmup);
    } catch (const Error& error) {
      return error.code();
    }
    return ExitCode::kSuccess;
  };
  EXPECT_EQ(code({}, -1), ExitCode::kUsage);
  EXPECT_EQ(code({log}, -2), ExitCode::kUsage);
  EXPECT_EQ(code({log}, 10), ExitCode::kBadData);  // every step warm-up
  EXPECT_EQ(code({dir.file("missing.h5")}, -1), ExitCode::kBadData);
  EXPECT_EQ(code({log}, 9), ExitCode::kSuccess);
}

}  // namespace
}  // namespace mbkit::report
