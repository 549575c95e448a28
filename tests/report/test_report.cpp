// mb-report's library on small metric logs written here with the metric-log writer: the
// summary of a run, the time to a target (reached, not reached, no evaluations), the ratios by
// seed between tools, the table, the JSON and CSV (with fields that need escaping), the output
// file, and the errors for bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/report/report.hpp"
#include "mbkit/tools/mb_report.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::report {
namespace {

struct LogSpec {
  std::string tool = "mb-train-fmb";
  std::uint64_t seed = 1;
  std::string clock = "wall";
  std::string device;  ///< config "device"; left out of the config when empty (older logs)
  std::string precision = "fp32";
  int world_size = 1;
  int workers = 1;
  int steps = 10;
  double seconds_per_step = 2;
  int batch = 64;
  std::vector<double> accuracies = {0.5, 0.7, 0.9};  ///< one evaluation every 2 steps
};

std::string write_log(const std::string& path, const LogSpec& spec) {
  metrics::RunInfo info;
  info.tool = spec.tool;
  info.version = "test";
  info.command_line = spec.tool + " ...";
  info.config_json =
      cat(R"({"batch_size":)", spec.batch, R"(,"workers":)", spec.workers,
          spec.device.empty() ? "" : cat(R"(,"device":")", spec.device, R"(")"), "}");
  info.seed = spec.seed;
  info.world_size = spec.world_size;
  info.model = "mlp";
  info.dataset = "toy";
  info.clock = spec.clock;
  info.precision = spec.precision;
  auto log = metrics::MetricLog::create(path, info, true);
  for (int s = 1; s <= spec.steps; ++s) {
    metrics::StepRecord step;
    step.step = s;
    step.time = s * spec.seconds_per_step;
    step.wall_time = step.time / 100;
    step.samples = spec.batch * spec.workers;
    log.add(step);
    if (spec.world_size > 1) {
      for (int w = 0; w < spec.workers; ++w) {
        metrics::WorkerRecord worker;
        worker.step = s;
        worker.rank = w + 1;
        worker.samples = w == 0 ? spec.batch / 2 : spec.batch;
        log.add(worker);
      }
    }
  }
  for (std::size_t e = 0; e < spec.accuracies.size(); ++e) {
    metrics::EvalRecord eval;
    eval.step = static_cast<std::int64_t>(2 * (e + 1));
    eval.time = static_cast<double>(eval.step) * spec.seconds_per_step;
    eval.accuracy = spec.accuracies[e];
    log.add(eval);
  }
  log.close();
  return path;
}

class Reports : public ::testing::Test {
 protected:
  test::TempDir dir;

