// The metric log: its layout and run description, rows of every table, refusal to replace a
// file, truncation on resume, older logs and what is not a log. What other processes see (a live
// writer, one killed with SIGKILL) is in test_metric_log_crash.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "metric_log_test_support.hpp"
#include "test_helpers.hpp"

namespace mbkit::metrics {
namespace {

using namespace log_test;

TEST(MetricLog, CreateWritesRunInfoAndEveryColumn) {
  test::TempDir dir;
  const std::string path = dir.file("run.h5");
  MetricLog log = MetricLog::create(path, sample_info(), false);
  EXPECT_EQ(log.path(), path);
  log.close();
  EXPECT_FALSE(has_temporaries(dir));

  // A closed log opens in plain read mode too (h5dump, h5py without swmr=True).
  const io::File file = io::File::open(path);
  EXPECT_EQ(file.string_attribute("format"), "mbkit-log");
  EXPECT_EQ(file.int_attribute("format_version"), 1);
  EXPECT_EQ(file.attribute_class("format_version"), H5T_INTEGER);
  EXPECT_EQ(file.string_attribute("config"), sample_info().config_json);
  EXPECT_EQ(file.uint_attribute("seed"), sample_info().seed);
  EXPECT_EQ(file.int_attribute("world_size"), 4);
  expect_same(read_run_info(file), sample_info());
  EXPECT_EQ(file.member_names(),
            (std::vector<std::string>{"collect", "committed_rows", "eval", "servers", "steps",
                                      "worker_summary", "workers"}));
  const io::Dataset committed = file.open_dataset("committed_rows");
  EXPECT_EQ(committed.string_array_attribute("tables"),
            (std::vector<std::string>{"steps", "eval", "workers", "collect", "servers",
                                      "worker_summary"}));
  EXPECT_EQ(committed.read<std::int64_t>(), std::vector<std::int64_t>(6, 0));

  const std::vector<std::pair<std::string, std::vector<std::string>>> integer_columns = {
      {"steps", {"step", "samples"}},
      {"eval", {"step", "samples"}},
      {"workers",
       {"step", "rank", "samples", "staleness", "micro_batches", "finished_early", "queued_updates",
        "dropped"}},
      {"collect", {"step", "gradients", "samples"}},
      {"servers", {"step", "rank", "floats", "bytes_received"}}};
  const std::vector<std::pair<std::string, std::vector<std::string>>> all_columns = {
      {"steps",
       {"accuracy", "epoch", "loss", "lr", "samples", "step", "step_time", "throughput", "time",
        "wall_time"}},
      {"eval", {"accuracy", "epoch", "loss", "samples", "step", "time", "wall_time"}},
      {"workers",
       {"comm_delay", "compute_time", "dropped", "exit_time", "finished_early", "micro_batches",
        "queued_updates", "rank", "recv_time", "samples", "send_time", "sleep_time", "staleness",
        "step", "wait_time"}},
      {"collect", {"gradients", "samples", "step", "wait_time"}},
      {"servers",
       {"bytes_received", "floats", "rank", "recv_time", "send_time", "step", "update_time"}}};
  for (const auto& [group, names] : all_columns) {
    EXPECT_EQ(file.open_group(group).member_names(), names) << group;
    for (const auto& name : names) {
      const io::Dataset dataset = file.open_dataset(group + "/" + name);
      const auto& integers =
          std::find_if(integer_columns.begin(), integer_columns.end(),
                       [&group = group](const auto& entry) { return entry.first == group; })
              ->second;  // captured by name: Clang 14 cannot capture a structured binding
      const bool integer = std::find(integers.begin(), integers.end(), name) != integers.end();
      EXPECT_EQ(dataset.type_class(), integer ? H5T_INTEGER : H5T_FLOAT) << group << "/" << name;
      EXPECT_EQ(dataset.type_size(), 8u);
      if (integer) {
        EXPECT_TRUE(dataset.type_is_signed());
      }
      EXPECT_EQ(dataset.dims(), std::vector<hsize_t>{0});
      EXPECT_EQ(dataset.max_dims(), std::vector<hsize_t>{H5S_UNLIMITED});
      EXPECT_EQ(dataset.chunk_dims(), std::vector<hsize_t>{1024});
      const auto filters = dataset.filters();
      EXPECT_NE(std::find(filters.begin(), filters.end(), H5Z_FILTER_DEFLATE), filters.end());
    }
  }
}

TEST(MetricLog, RowsOfEveryTableRoundTrip) {
  test::TempDir dir;
  const std::string path = dir.file("run.h5");
  {
    MetricLog log = MetricLog::create(path, sample_info(), false);
    add_steps(log, 1, 1200, 3);  // more than one chunk of workers
    log.flush();
    add_steps(log, 1201, 2500, 3);
    log.close();
  }
  const io::File file = open_metric_log(path);
  expect_steps_one_to(file, 2500);
  const auto evals = read_evals(file);
  ASSERT_EQ(evals.size(), 500u);
  for (std::size_t i = 0; i < evals.size(); ++i) {
    expect_same(evals[i], eval_record(5 * (static_cast<std::int64_t>(i) + 1)));
  }
  const auto workers = read_workers(file);
  ASSERT_EQ(workers.size(), 7500u);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto step = static_cast<std::int64_t>(i / 3) + 1, rank = static_cast<std::int64_t>(i % 3);
    expect_same(workers[i], worker_record(step, rank));
  }
  const auto collects = read_collects(file);
  ASSERT_EQ(collects.size(), 2500u);
  expect_same(collects.back(), collect_record(2500));
  const auto servers = read_servers(file);
  ASSERT_EQ(servers.size(), 5000u);
  expect_same(servers[0], server_record(1, 0));
  expect_same(servers.back(), server_record(2500, 1));
}

TEST(MetricLog, RefusesToReplaceAFileUnlessAskedTo) {
  test::TempDir dir;
  const std::string path = dir.file("run.h5");
  test::write_text(path, "not a log");
  EXPECT_MBKIT_ERROR(MetricLog::create(path, sample_info(), false), ExitCode::kUsage,
                     path + " exists; use --force to replace it");
  EXPECT_EQ(fs::read_text_file(path), "not a log");

  MetricLog log = MetricLog::create(path, sample_info(), true);
  log.add(step_record(1));
  log.close();
  EXPECT_EQ(read_steps(open_metric_log(path)).size(), 1u);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"run.h5"});
}

