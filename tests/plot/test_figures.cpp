// Figures built from metric logs written here: the series each type extracts, the checks that
// refuse a log lacking what a type needs (naming the file and dataset), panels leaving out what
// no run can show, scaling, the straggler pane, the CSV, the gnuplot script, and legend
// placement.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/plot/figure_types.hpp"
#include "mbkit/plot/gnuplot.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::plot {
namespace {

struct LogSpec {
  int world_size = 1;
  int workers = 1;
  std::string induce;
  std::string clock = "wall";
  int steps = 20;
  int evals = 2;
  double seconds_per_step = 0.5;
  double throughput = 1000;
  int batch = 64;
  int seed = 1;
};

std::string write_log(const std::string& path, const LogSpec& spec) {
  metrics::RunInfo info;
  info.tool = "mb-train-fmb";
  info.version = "test";
  info.command_line = "mb-train-fmb ...";
  const auto profile = emulation::parse_straggler_profile(spec.induce);
  info.config_json =
      cat(R"({"batch_size":)", spec.batch, R"(,"comm":"ps","async":false,)", R"("induce":")",
          spec.induce, R"(","induce_spec":")", profile ? profile->spec() : std::string(),
          R"(","workers":)", spec.workers, R"(,"world_size":)", spec.world_size, R"(,"seed":)",
          spec.seed, R"(,"optimizer":{"name":"sgd"},"lr":0.1})");
  info.world_size = spec.world_size;
  info.model = "mlp";
  info.dataset = "toy";
  info.clock = spec.clock;
  auto log = metrics::MetricLog::create(path, info, true);
  for (int s = 1; s <= spec.steps; ++s) {
    metrics::StepRecord step;
    step.step = s;
    step.time = s * spec.seconds_per_step;
    step.wall_time = step.time;
    step.loss = 2.0 / s;
    step.lr = 0.1;
    step.samples = spec.batch * spec.workers;
    step.step_time = spec.seconds_per_step;
    step.throughput = s == 1 ? 1.0 : spec.throughput;  // a slow first step
    log.add(step);
    if (spec.world_size > 1) {
      for (int w = 0; w < spec.workers; ++w) {
        metrics::WorkerRecord worker;
        worker.step = s;
        worker.rank = w + 1;
        worker.samples = (w == 0 && s % 2 == 0) ? spec.batch / 2 : spec.batch;
        worker.compute_time = 0.01 * (1 + w);
        worker.staleness = w;
        log.add(worker);
      }
      metrics::CollectRecord collect;
      collect.step = s;
      collect.gradients = spec.workers;
      collect.samples = spec.batch * spec.workers;
      collect.wait_time = 0.02;
      log.add(collect);
    }
  }
  for (int e = 1; e <= spec.evals; ++e) {
    metrics::EvalRecord eval;
    eval.step = e * spec.steps / spec.evals;
    eval.time = eval.step * spec.seconds_per_step;
    eval.accuracy = 0.5 + 0.1 * e;
    log.add(eval);
  }
  log.close();
  return path;
}

class Figures : public ::testing::Test {
 protected:
  test::TempDir dir;
  std::vector<RunLog> logs;

  void open(const std::vector<std::string>& paths) {
    logs.clear();
    for (const auto& path : paths) logs.push_back(RunLog::open(path));
  }
  std::vector<RunRef> runs() const {
    std::vector<RunRef> refs;
    for (std::size_t i = 0; i < logs.size(); ++i) {
      refs.push_back({&logs[i], cat("run", i), static_cast<int>(i)});
    }
    return refs;
  }
  Figure build(const std::string& type, const PlotSettings& settings = {},
               const std::vector<std::string>& subset = {}) {
    std::vector<std::string> notes;
    return build_figure(find_figure_type(type), runs(), settings, subset, notes);
  }
};