  std::string log(const std::string& name, const LogSpec& spec = {}) {
    return write_log(dir.file(name), spec);
  }
  static LogSpec amb(std::uint64_t seed, std::vector<double> accuracies) {
    LogSpec spec;
    spec.tool = "mb-train-amb";
    spec.seed = seed;
    spec.accuracies = std::move(accuracies);
    return spec;
  }
  static LogSpec fmb(std::uint64_t seed, std::vector<double> accuracies) {
    LogSpec spec;
    spec.seed = seed;
    spec.accuracies = std::move(accuracies);
    return spec;
  }
  static std::string table(const Report& report) {
    std::ostringstream out;
    write_table(report, out);
    return out.str();
  }
};

TEST_F(Reports, SummaryOfADistributedRun) {
  LogSpec spec;
  spec.world_size = 5;
  spec.workers = 4;
  spec.clock = "virtual";
  spec.seed = 7;
  const auto path = log("ps.h5", spec);
  const RunSummary run = summarize_run(plot::RunLog::open(path), 0.8);
  EXPECT_EQ(run.log, path);
  EXPECT_EQ(run.tool, "mb-train-fmb");
  EXPECT_EQ(run.model, "mlp");
  EXPECT_EQ(run.workers, 4);
  EXPECT_EQ(run.seed, 7u);
  EXPECT_EQ(run.clock, "virtual");
  EXPECT_EQ(run.steps, 10);
  EXPECT_DOUBLE_EQ(run.samples, 10 * 64 * 4);
  // Per worker and step, from /workers: one worker does half a batch.
  EXPECT_DOUBLE_EQ(run.samples_per_worker, (32 + 3 * 64) / 4.0);
  // The log's clock (emulated here), not wall_time.
  EXPECT_DOUBLE_EQ(run.time, 20);
  EXPECT_DOUBLE_EQ(run.samples_per_second, 10 * 64 * 4 / 20.0);
  EXPECT_EQ(run.evaluations, 3);
  EXPECT_DOUBLE_EQ(run.final_accuracy, 0.9);
  EXPECT_DOUBLE_EQ(run.best_accuracy, 0.9);
  ASSERT_TRUE(run.time_to_target.has_value());
  EXPECT_DOUBLE_EQ(*run.time_to_target, 12);  // the third evaluation, at step 6
  EXPECT_EQ(run.step_to_target, 6);
}

TEST_F(Reports, SingleProcessRunAndTheFirstEvaluationAtTheTarget) {
  // Exactly at the target counts; later higher accuracies do not move it; the final accuracy
  // is the last, the best the highest.
  const auto path = log("one.h5", fmb(1, {0.6, 0.8, 0.95, 0.85}));
  const RunSummary run = summarize_run(plot::RunLog::open(path), 0.8);
  EXPECT_EQ(run.workers, 1);
  EXPECT_DOUBLE_EQ(run.samples_per_worker, 64);  // no /workers rows: /steps/samples per worker
  EXPECT_DOUBLE_EQ(run.final_accuracy, 0.85);
  EXPECT_DOUBLE_EQ(run.best_accuracy, 0.95);
  ASSERT_TRUE(run.time_to_target.has_value());
  EXPECT_DOUBLE_EQ(*run.time_to_target, 8);
  EXPECT_EQ(run.step_to_target, 4);
}

TEST_F(Reports, NotReachedAndNoEvaluations) {
  const auto low = log("low.h5", fmb(1, {0.5, 0.79}));
  const auto none = log("none.h5", fmb(2, {}));
  const Report report = build_report({low, none}, 0.8);
  ASSERT_EQ(report.runs.size(), 2u);
  EXPECT_FALSE(report.runs[0].time_to_target.has_value());
  EXPECT_FALSE(report.runs[1].time_to_target.has_value());
  EXPECT_EQ(report.runs[1].evaluations, 0);
  EXPECT_TRUE(std::isnan(report.runs[1].final_accuracy));
  const std::string text = table(report);
  EXPECT_NE(text.find("not reached"), std::string::npos) << text;
  EXPECT_NE(text.find("no evaluations"), std::string::npos) << text;
}

TEST_F(Reports, WithoutTargetNoTimeToTarget) {
  const Report report =
      build_report({log("a.h5", fmb(1, {0.9})), log("b.h5", amb(1, {0.9}))}, std::nullopt);
  EXPECT_FALSE(report.runs[0].time_to_target.has_value());
  EXPECT_FALSE(report.runs[0].base.has_value());
  EXPECT_TRUE(report.comparisons.empty());
  const std::string text = table(report);
  EXPECT_EQ(text.find("time to"), std::string::npos) << text;
  EXPECT_EQ(text.find("ratio"), std::string::npos) << text;
  std::ostringstream json;
  write_json(report, json);
  EXPECT_NE(json.str().find("\"target\": null"), std::string::npos) << json.str();
  EXPECT_EQ(json.str().find("time_to_target"), std::string::npos) << json.str();
  std::ostringstream csv;
  write_csv(report, csv);
  EXPECT_EQ(csv.str().find("time_to_target"), std::string::npos) << csv.str();
}

TEST_F(Reports, RatiosBySeedAgainstTheFirstTool) {
  // FMB reaches 80% at step 6 (12 s) for seeds 1 and 2, AMB at step 4 (8 s) and 2 (4 s);
  // seed 3 AMB never does; seed 4 has no AMB run. The logs are given out of seed order.
  const Report report = build_report(
      {log("fmb-s2.h5", fmb(2, {0.5, 0.7, 0.9})), log("amb-s1.h5", amb(1, {0.7, 0.85})),
       log("fmb-s1.h5", fmb(1, {0.5, 0.7, 0.9})), log("amb-s2.h5", amb(2, {0.9})),
       log("fmb-s3.h5", fmb(3, {0.9})), log("amb-s3.h5", amb(3, {0.5})),
       log("fmb-s4.h5", fmb(4, {0.9}))},
      0.8);
  ASSERT_EQ(report.comparisons.size(), 1u);
  const Comparison& comparison = report.comparisons[0];
  EXPECT_EQ(comparison.base_tool, "mb-train-fmb");  // the first log's tool
  EXPECT_EQ(comparison.tool, "mb-train-amb");
  ASSERT_EQ(comparison.seeds.size(), 4u);
  EXPECT_EQ(comparison.seeds[0].seed, 1u);
  ASSERT_TRUE(comparison.seeds[0].ratio.has_value());
  EXPECT_DOUBLE_EQ(*comparison.seeds[0].ratio, 8.0 / 12.0);
  EXPECT_EQ(comparison.seeds[0].base_run, 2u);
  EXPECT_EQ(comparison.seeds[0].other_run, 1u);
  ASSERT_TRUE(comparison.seeds[1].ratio.has_value());
  EXPECT_DOUBLE_EQ(*comparison.seeds[1].ratio, 4.0 / 12.0);
  EXPECT_FALSE(comparison.seeds[2].ratio.has_value());
  EXPECT_FALSE(comparison.seeds[3].ratio.has_value());
  EXPECT_FALSE(comparison.seeds[3].other_run.has_value());
  EXPECT_EQ(comparison.compared, 2);
  EXPECT_DOUBLE_EQ(comparison.mean, (8.0 / 12.0 + 4.0 / 12.0) / 2);
  EXPECT_DOUBLE_EQ(comparison.min, 4.0 / 12.0);
  EXPECT_DOUBLE_EQ(comparison.max, 8.0 / 12.0);
  // Each run against the first FMB run of its seed.
  EXPECT_EQ(report.runs[1].base, 2u);
  ASSERT_TRUE(report.runs[1].ratio_to_base.has_value());
  EXPECT_DOUBLE_EQ(*report.runs[1].ratio_to_base, 8.0 / 12.0);
  EXPECT_EQ(report.runs[0].base, 0u);
  EXPECT_DOUBLE_EQ(*report.runs[0].ratio_to_base, 1.0);
  EXPECT_FALSE(report.runs[5].ratio_to_base.has_value());  // AMB seed 3: not reached
  const std::string text = table(report);
  EXPECT_NE(text.find("# seed 1: mb-train-amb / mb-train-fmb time to 80%: 0.667 (8.0 s / 12.0 s)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# seed 3: mb-train-amb / mb-train-fmb time to 80%: not both reached 80% "
                      "(mb-train-amb: not reached)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# seed 4: mb-train-amb / mb-train-fmb time to 80%: no mb-train-amb log"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# mb-train-amb / mb-train-fmb time to 80%: mean 0.500 over 2 seeds (min "
                      "0.333, max 0.667)"),
            std::string::npos)
      << text;
}

TEST_F(Reports, SeveralToolsEachAgainstTheFirst) {
  LogSpec third = fmb(1, {0.85});
  third.tool = "mb-train-dbsl";
  const Report report = build_report(
      {log("a.h5", fmb(1, {0.5, 0.9})), log("b.h5", amb(1, {0.9})), log("c.h5", third)}, 0.8);
  ASSERT_EQ(report.comparisons.size(), 2u);
  EXPECT_EQ(report.comparisons[0].tool, "mb-train-amb");
  EXPECT_EQ(report.comparisons[1].tool, "mb-train-dbsl");
  EXPECT_EQ(report.comparisons[1].base_tool, "mb-train-fmb");
  EXPECT_DOUBLE_EQ(report.comparisons[0].mean, 0.5);
  EXPECT_DOUBLE_EQ(report.comparisons[1].mean, 0.5);
  EXPECT_EQ(report.comparisons[1].compared, 1);
  const std::string text = table(report);
  EXPECT_NE(text.find("mb-train-dbsl / mb-train-fmb time to 80%: mean 0.500 over 1 seed (min"),
            std::string::npos)
      << text;
}

TEST_F(Reports, OneToolEveryRunAgainstTheFirst) {
  const Report report = build_report(
      {log("a.h5", fmb(1, {0.5, 0.9})), log("b.h5", fmb(2, {0.9})), log("c.h5", fmb(3, {0.1}))},
      0.8);
  EXPECT_TRUE(report.comparisons.empty());
  EXPECT_EQ(report.runs[1].base, 0u);
  EXPECT_EQ(report.runs[2].base, 0u);
  EXPECT_DOUBLE_EQ(*report.runs[1].ratio_to_base, 0.5);
  EXPECT_FALSE(report.runs[2].ratio_to_base.has_value());
}

TEST_F(Reports, TableIsHashHeadedAndAligned) {
  LogSpec spec = fmb(1, {0.5, 0.9});
  spec.world_size = 3;
  spec.workers = 2;
  const Report report =
      build_report({log("fmb.h5", spec), log("a-longer-name.h5", amb(1, {0.85}))}, 0.8);
  const std::string text = table(report);
  const auto lines = split(text, '\n');
  // A description line, the names and the units, then one unprefixed row per run.
  std::vector<std::string> header;
  std::vector<std::string> rows;
  for (const auto& line : lines) {
    if (starts_with(line, "#  run")) header.push_back(line);
    if (!line.empty() && line[0] == ' ') rows.push_back(line);
  }
  ASSERT_EQ(header.size(), 1u) << text;
  ASSERT_EQ(rows.size(), 2u) << text;
  for (const char* unit : {"(s)", "(%)", "(per step)", "(x base)"}) {
    EXPECT_NE(text.find(unit), std::string::npos) << unit << "\n" << text;
  }
  for (const char* column : {"samples/s", "final acc", "best acc", "time to 80%", "workers"}) {
    EXPECT_NE(header[0].find(column), std::string::npos) << column << "\n" << text;
  }
  // Right-aligned numbers: the rows and the header end at the same place.
  EXPECT_EQ(rows[0].size(), header[0].size()) << text;
  EXPECT_EQ(rows[1].size(), header[0].size()) << text;
  // The second column (the log) is left-aligned: both rows' tools start at the same place.
  EXPECT_EQ(rows[0].find("mb-train-fmb"), rows[1].find("mb-train-amb")) << text;
  EXPECT_NE(rows[0].find(" 90.00 "), std::string::npos) << text;  // best accuracy, per cent
  EXPECT_NE(rows[0].find(" 8.0 "), std::string::npos) << text;    // reached at step 4
  EXPECT_NE(rows[1].find(" 0.500"), std::string::npos) << text;   // 4 s / 8 s
}

TEST_F(Reports, NameTheDeviceAndAPrecisionOtherThanFp32) {
  LogSpec gpu = fmb(1, {0.5});
  gpu.device = "cuda:1";
  gpu.precision = "bf16";
  LogSpec gpu_fp32 = fmb(1, {0.5});
  gpu_fp32.device = "cuda";
  const Report report = build_report(
      {log("gpu.h5", gpu), log("gpu-single.h5", gpu_fp32), log("old.h5", fmb(1, {0.5}))}, 0.8);
  ASSERT_EQ(report.runs.size(), 3u);
  EXPECT_EQ(report.runs[0].device, "cuda:1");
  EXPECT_EQ(report.runs[0].precision, "bf16");
  EXPECT_EQ(report.runs[2].device, "cpu");  // a log without the config key: before --device
  EXPECT_EQ(report.runs[2].precision, "fp32");
  const std::string text = table(report);
  EXPECT_NE(text.find(" cuda:1 bf16 "), std::string::npos) << text;
  EXPECT_NE(text.find(" cuda "), std::string::npos) << text;  // fp32 goes unsaid
  EXPECT_EQ(text.find("fp32"), std::string::npos) << text;
  std::ostringstream json;
  write_json(report, json);
  EXPECT_NE(json.str().find("\"device\": \"cuda:1\",\n      \"precision\": \"bf16\""),
            std::string::npos)
      << json.str();
  std::ostringstream csv;
  write_csv(report, csv);
  EXPECT_NE(csv.str().find(",wall,cuda:1,bf16,"), std::string::npos) << csv.str();
  EXPECT_NE(csv.str().find(",wall,cpu,fp32,"), std::string::npos) << csv.str();
}

TEST_F(Reports, JsonAndCsvEscapeAndCarryEveryField) {
  const auto odd = log("odd, \"quoted\" name.h5", fmb(1, {0.5, 0.9}));
  const auto empty = log("empty.h5", amb(1, {}));
  const Report report = build_report({odd, empty}, 0.8);
  std::ostringstream json;
  write_json(report, json);
  const std::string j = json.str();
  EXPECT_NE(j.find(json_quote(odd)), std::string::npos) << j;
  EXPECT_NE(j.find("odd, \\\"quoted\\\" name.h5"), std::string::npos) << j;
  EXPECT_NE(j.find("\"target\": 0.8"), std::string::npos) << j;
  EXPECT_NE(j.find("\"time_to_target\": 8"), std::string::npos) << j;
  EXPECT_NE(j.find("\"time_to_target\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"final_accuracy\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"comparisons\""), std::string::npos) << j;
  std::ostringstream csv;
  write_csv(report, csv);
  const auto lines = split(csv.str(), '\n');
  ASSERT_EQ(lines.size(), 4u) << csv.str();  // header, two runs, and the final newline
  EXPECT_TRUE(starts_with(lines[0],
                          "run,log,tool,model,workers,seed,clock,device,precision,steps,samples,"))
      << lines[0];
  EXPECT_NE(lines[0].find(",time_to_target_s,"), std::string::npos) << lines[0];
  EXPECT_TRUE(starts_with(lines[1], cat("1,\"", dir.path(), "/odd, \"\"quoted\"\" name.h5\",")))
      << lines[1];
  EXPECT_NE(lines[1].find(",true,8,4,1,1"), std::string::npos) << lines[1];
  // No evaluations: empty accuracies and time.
  EXPECT_NE(lines[2].find(",0,,,0.8,false,,,1,"), std::string::npos) << lines[2];
  EXPECT_EQ(split(lines[2], ',').size(), split(lines[0], ',').size()) << lines[2];
}

TEST_F(Reports, BadFilesAreDataErrorsNamingThem) {
  EXPECT_MBKIT_ERROR(build_report({dir.file("missing.h5")}, 0.8), ExitCode::kBadData,
                     dir.file("missing.h5") + ": no such file");
  EXPECT_MBKIT_ERROR(build_report({dir.path()}, 0.8), ExitCode::kBadData, "is a directory");
  test::write_text(dir.file("text.h5"), "not hdf5\n");
  EXPECT_MBKIT_ERROR(build_report({dir.file("text.h5")}, 0.8), ExitCode::kBadData,
                     dir.file("text.h5") + ": not an HDF5 file");
  {
    io::File other = io::File::create(dir.file("other.h5"));
    other.set_attribute("format", "mbkit-dataset");
    other.close();
  }
  EXPECT_MBKIT_ERROR(build_report({log("good.h5"), dir.file("other.h5")}, 0.8), ExitCode::kBadData,
                     dir.file("other.h5") + ": not an mbkit metric log");
}

TEST_F(Reports, ARowAFullDiskLeftZeroIsNoRow) {
  // The disk filled while the last rows were flushed: the columns' extents grew, their values
  // were not written, and HDF5 reads its fill value, 0, for them (step 0, accuracy 0).
  const auto path = log("full.h5", fmb(1, {0.5, 0.7, 0.9}));
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    for (const char* table : {"steps", "eval"}) {
      const io::Group group = file.open_group(table);
      for (const auto& name : group.member_names()) {
        io::Dataset column = group.open_dataset(name);
        column.set_extent({column.dims()[0] + 2});
      }
    }
    file.close();
  }
  const RunSummary run = summarize_run(plot::RunLog::open(path), 0.8);
  EXPECT_EQ(run.steps, 10);
  EXPECT_DOUBLE_EQ(run.time, 20);
  EXPECT_EQ(run.evaluations, 3);
  EXPECT_DOUBLE_EQ(run.final_accuracy, 0.9);
  EXPECT_EQ(run.step_to_target, 6);
}