TEST(MetricLog, AppendDropsRowsAfterTheResumeStepAndContinues) {
  test::TempDir dir;
  const std::string path = dir.file("run.h5");
  {
    MetricLog log = MetricLog::create(path, sample_info(), false);
    add_steps(log, 1, 12);
    log.close();
  }
  {
    MetricLog log = MetricLog::append(path, 7);
    add_steps(log, 8, 10);
    log.close();
  }
  const io::File file = open_metric_log(path);
  expect_same(read_run_info(file), sample_info());
  expect_steps_one_to(file, 10);
  const auto evals = read_evals(file);
  ASSERT_EQ(evals.size(), 2u);  // step 10's evaluation is the new one, not the dropped one
  expect_same(evals[0], eval_record(5));
  expect_same(evals[1], eval_record(10));
  const auto workers = read_workers(file);
  ASSERT_EQ(workers.size(), 20u);
  expect_same(workers[13], worker_record(7, 1));
  expect_same(workers[14], worker_record(8, 0));
  EXPECT_EQ(read_collects(file).size(), 10u);
  EXPECT_EQ(read_servers(file).size(), 20u);

  // Resuming from step 0 keeps nothing; resuming past the end keeps everything.
  MetricLog::append(path, 1000).close();
  EXPECT_EQ(read_steps(open_metric_log(path)).size(), 10u);
  MetricLog::append(path, 0).close();
  EXPECT_EQ(read_steps(open_metric_log(path)).size(), 0u);
  EXPECT_EQ(read_workers(open_metric_log(path)).size(), 0u);
  EXPECT_FALSE(has_temporaries(dir));
}