TEST_F(Figures, CurvesTakeTheirColumns) {
  open({write_log(dir.file("a.h5"), {})});
  const Figure loss = build("loss-vs-step");
  ASSERT_EQ(loss.panes.size(), 1u);
  const Pane& pane = loss.panes[0];
  EXPECT_EQ(pane.xlabel, "Step");
  EXPECT_EQ(pane.ylabel, "Training loss");
  ASSERT_EQ(pane.series.size(), 1u);
  EXPECT_EQ(pane.series[0].x.size(), 20u);
  EXPECT_DOUBLE_EQ(pane.series[0].x[3], 4.0);
  EXPECT_DOUBLE_EQ(pane.series[0].y[3], 0.5);
  EXPECT_EQ(pane.series[0].title, "");  // one run: no legend

  const Pane cumsum = build("cumsum-vs-step").panes[0];
  EXPECT_DOUBLE_EQ(cumsum.series[0].y.back(), 20 * 64);

  const Pane accuracy = build("accuracy-vs-time").panes[0];
  EXPECT_EQ(accuracy.xlabel, "Time (s)");
  EXPECT_EQ(accuracy.series[0].x, (std::vector<double>{5.0, 10.0}));
  EXPECT_EQ(accuracy.series[0].style, SeriesStyle::kLinePoints);
  // As mb-report prints it: in per cent; time from the start of the run, not its first row.
  EXPECT_EQ(accuracy.ylabel, "Test accuracy (%)");
  EXPECT_EQ(accuracy.series[0].y, (std::vector<double>{60.0, 70.0}));
  EXPECT_EQ(accuracy.xmin, 0);
  EXPECT_TRUE(accuracy.horizontal_lines.empty());
}

TEST_F(Figures, TargetAccuracyIsALine) {
  open({write_log(dir.file("a.h5"), {})});
  PlotSettings settings;
  settings.target = 0.8;
  for (const char* type : {"accuracy-vs-time", "accuracy-vs-step", "accuracy-vs-epoch"}) {
    const Figure figure = build(type, settings);
    ASSERT_EQ(figure.panes[0].horizontal_lines.size(), 1u) << type;
    EXPECT_EQ(figure.panes[0].horizontal_lines[0].y, 80);
    EXPECT_EQ(figure.panes[0].horizontal_lines[0].text, "target 80%");
    const std::string script = gnuplot_script(figure, {}, "fig.png");
    EXPECT_NE(script.find("set arrow from graph 0, first 80 to graph 1, first 80 nohead"),
              std::string::npos)
        << script;
    EXPECT_NE(script.find("set label 'target 80%'"), std::string::npos);
  }
  EXPECT_TRUE(build("loss-vs-time", settings).panes[0].horizontal_lines.empty());
}

TEST_F(Figures, TimeUnitsAndTheVirtualClock) {
  LogSpec slow;
  slow.seconds_per_step = 600;  // 20 steps: 3.3 h
  LogSpec emulated;
  emulated.clock = "virtual";
  open({write_log(dir.file("slow.h5"), slow)});
  const Pane hours = build("loss-vs-time").panes[0];
  EXPECT_EQ(hours.xlabel, "Time (h)");
  EXPECT_DOUBLE_EQ(hours.series[0].x.back(), 20 * 600 / 3600.0);
  // --xmax in seconds chooses the unit too.
  PlotSettings limited;
  limited.xmax = 1800;
  const Pane minutes = build("loss-vs-time", limited).panes[0];
  EXPECT_EQ(minutes.xlabel, "Time (min)");
  EXPECT_DOUBLE_EQ(minutes.xmax, 30.0);

  open({write_log(dir.file("virtual.h5"), emulated)});
  EXPECT_TRUE(logs[0].virtual_clock());
  EXPECT_EQ(build("step-vs-time").panes[0].xlabel, "Emulated time (s)");
  open({dir.file("virtual.h5"), dir.file("slow.h5")});
  EXPECT_EQ(build("step-vs-time").panes[0].xlabel, "Time (h; emulated for some runs)");
}

TEST_F(Figures, LongRunsCountInThousands) {
  LogSpec spec;
  spec.steps = 12000;
  spec.evals = 100;
  spec.seconds_per_step = 0.01;
  open({write_log(dir.file("long.h5"), spec)});
  const Pane loss = build("loss-vs-step").panes[0];
  EXPECT_EQ(loss.xlabel, "Step (k)");
  EXPECT_FALSE(loss.integer_x);
  EXPECT_DOUBLE_EQ(loss.series[0].x.back(), 12.0);
  const Pane samples = build("cumsum-vs-step").panes[0];
  EXPECT_EQ(samples.ylabel, "Samples so far (k)");
  EXPECT_DOUBLE_EQ(samples.series[0].y.back(), 12000 * 64 / 1000.0);
  EXPECT_EQ(build("throughput-vs-time").panes[0].ylabel, "Throughput (samples/s)");
  EXPECT_EQ(build("step-vs-time").panes[0].xlabel, "Time (min)");
  // 100 evaluations: a line without marks.
  EXPECT_EQ(build("accuracy-vs-step").panes[0].series[0].style, SeriesStyle::kLine);
}

