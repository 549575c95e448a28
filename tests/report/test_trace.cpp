// mb-report --trace's span builder on a hand-made log of three ranks (rank 0 sleeps nothing):
// steps, updates after rank 0's gathering, evaluations, and each worker's sleep, compute, send
// and wait laid out from its step's start; on the wall clock send and wait come from the
// worker's next row, under the virtual clock from its own. Then the JSON events.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/report/trace.hpp"
#include "mbkit/tools/mb_report.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::report {
namespace {

constexpr int kSteps = 3;
constexpr int kRanks = 3;
constexpr double kStepTime = 1.5;

double step_end(int s) {
  return 2.0 * s;
}
double sleep_of(int s, int r) {
  return 0.1 * r + 0.001 * s;
}
double compute_of(int s, int r) {
  return 0.2 + 0.01 * s + 0.002 * r;
}
double send_of(int s, int r) {
  return 0.05 * s + 0.004 * r;
}
double wait_of(int s, int r) {
  return 0.03 * s + 0.005 * r;
}

std::string write_log(const std::string& path, const std::string& clock) {
  metrics::RunInfo info;
  info.tool = "mb-train-fmb";
  info.version = "test";
  info.config_json = R"({"workers":3})";
  info.world_size = kRanks;
  info.model = "mlp";
  info.dataset = "toy";
  info.clock = clock;
  auto log = metrics::MetricLog::create(path, info, true);
  for (int s = 1; s <= kSteps; ++s) {
    metrics::StepRecord step;
    step.step = s;
    step.time = step_end(s);
    step.step_time = kStepTime;
    step.samples = 48;
    log.add(step);
    for (int r = 0; r < kRanks; ++r) {
      metrics::WorkerRecord worker;
      worker.step = s;
      worker.rank = r;
      worker.samples = 16;
      // Rank 0 sleeps nothing: no span.
      worker.sleep_time = r == 0 ? 0.0 : sleep_of(s, r);
      worker.compute_time = compute_of(s, r);
      worker.send_time = send_of(s, r);
      worker.wait_time = wait_of(s, r);
      log.add(worker);
    }
    log.add(metrics::CollectRecord{s, kRanks, 48, 0.5 + 0.1 * s});
  }
  metrics::EvalRecord eval;
  eval.step = 2;
  eval.time = step_end(2);
  eval.wall_time = eval.time + 0.25;
  log.add(eval);
  log.close();
  return path;
}

const TraceSpan* find_span(const Trace& trace, const std::string& name, int track,
                           std::int64_t step) {
  const auto found = std::find_if(trace.spans.begin(), trace.spans.end(), [&](const TraceSpan& s) {
    return s.name == name && s.track == track && s.step == step;
  });
  return found == trace.spans.end() ? nullptr : &*found;
}

std::size_t count(const Trace& trace, const std::string& name) {
  return static_cast<std::size_t>(std::count_if(
      trace.spans.begin(), trace.spans.end(), [&](const TraceSpan& s) { return s.name == name; }));
}

class Traces : public ::testing::TestWithParam<std::string> {
 protected:
  test::TempDir dir;
};

TEST_P(Traces, LaysOutTheLogsColumns) {
  const bool emulated = GetParam() == "virtual";
  const auto log = plot::RunLog::open(write_log(dir.file("log.h5"), GetParam()));
  const Trace trace = build_trace(log);
  EXPECT_EQ(trace.clock, GetParam());
  EXPECT_EQ(trace.step_track, kRanks);
  ASSERT_EQ(trace.tracks.size(), 1u + kRanks);
  EXPECT_EQ(trace.tracks[0].name, "steps (rank 0)");
  EXPECT_EQ(trace.tracks[2].name, "rank 1");
  EXPECT_EQ(count(trace, "step"), std::size_t{kSteps});
  EXPECT_EQ(count(trace, "sleep"), std::size_t{kSteps * (kRanks - 1)});
  EXPECT_EQ(count(trace, "compute"), std::size_t{kSteps * kRanks});
  // The wall clock's last step has no next row to take its send and wait from.
  const std::size_t exchanged = (emulated ? kSteps : kSteps - 1) * kRanks;
  EXPECT_EQ(count(trace, "send"), exchanged);
  EXPECT_EQ(count(trace, "wait"), exchanged);
  for (int s = 1; s <= kSteps; ++s) {
    const double start = step_end(s) - kStepTime;
    const TraceSpan* step = find_span(trace, "step", kRanks, s);
    ASSERT_NE(step, nullptr);
    EXPECT_DOUBLE_EQ(step->start, start);
    EXPECT_DOUBLE_EQ(step->duration, kStepTime);
    const TraceSpan* update = find_span(trace, "update", kRanks, s);
    ASSERT_NE(update, nullptr);
    EXPECT_DOUBLE_EQ(update->start, start + 0.5 + 0.1 * s);
    EXPECT_NEAR(update->start + update->duration, step_end(s), 1e-12);
    for (int r = 0; r < kRanks; ++r) {
      SCOPED_TRACE(cat("step ", s, " rank ", r));
      const double slept = r == 0 ? 0.0 : sleep_of(s, r);
      EXPECT_EQ(find_span(trace, "sleep", r, s) != nullptr, r != 0);
      if (r != 0) {
        EXPECT_DOUBLE_EQ(find_span(trace, "sleep", r, s)->start, start);
      }
      const TraceSpan* compute = find_span(trace, "compute", r, s);
      ASSERT_NE(compute, nullptr);
      EXPECT_NEAR(compute->start, start + slept, 1e-12);
      EXPECT_DOUBLE_EQ(compute->duration, compute_of(s, r));
      const int from = emulated ? s : s + 1;
      const TraceSpan* send = find_span(trace, "send", r, s);
      const TraceSpan* wait = find_span(trace, "wait", r, s);
      if (from > kSteps) {
        EXPECT_EQ(send, nullptr);
        EXPECT_EQ(wait, nullptr);
        continue;
      }
      ASSERT_NE(send, nullptr);
      ASSERT_NE(wait, nullptr);
      EXPECT_NEAR(send->start, compute->start + compute->duration, 1e-12);
      EXPECT_DOUBLE_EQ(send->duration, send_of(from, r));
      EXPECT_NEAR(wait->start, send->start + send->duration, 1e-12);
      EXPECT_DOUBLE_EQ(wait->duration, wait_of(from, r));
    }
  }
  const TraceSpan* eval = find_span(trace, "evaluation", kRanks, 2);
  ASSERT_NE(eval, nullptr);
  EXPECT_DOUBLE_EQ(eval->start, step_end(2));
  // The emulated clock does not advance while evaluating.
  EXPECT_NEAR(eval->duration, emulated ? 0.0 : 0.25, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Clocks, Traces, ::testing::Values("wall", "virtual"),
                         [](const ::testing::TestParamInfo<std::string>& clock) {
                           return clock.param;
                         });

TEST(TraceJson, NamesTheTracksAndWritesMicroseconds) {
  test::TempDir dir;
  const auto log = plot::RunLog::open(write_log(dir.file("log.h5"), "virtual"));
  std::ostringstream out;
  write_trace(build_trace(log), "log.h5", out);
  const std::string json = out.str();
  EXPECT_EQ(json.rfind(R"({"traceEvents":[)", 0), 0u) << json.substr(0, 80);
  EXPECT_NE(json.find(R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":)"
                      R"("mb-train-fmb mlp, 3 workers, virtual clock"}})"),
            std::string::npos);
  EXPECT_NE(
      json.find(R"({"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"rank 2"}})"),
      std::string::npos);
  // Step 1 of rank 1: sleeps 0.101 s from 0.5 s, then computes 0.212 s.
  EXPECT_NE(json.find(R"({"name":"compute","cat":"worker","ph":"X","ts":601000,"dur":212000,)"
                      R"("pid":1,"tid":1,"args":{"step":1,"rank":1}})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("displayTimeUnit":"ms")"), std::string::npos);
}

ExitCode error_code(const tools::report::ReportOptions& options) {
  std::ostringstream out;
  try {
    tools::report::run_report(options, out);
  } catch (const Error& error) {
    return error.code();
  }
  return ExitCode::kSuccess;
}

TEST(TraceTool, RefusesWhatDoesNotApply) {
  test::TempDir dir;
  const std::string log = write_log(dir.file("log.h5"), "wall");
  tools::report::ReportOptions options;
  options.trace = dir.file("run.json");
  options.logs = {log, log};
  EXPECT_EQ(error_code(options), ExitCode::kUsage);
  options.logs = {log};
  options.json = true;
  EXPECT_EQ(error_code(options), ExitCode::kUsage);
  options.json = false;
  EXPECT_EQ(error_code(options), ExitCode::kSuccess);
  EXPECT_TRUE(fs::exists(options.trace));
  // An existing trace is replaced only with --force (a usage error without it).
  EXPECT_EQ(error_code(options), ExitCode::kUsage);
  options.force = true;
  EXPECT_EQ(error_code(options), ExitCode::kSuccess);
}

}  // namespace
}  // namespace mbkit::report