// A disk that filled while rows were flushed leaves the columns' extents grown over values never
// written, read as HDF5's fill value 0: such rows at a table's end are no rows, to readers and
// to a resumed run's log.
TEST(MetricLog, ZeroFilledRowsAtTheEndAreNoRows) {
  test::TempDir dir;
  const std::string path = dir.file("run.h5");
  {
    MetricLog log = MetricLog::create(path, sample_info(), false);
    add_steps(log, 1, 10);
    log.close();
  }
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    for (const char* table : {"steps", "eval", "workers"}) {
      const io::Group group = file.open_group(table);
      for (const auto& name : group.member_names()) {
        io::Dataset column = group.open_dataset(name);
        column.set_extent({column.dims()[0] + 3});
      }
    }
    // In the first evaluation row past the end, every column written but the step.
    const io::Group eval = file.open_group("eval");
    for (const auto& name : eval.member_names()) {
      if (name == "step") continue;
      const double value = name == "accuracy" ? 0.75 : 1.0;
      io::Dataset column = eval.open_dataset(name);
      column.write_rows(2, 1, &value);
    }
    file.close();
  }
  {
    const io::File file = open_metric_log(path);
    EXPECT_EQ(complete_rows(file.open_group("steps"), 13), 10u);
    EXPECT_EQ(complete_rows(file.open_group("eval"), 5), 2u);
    EXPECT_EQ(complete_rows(file.open_group("eval"), 3), 2u);
    EXPECT_EQ(complete_rows(file.open_group("workers"), 23), 20u);
    // Only at the end: a table cut before its zeros keeps its rows.
    EXPECT_EQ(complete_rows(file.open_group("steps"), 7), 7u);
  }
  MetricLog::append(path, 1000).close();
  const io::File file = open_metric_log(path);
  expect_steps_one_to(file, 10);
  EXPECT_EQ(read_evals(file).size(), 2u);
  EXPECT_EQ(read_workers(file).size(), 20u);
}

// --precision is a root attribute; a value no mbkit writes is damaged input.
TEST(MetricLog, PrecisionAttribute) {
  test::TempDir dir;
  const std::string path = dir.file("bf16.h5");
  RunInfo info = sample_info();
  info.precision = "bf16";
  MetricLog::create(path, info, false).close();
  EXPECT_EQ(read_run_info(open_metric_log(path)).precision, "bf16");
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    ASSERT_EQ(H5Adelete(file.id(), "precision"), 0);
    file.set_attribute("precision", std::string("fp16"));
  }
  EXPECT_MBKIT_ERROR(read_run_info(open_metric_log(path)), ExitCode::kBadData,
                     "precision 'fp16' is not fp32, tf32 or bf16");
}

// Logs written before wall_time, micro_batches and the clock attributes existed still read,
// and appending to one adds the columns (wall_time from time, micro_batches 1).
TEST(MetricLog, OlderLogsWithoutTheLaterColumnsReadAndUpgradeOnAppend) {
  test::TempDir dir;
  const std::string path = dir.file("old.h5");
  {
    MetricLog log = MetricLog::create(path, sample_info(), false);
    add_steps(log, 1, 4);
    log.close();
  }
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    for (const char* name :
         {"steps/wall_time", "eval/wall_time", "workers/micro_batches", "workers/finished_early",
          "workers/recv_time", "workers/exit_time", "workers/queued_updates", "workers/comm_delay",
          "workers/dropped", "servers"}) {
      ASSERT_EQ(H5Ldelete(file.id(), name, H5P_DEFAULT), 0);
    }
    for (const char* name : {"clock", "comm_model", "compute_model", "precision"}) {
      ASSERT_EQ(H5Adelete(file.id(), name), 0);
    }
  }
  {
    const io::File file = open_metric_log(path);
    EXPECT_FALSE(file.has("steps/wall_time"));
    EXPECT_FALSE(file.has("servers"));  // a table added later: readers go without it
    EXPECT_EQ(read_run_info(file).clock, "wall");
    EXPECT_EQ(read_run_info(file).comm_model, "");
    EXPECT_EQ(read_run_info(file).precision, "fp32");  // all there was before the attribute
  }
  {
    MetricLog log = MetricLog::append(path, 3);
    add_steps(log, 4, 5);
    log.close();
  }
  const io::File file = open_metric_log(path);
  const auto steps = read_steps(file);
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps[1].wall_time, step_record(2).time);  // filled from time
  EXPECT_EQ(steps[4].wall_time, step_record(5).wall_time);
  const auto workers = read_workers(file);
  ASSERT_EQ(workers.size(), 10u);
  EXPECT_EQ(workers[0].micro_batches, 1);
  EXPECT_EQ(workers[0].finished_early, 0);
  EXPECT_EQ(workers[0].recv_time, 0);  // not measured then
  EXPECT_EQ(workers[0].queued_updates, 0);
  EXPECT_EQ(workers[0].comm_delay, 0);
  EXPECT_EQ(workers[9].comm_delay, worker_record(5, 1).comm_delay);
  EXPECT_EQ(workers[0].dropped, 0);  // every gradient was used then
  EXPECT_EQ(workers[9].dropped, worker_record(5, 1).dropped);
  EXPECT_EQ(workers[9].recv_time, worker_record(5, 1).recv_time);
  EXPECT_EQ(workers[9].queued_updates, worker_record(5, 1).queued_updates);
  EXPECT_EQ(workers[9].finished_early, worker_record(5, 1).finished_early);
  EXPECT_EQ(workers[9].micro_batches, worker_record(5, 1).micro_batches);
  const auto servers = read_servers(file);  // added by the append, with the new rows only
  ASSERT_EQ(servers.size(), 4u);
  expect_same(servers[0], server_record(4, 0));
}