TEST_F(Figures, SmoothingKeepsTheRawDataFaint) {
  open({write_log(dir.file("a.h5"), {}), write_log(dir.file("b.h5"), {})});
  PlotSettings settings;
  settings.smooth = 5;
  const Pane pane = build("loss-vs-step", settings).panes[0];
  ASSERT_EQ(pane.series.size(), 4u);
  EXPECT_EQ(pane.series[0].style, SeriesStyle::kFaintLine);
  EXPECT_EQ(pane.series[0].title, "");
  EXPECT_EQ(pane.series[1].style, SeriesStyle::kLine);
  EXPECT_EQ(pane.series[1].title, "run0");
  EXPECT_EQ(pane.series[3].title, "run1");
  EXPECT_LT(pane.series[1].y[1], pane.series[0].y[0]);
  EXPECT_GT(pane.series[1].y[1], pane.series[0].y[1]);  // pulled towards the earlier loss
  // Counters are never smoothed.
  EXPECT_EQ(build("step-vs-time", settings).panes[0].series.size(), 2u);
}

TEST_F(Figures, HistogramsOfWorkers) {
  LogSpec spec;
  spec.world_size = 3;
  spec.workers = 2;
  open({write_log(dir.file("dist.h5"), spec)});
  const Pane batch = build("batch-size").panes[0];
  EXPECT_EQ(batch.ylabel, "Fraction of worker steps");
  ASSERT_EQ(batch.series.size(), 1u);
  const Series& bars = batch.series[0];
  EXPECT_EQ(bars.style, SeriesStyle::kBoxes);
  EXPECT_DOUBLE_EQ(batch.box_width, 1.0);
  EXPECT_DOUBLE_EQ(bars.x.front(), 32.0);
  EXPECT_DOUBLE_EQ(bars.x.back(), 64.0);
  EXPECT_DOUBLE_EQ(bars.y.front(), 0.25);  // rank 1 every other step
  EXPECT_DOUBLE_EQ(bars.y.back(), 0.75);
  ASSERT_EQ(batch.vertical_lines.size(), 1u);
  EXPECT_DOUBLE_EQ(batch.vertical_lines[0].x, 56.0);
  EXPECT_EQ(bars.title, "mean 56");

  const Pane compute = build("compute-time").panes[0];
  EXPECT_EQ(compute.xlabel, "Computation time (ms)");
  double total = 0;
  for (const double f : compute.series[0].y) total += f;
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_NEAR(compute.vertical_lines[0].x, 15.0, 1e-9);

  const Pane staleness = build("staleness").panes[0];
  EXPECT_EQ(staleness.series[0].y, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(build("master-batch-size").panes[0].ylabel, "Fraction of steps");
}

TEST_F(Figures, SeveralRunsShareBinsSideBySide) {
  LogSpec spec;
  spec.world_size = 3;
  spec.workers = 2;
  LogSpec bigger = spec;
  bigger.batch = 66;
  open({write_log(dir.file("a.h5"), spec), write_log(dir.file("b.h5"), bigger)});
  const Pane pane = build("batch-size").panes[0];
  ASSERT_EQ(pane.series.size(), 2u);
  EXPECT_EQ(pane.series[0].x, pane.series[1].x);
  EXPECT_DOUBLE_EQ(pane.box_width, 0.45);
  EXPECT_DOUBLE_EQ(pane.series[0].x_offset, -0.25);
  EXPECT_DOUBLE_EQ(pane.series[1].x_offset, 0.25);
  EXPECT_EQ(pane.series[0].title, "run0 (mean 56)");
}

TEST_F(Figures, MissingDataIsADataErrorNamingFileAndDataset) {
  const std::string single = write_log(dir.file("single.h5"), {});
  LogSpec no_eval;
  no_eval.evals = 0;
  const std::string quiet = write_log(dir.file("quiet.h5"), no_eval);
  open({single});
  EXPECT_MBKIT_ERROR(build("compute-time"), ExitCode::kBadData,
                     "single.h5: /workers has no rows (histogram compute-time needs a "
                     "distributed run)");
  EXPECT_MBKIT_ERROR(build("master-batch-size"), ExitCode::kBadData, "/collect has no rows");
  EXPECT_MBKIT_ERROR(build("straggler-dist"), ExitCode::kBadData,
                     "single.h5: the run induced no stragglers");
  EXPECT_MBKIT_ERROR(build("scaling"), ExitCode::kBadData,
                     "scaling needs runs with different numbers of workers");
  open({single, quiet});
  EXPECT_MBKIT_ERROR(build("accuracy-vs-step"), ExitCode::kBadData,
                     "quiet.h5: /eval has no rows (curve accuracy-vs-step needs evaluations");

  // A log from before micro-batches: the dataset is not there at all.
  LogSpec spec;
  spec.world_size = 3;
  spec.workers = 2;
  const std::string old = write_log(dir.file("old.h5"), spec);
  {
    io::File file = io::File::open(old, io::File::Mode::kReadWrite);
    file.open_group("workers").remove("micro_batches");
    file.close();
  }
  open({old});
  EXPECT_MBKIT_ERROR(build("micro-batches"), ExitCode::kBadData,
                     "old.h5: no dataset /workers/micro_batches (histogram micro-batches needs");
  EXPECT_EQ(build("compute-time").panes.size(), 1u);
}

TEST_F(Figures, PanelsLeaveOutWhatNoRunHas) {
  open({write_log(dir.file("single.h5"), {})});
  std::vector<std::string> notes;
  const Figure panel = build_figure(find_figure_type("panel"), runs(), {}, {}, notes);
  EXPECT_EQ(panel.panes.size(), 7u);  // no compute-time, no batch-size
  EXPECT_EQ(panel.rows, 3);
  EXPECT_EQ(panel.columns, 3);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("single.h5: /workers has no rows"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("compute-time, batch-size"), std::string::npos) << notes[0];
  EXPECT_TRUE(panel.legend.empty());
  // Asked for by name, a pane without data is an error.
  EXPECT_MBKIT_ERROR(build("panel", {}, {"loss-vs-step", "compute-time"}), ExitCode::kBadData,
                     "single.h5: /workers has no rows");
  const Figure two = build("panel", {}, {"loss-vs-step", "lr-vs-step"});
  EXPECT_EQ(two.panes.size(), 2u);
  EXPECT_EQ(two.panes[1].name, "lr-vs-step");
  EXPECT_EQ(two.columns, 2);
  EXPECT_MBKIT_ERROR(build("panel", {}, {"scaling"}), ExitCode::kUsage, "--subset: scaling");
  EXPECT_MBKIT_ERROR(build("loss-vs-step", {}, {"lr-vs-step"}), ExitCode::kUsage,
                     "not a panel type");
  // Of the histograms, a single process has only its step times.
  const Figure hist = build("panel-hist");
  ASSERT_EQ(hist.panes.size(), 1u);
  EXPECT_EQ(hist.panes[0].name, "step-time");
  // A log of a run that has not logged a step yet: nothing to draw.
  LogSpec nothing;
  nothing.steps = 0;
  nothing.evals = 0;
  open({write_log(dir.file("empty.h5"), nothing)});
  EXPECT_MBKIT_ERROR(build("panel"), ExitCode::kBadData, "empty.h5: /steps has no rows");
}

TEST_F(Figures, PanelsOfSeveralRunsShareOneLegend) {
  LogSpec spec;
  spec.world_size = 3;
  spec.workers = 2;
  open({write_log(dir.file("a.h5"), {}), write_log(dir.file("b.h5"), spec)});
  const Figure panel = build("panel");
  EXPECT_EQ(panel.panes.size(), 9u);
  ASSERT_EQ(panel.legend.size(), 2u);
  EXPECT_EQ(panel.legend[1].title, "run1");
  EXPECT_EQ(panel.legend[1].color, 1);
  for (const auto& pane : panel.panes) {
    for (const auto& series : pane.series) {
      EXPECT_TRUE(series.title.empty() || series.title.starts_with("mean")) << series.title;
    }
  }
  // The compute-time pane shows the distributed run only, in its colour.
  EXPECT_EQ(panel.panes[2].name, "compute-time");
  ASSERT_EQ(panel.panes[2].series.size(), 1u);
  EXPECT_EQ(panel.panes[2].series[0].color, 1);
}

TEST_F(Figures, StragglerDistributionFromTheConfig) {
  LogSpec cedar;
  cedar.world_size = 3;
  cedar.workers = 2;
  cedar.induce = "cedar";
  LogSpec custom = cedar;
  custom.induce = "0.5:0:0.5,2:0:0.5";
  open({write_log(dir.file("cedar.h5"), cedar), write_log(dir.file("cedar2.h5"), cedar),
        write_log(dir.file("custom.h5"), custom)});
  const Pane pane = build("straggler-dist").panes[0];
  ASSERT_EQ(pane.series.size(), 2u);  // one curve per distinct profile
  EXPECT_EQ(pane.series[0].title, "cedar (mean 0.0712 s)");
  EXPECT_EQ(pane.series[1].title, "0.5:0:0.5,2:0:0.5 (mean 1.25 s)");
  EXPECT_EQ(pane.series[1].color, 2);
  EXPECT_EQ(pane.xlabel, "Induced delay (s)");
  EXPECT_EQ(pane.ylabel, "Density (per s)");
  // Point masses: cedar's at 0, the custom profile's at 0.5 and 2 s.
  ASSERT_EQ(pane.impulses.size(), 3u);
  EXPECT_EQ(pane.impulses[0].text, "p=0.4");
  EXPECT_DOUBLE_EQ(pane.impulses[2].x, 2.0);
  EXPECT_EQ(pane.vertical_lines.size(), 2u);

  open({dir.file("cedar.h5")});
  const Pane alone = build("straggler-dist").panes[0];
  EXPECT_EQ(alone.xlabel, "Induced delay (ms)");
  EXPECT_EQ(alone.series[0].title, "cedar (mean 71.2 ms)");
  // Density per ms over [0, 400 ms]: integrates (with the mass at 0) to 1.
  double mass = 0.4;
  const auto& x = alone.series[0].x;
  const auto& y = alone.series[0].y;
  for (std::size_t i = 1; i < x.size(); ++i) mass += 0.5 * (y[i] + y[i - 1]) * (x[i] - x[i - 1]);
  EXPECT_NEAR(mass, 1.0, 1e-4);
}

TEST_F(Figures, WorkersDrawsTheStepTimeBesideTheSlowestDelayAndTheTimeToTarget) {
  // FMB runs of 4 and 8 workers with exponential delays of mean 1 s; their logs record no
  // delay, so the rest of each step is its whole 0.5 s and the theory is H_N x 1 s + 0.5 s.
  LogSpec four;
  four.world_size = 5;
  four.workers = 4;
  four.induce = "exp:1";
  LogSpec eight = four;
  eight.world_size = 9;
  eight.workers = 8;
  open({write_log(dir.file("four.h5"), four), write_log(dir.file("eight.h5"), eight)});
  PlotSettings settings;
  settings.target = 0.65;  // the second evaluation, at step 20: 10 s
  const Figure figure = build("workers", settings);
  ASSERT_EQ(figure.panes.size(), 2u);
  const Pane& step = figure.panes[0];
  ASSERT_EQ(step.series.size(), 2u);  // measured and theory (one group)
  EXPECT_EQ(step.series[0].x, (std::vector<double>{4, 8}));
  EXPECT_EQ(step.series[0].y, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(step.series[1].style, SeriesStyle::kDashedLine);
  EXPECT_NEAR(step.series[1].y[0], 1 + 1 / 2.0 + 1 / 3.0 + 1 / 4.0 + 0.5, 1e-6);
  EXPECT_NEAR(step.series[1].y[1], 2.717857142857 + 0.5, 1e-6);
  EXPECT_EQ(figure.panes[1].series[0].y, (std::vector<double>{10, 10}));
  EXPECT_EQ(figure.panes[1].ylabel, "Time to 65% (s)");
  // One legend above the panes.
  EXPECT_FALSE(figure.legend.empty());
  // Without --target only the step times; one cluster size is not a scaling.
  EXPECT_EQ(build("workers").panes.size(), 1u);
  open({dir.file("four.h5")});
  EXPECT_MBKIT_ERROR(build("workers"), ExitCode::kBadData,
                     "workers needs runs with different numbers of workers");
}

TEST_F(Figures, WorkersDrawsTheMeanOfSeveralSeedsWithTheirRange) {
  // Two seeds each of 4 and 8 workers whose steps take 0.5 and 0.7 s (4), 0.6 and 1.0 s (8):
  // one point per cluster size, the seeds' mean, their min and max as error bars.
  std::vector<std::string> paths;
  for (const auto& [workers, seed, seconds] : std::vector<std::tuple<int, int, double>>{
           {4, 1, 0.5}, {8, 1, 0.6}, {4, 2, 0.7}, {8, 2, 1.0}}) {
    LogSpec spec;
    spec.world_size = workers + 1;
    spec.workers = workers;
    spec.induce = "exp:1";
    spec.seed = seed;
    spec.seconds_per_step = seconds;
    paths.push_back(write_log(dir.file(cat(workers, "-s", seed, ".h5")), spec));
  }
  open(paths);
  PlotSettings settings;
  settings.target = 0.65;  // the second evaluation, at step 20: 20 steps' time
  const Figure figure = build("workers", settings);
  ASSERT_EQ(figure.panes.size(), 2u);
  const Pane& step = figure.panes[0];
  ASSERT_EQ(step.series.size(), 2u);  // one group: the seeds are not told apart
  const Series& measured = step.series[0];
  EXPECT_EQ(measured.x, (std::vector<double>{4, 8}));
  ASSERT_EQ(measured.y.size(), 2u);
  EXPECT_NEAR(measured.y[0], 0.6, 1e-12);
  EXPECT_NEAR(measured.y[1], 0.8, 1e-12);
  ASSERT_EQ(measured.y_low.size(), 2u);
  ASSERT_EQ(measured.y_high.size(), 2u);
  EXPECT_NEAR(measured.y_low[0], 0.5, 1e-12);
  EXPECT_NEAR(measured.y_low[1], 0.6, 1e-12);
  EXPECT_NEAR(measured.y_high[0], 0.7, 1e-12);
  EXPECT_NEAR(measured.y_high[1], 1.0, 1e-12);
  // The theory: the mean of the seeds' (no delay recorded: the rest is the whole step).
  const Series& theory = step.series[1];
  EXPECT_EQ(theory.x, (std::vector<double>{4, 8}));
  EXPECT_NEAR(theory.y[0], 1 + 1 / 2.0 + 1 / 3.0 + 1 / 4.0 + 0.6, 1e-6);
  EXPECT_FALSE(theory.has_range());
  const Series& reached = figure.panes[1].series.at(0);
  EXPECT_EQ(reached.x, (std::vector<double>{4, 8}));
  EXPECT_NEAR(reached.y[0], 12, 1e-9);
  EXPECT_NEAR(reached.y[1], 16, 1e-9);
  ASSERT_TRUE(reached.has_range());
  EXPECT_NEAR(reached.y_low[1], 12, 1e-9);
  EXPECT_NEAR(reached.y_high[1], 20, 1e-9);
  // Drawn as error bars from the data file's third and fourth columns.
  const std::string script = gnuplot_script(figure, {}, "workers.png");
  EXPECT_NE(script.find("'pane1-1.dat' using 1:2:3:4 with yerrorlines"), std::string::npos)
      << script;
  EXPECT_NE(script.find("'pane1-2.dat' using 1:2 with lines"), std::string::npos) << script;
  // One seed a size: no error bars.
  open({paths[0], paths[1]});
  EXPECT_FALSE(build("workers", settings).panes[0].series[0].has_range());
}

TEST_F(Figures, ScalingOverWorkerCounts) {
  LogSpec one;
  one.throughput = 1000;
  LogSpec two;
  two.world_size = 2;
  two.workers = 2;
  two.throughput = 1800;
  LogSpec four = two;
  four.world_size = 4;
  four.workers = 4;
  four.throughput = 3000;
  open({write_log(dir.file("one.h5"), one), write_log(dir.file("two.h5"), two),
        write_log(dir.file("four.h5"), four)});
  const Figure figure = build("scaling");
  ASSERT_EQ(figure.panes.size(), 3u);
  EXPECT_EQ(figure.columns, 3);
  const Series& throughput = figure.panes[0].series[0];
  EXPECT_EQ(throughput.x, (std::vector<double>{1, 2, 4}));
  // The medians after the warm-up step (whose throughput is 1).
  EXPECT_EQ(throughput.y, (std::vector<double>{1000, 1800, 3000}));
  EXPECT_EQ(figure.panes[1].series[0].y, (std::vector<double>{1, 1.8, 3}));
  EXPECT_EQ(figure.panes[2].series[0].y, (std::vector<double>{100, 90, 75}));
  EXPECT_EQ(figure.panes[1].series.back().title, "ideal");
  EXPECT_EQ(figure.panes[0].xtics, (std::vector<double>{1, 2, 4}));
  // Without a warm-up the first step's throughput counts in the median of 20.
  PlotSettings all_steps;
  all_steps.warmup_steps = 0;
  EXPECT_EQ(build("scaling", all_steps).panes[0].series[0].y[0], 1000);
  PlotSettings too_many;
  too_many.warmup_steps = 20;
  EXPECT_MBKIT_ERROR(build("scaling", too_many), ExitCode::kBadData, "all of them warm-up");
}

TEST_F(Figures, CsvHoldsEverySeries) {
  open({write_log(dir.file("a.h5"), {})});
  std::ostringstream csv;
  write_csv(build("accuracy-vs-step"), csv);
  EXPECT_EQ(csv.str(),
            "pane,series,x_label,x,y_label,y\n"
            "accuracy-vs-step,run0,Step,10,Test accuracy (%),60\n"
            "accuracy-vs-step,run0,Step,20,Test accuracy (%),70\n");
}

TEST_F(Figures, GnuplotScriptSetsTerminalOutputAndData) {
  open({write_log(dir.file("a.h5"), {}), write_log(dir.file("b.h5"), {})});
  Figure figure = build("loss-vs-step");
  figure.panes[0].series[0].title = "it's";
  DrawOptions options;
  options.format = ImageFormat::kSvg;
  const std::string script = gnuplot_script(figure, options, "out dir/fig.svg");
  EXPECT_NE(script.find("set terminal svg size 324,230"), std::string::npos) << script;
  EXPECT_NE(script.find("set output 'out dir/fig.svg'"), std::string::npos);
  EXPECT_NE(script.find("'pane1-1.dat' using 1:2 with lines"), std::string::npos);
  EXPECT_NE(script.find("title 'it''s'"), std::string::npos);
  EXPECT_EQ(script.find("multiplot"), std::string::npos);
  options.format = ImageFormat::kPdf;
  options.width = 3.5;
  options.height = 2.5;
  EXPECT_NE(gnuplot_script(figure, options, "f.pdf").find("set terminal pdfcairo size 3.5in,2.5in"),
            std::string::npos);

  const std::string script_dir = dir.file("script");
  fs::make_directories(script_dir);
  write_gnuplot_files(figure, options, script_dir, "fig.pdf");
  EXPECT_EQ(dir.entries().size(), 3u);
  EXPECT_TRUE(fs::exists(fs::join_path(script_dir, "plot.gp")));
  EXPECT_TRUE(fs::exists(fs::join_path(script_dir, "pane1-2.dat")));
  EXPECT_EQ(image_format_of("A.PNG", "-o"), ImageFormat::kPng);
  EXPECT_MBKIT_ERROR(image_format_of("fig.jpg", "-o"), ExitCode::kUsage, "-o: 'fig.jpg'");
}

TEST(Legend, GoesWhereTheDataLeaveRoom) {
  // A falling curve: the top right is empty, the top left is not.
  Pane falling;
  falling.series.push_back({"a",
                            "a",
                            {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                            {10, 5, 3, 2, 1.5, 1.2, 1.1, 1, 1, 1, 1},
                            0,
                            SeriesStyle::kLine});
  EXPECT_EQ(emptiest_corner(falling, 0.4, 0.2, KeyPlace::kTopLeft).place, KeyPlace::kTopRight);
  EXPECT_EQ(emptiest_corner(falling, 0.4, 0.2, KeyPlace::kTopRight).hidden, 0);
  // A rising one: the preferred corner when it is free.
  Pane rising;
  rising.series.push_back({"a", "a", {0, 10}, {0, 10}, 0, SeriesStyle::kLine});
  EXPECT_EQ(emptiest_corner(rising, 0.4, 0.2, KeyPlace::kBottomRight).place,
            KeyPlace::kBottomRight);
  // Bars at the right: the legend goes left.
  Pane bars;
  bars.box_width = 1;
  bars.series.push_back({"a",
                         "a",
                         {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                         {0, 0, 0, 0, 0, 0, 0, 0, 0.2, 0.8},
                         0,
                         SeriesStyle::kBoxes});
  EXPECT_EQ(emptiest_corner(bars, 0.4, 0.2, KeyPlace::kTopRight).place, KeyPlace::kTopLeft);
}

}  // namespace
}  // namespace mbkit::plot