TEST_F(Reports, BadCommandLines) {
  EXPECT_MBKIT_ERROR(build_report({}, 0.8), ExitCode::kUsage, "no metric log given");
  const auto path = log("a.h5");
  EXPECT_MBKIT_ERROR(build_report({path}, 80), ExitCode::kUsage, "--target 80");
  EXPECT_MBKIT_ERROR(build_report({path}, 0), ExitCode::kUsage, "--target 0");
  EXPECT_MBKIT_ERROR(build_report({path}, std::nan("")), ExitCode::kUsage, "--target");
  tools::report::ReportOptions options;
  options.logs = {path};
  options.json = options.csv = true;
  std::ostringstream out;
  EXPECT_MBKIT_ERROR(tools::report::run_report(options, out), ExitCode::kUsage,
                     "--json and --csv exclude each other");
}

TEST_F(Reports, OutputFileIsReplacedOnlyWithForce) {
  tools::report::ReportOptions options;
  options.logs = {log("a.h5", fmb(1, {0.9})), log("b.h5", amb(1, {0.9}))};
  options.has_target = true;
  options.target = 0.8;
  options.csv = true;
  options.output = dir.file("report.csv");
  std::ostringstream out;
  EXPECT_EQ(tools::report::run_report(options, out), 0);
  EXPECT_EQ(out.str(), "");
  std::ostringstream expected;
  write_csv(build_report(options.logs, 0.8), expected);
  EXPECT_EQ(fs::read_text_file(options.output), expected.str());
  options.csv = false;
  EXPECT_MBKIT_ERROR(tools::report::run_report(options, out), ExitCode::kUsage,
                     "report.csv exists; use --force");
  options.force = true;
  EXPECT_EQ(tools::report::run_report(options, out), 0);
  const std::string text = fs::read_text_file(options.output);
  EXPECT_NE(text.find("# seed 1: mb-train-amb / mb-train-fmb time to 80%: 1.000"),
            std::string::npos)
      << text;
  // Nothing but the report is left in the directory (no temporary).
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.h5", "b.h5", "report.csv"}));
}

}  // namespace
}  // namespace mbkit::report