TEST(MetricLog, AppendRefusesWhatIsNotALog) {
  test::TempDir dir;
  EXPECT_MBKIT_ERROR(MetricLog::append(dir.file("absent.h5"), 1), ExitCode::kBadData,
                     "absent.h5: no such file");
  test::write_text(dir.file("text.h5"), "hello");
  EXPECT_MBKIT_ERROR(MetricLog::append(dir.file("text.h5"), 1), ExitCode::kBadData,
                     "text.h5: not an HDF5 file");
  {
    io::File other = io::File::create(dir.file("dataset.h5"));
    other.set_attribute("format", "mbkit-dataset");
    other.close();
    io::File bare = io::File::create(dir.file("bare.h5"));
    bare.close();
  }
  EXPECT_MBKIT_ERROR(MetricLog::append(dir.file("dataset.h5"), 1), ExitCode::kBadData,
                     "dataset.h5: not an mbkit metric log (format is 'mbkit-dataset')");
  EXPECT_MBKIT_ERROR(MetricLog::append(dir.file("bare.h5"), 1), ExitCode::kBadData,
                     "bare.h5: not an mbkit metric log (no 'format' attribute");

  const std::string newer = dir.file("newer.h5");
  MetricLog::create(newer, sample_info(), false).close();
  {
    io::File file = io::File::open(newer, io::File::Mode::kReadWrite);
    file.set_attribute("format_version", 2);
    file.close();
  }
  EXPECT_MBKIT_ERROR(MetricLog::append(newer, 1), ExitCode::kBadData,
                     "newer.h5: metric log format version 2 is newer than this mbkit reads (1); "
                     "upgrade mbkit");

  const std::string incomplete = dir.file("incomplete.h5");
  MetricLog::create(incomplete, sample_info(), false).close();
  {
    io::File file = io::File::open(incomplete, io::File::Mode::kReadWrite);
    file.open_group("eval").remove("loss");
    file.close();
  }
  EXPECT_MBKIT_ERROR(MetricLog::append(incomplete, 1), ExitCode::kBadData,
                     "missing dataset 'loss'");
  EXPECT_MBKIT_ERROR(open_metric_log(incomplete), ExitCode::kBadData, "/eval: missing dataset");
}

TEST(MetricLog, ClosedLogRefusesRowsAndClosesOnce) {
  test::TempDir dir;
  MetricLog log = MetricLog::create(dir.file("run.h5"), sample_info(), false);
  log.close();
  log.close();
  EXPECT_MBKIT_ERROR(log.add(step_record(1)), ExitCode::kFailure, "is closed");
  EXPECT_MBKIT_ERROR(MetricLog::create(dir.file("x.h5"), sample_info(), false, -1),
                     ExitCode::kFailure, "negative");
}

}  // namespace
}  // namespace mbkit::metrics
