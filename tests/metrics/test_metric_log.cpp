// The metric log: its layout and run description, rows of every table, refusal to replace a
// file, truncation on resume, a reader following a live writer in another process, and what
// a writer killed with SIGKILL leaves behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::metrics {
namespace {

RunInfo sample_info() {
  RunInfo info;
  info.tool = "mb-train-fmb";
  info.version = "0.1.0 (commit abc123)";
  info.command_line = "mb-train-fmb --model mlp 'data set.h5'";
  info.config_json = R"({"model": "mlp", "lr": 0.1})";
  info.seed = std::numeric_limits<std::uint64_t>::max() - 7;  // beyond int64
  info.host = "node17";
  info.start_time = "2026-11-22T10:00:00Z";
  info.world_size = 4;
  info.model = "mlp";
  info.dataset = "fashion-mnist";
  info.clock = "virtual";
  info.comm_model = "2.5e-05,1e-10";
  info.compute_model = "0.0001,0.002 3=0.0002,0.002";
  return info;
}

StepRecord step_record(std::int64_t step) {
  const double x = static_cast<double>(step);
  return {step,          0.5 * x,   x / 100,  1 / (x + 3),    x / (x + 1),
          0.1 / (1 + x), 64 * step, 0.01 * x, 6400 / (x + 1), 0.75 * x};
}

EvalRecord eval_record(std::int64_t step) {
  const double x = static_cast<double>(step);
  return {step, 0.5 * x + 0.25, x / 100, 2 / (x + 3), 0.9 - 1 / (x + 10), 10000, 0.75 * x + 1};
}

WorkerRecord worker_record(std::int64_t step, std::int64_t rank) {
  const double x = static_cast<double>(step * 10 + rank);
  return {step,
          rank,
          16 + rank,
          x / 7,
          x / 11,
          x / 13,
          x / 17,
          rank % 2,
          1 + (step + rank) % 4,
          step % 3 == 0,
          x / 19,
          x / 23,
          (step + rank) % 3,
          x / 29};
}

CollectRecord collect_record(std::int64_t step) {
  return {step, 3 + step % 2, 48 + step, 0.001 * static_cast<double>(step)};
}

ServerRecord server_record(std::int64_t step, std::int64_t rank) {
  return {step,
          rank,
          1000 + rank,
          4000 * (rank + 1),
          0.01 * static_cast<double>(step),
          0.002 * static_cast<double>(rank),
          0.003 * static_cast<double>(step + rank)};
}

// Each table's name and its columns, by the names the format documents, with the record field
// each holds: the reader and the comparisons below go through this one list per table.
template <class Record>
struct Table;

template <class Record, class T>
struct Column {
  const char* name;
  T Record::*field;
};

template <class Record, class T>
constexpr Column<Record, T> column(const char* name, T Record::*field) {
  return {name, field};
}

template <>
struct Table<StepRecord> {
  using R = StepRecord;
  static constexpr const char* name = "steps";
  static constexpr auto columns = std::make_tuple(
      column("step", &R::step), column("time", &R::time), column("epoch", &R::epoch),
      column("loss", &R::loss), column("accuracy", &R::accuracy), column("lr", &R::lr),
      column("samples", &R::samples), column("step_time", &R::step_time),
      column("throughput", &R::throughput), column("wall_time", &R::wall_time));
};

template <>
struct Table<EvalRecord> {
  using R = EvalRecord;
  static constexpr const char* name = "eval";
  static constexpr auto columns = std::make_tuple(
      column("step", &R::step), column("time", &R::time), column("epoch", &R::epoch),
      column("loss", &R::loss), column("accuracy", &R::accuracy), column("samples", &R::samples),
      column("wall_time", &R::wall_time));
};

template <>
struct Table<WorkerRecord> {
  using R = WorkerRecord;
  static constexpr const char* name = "workers";
  static constexpr auto columns = std::make_tuple(
      column("step", &R::step), column("rank", &R::rank), column("samples", &R::samples),
      column("compute_time", &R::compute_time), column("sleep_time", &R::sleep_time),
      column("send_time", &R::send_time), column("wait_time", &R::wait_time),
      column("staleness", &R::staleness), column("micro_batches", &R::micro_batches),
      column("finished_early", &R::finished_early), column("recv_time", &R::recv_time),
      column("exit_time", &R::exit_time), column("queued_updates", &R::queued_updates),
      column("comm_delay", &R::comm_delay));
};

template <>
struct Table<CollectRecord> {
  using R = CollectRecord;
  static constexpr const char* name = "collect";
  static constexpr auto columns =
      std::make_tuple(column("step", &R::step), column("gradients", &R::gradients),
                      column("samples", &R::samples), column("wait_time", &R::wait_time));
};

template <>
struct Table<ServerRecord> {
  using R = ServerRecord;
  static constexpr const char* name = "servers";
  static constexpr auto columns = std::make_tuple(
      column("step", &R::step), column("rank", &R::rank), column("floats", &R::floats),
      column("bytes_received", &R::bytes_received), column("recv_time", &R::recv_time),
      column("update_time", &R::update_time), column("send_time", &R::send_time));
};

// Reads a table column by column. The refresh makes a reader following a live writer see what
// it flushed since the reader last looked.
template <class Record>
std::vector<Record> read_table(const io::File& log) {
  std::vector<Record> records;
  bool first = true;
  const auto read = [&](const auto& entry) {
    io::Dataset dataset = log.open_dataset(std::string(Table<Record>::name) + "/" + entry.name);
    dataset.refresh();
    using T = std::remove_reference_t<decltype(std::declval<Record&>().*entry.field)>;
    const std::vector<T> values = dataset.read<T>();
    if (first) records.resize(values.size());
    first = false;
    if (values.size() != records.size()) {
      throw std::runtime_error(cat(Table<Record>::name, "/", entry.name, " has ", values.size(),
                                   " rows, not ", records.size()));
    }
    for (std::size_t i = 0; i < values.size(); ++i) records[i].*entry.field = values[i];
  };
  std::apply([&](const auto&... entry) { (read(entry), ...); }, Table<Record>::columns);
  return records;
}

std::vector<StepRecord> read_steps(const io::File& log) {
  return read_table<StepRecord>(log);
}
std::vector<EvalRecord> read_evals(const io::File& log) {
  return read_table<EvalRecord>(log);
}
std::vector<WorkerRecord> read_workers(const io::File& log) {
  return read_table<WorkerRecord>(log);
}
std::vector<CollectRecord> read_collects(const io::File& log) {
  return read_table<CollectRecord>(log);
}
std::vector<ServerRecord> read_servers(const io::File& log) {
  return read_table<ServerRecord>(log);
}

// Column by column, exact: the values are written and read as the same int64 or float64 type.
template <class Record>
void expect_same(const Record& a, const Record& b) {
  const auto expect = [&](const auto& entry) {
    EXPECT_EQ(a.*entry.field, b.*entry.field) << Table<Record>::name << "/" << entry.name;
  };
  std::apply([&](const auto&... entry) { (expect(entry), ...); }, Table<Record>::columns);
}

void expect_same(const RunInfo& a, const RunInfo& b) {
  EXPECT_EQ(a.tool, b.tool);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.command_line, b.command_line);
  EXPECT_EQ(a.config_json, b.config_json);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.start_time, b.start_time);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.dataset, b.dataset);
  EXPECT_EQ(a.clock, b.clock);
  EXPECT_EQ(a.comm_model, b.comm_model);
  EXPECT_EQ(a.compute_model, b.compute_model);
}

// Steps first..last with their worker, collect and (every 5 steps) evaluation rows.
void add_steps(MetricLog& log, std::int64_t first, std::int64_t last, int workers = 2) {
  for (std::int64_t step = first; step <= last; ++step) {
    for (int rank = 0; rank < workers; ++rank) log.add(worker_record(step, rank));
    log.add(collect_record(step));
    for (int server = 0; server < 2; ++server) log.add(server_record(step, server));
    log.add(step_record(step));
    if (step % 5 == 0) log.add(eval_record(step));
  }
}

bool has_temporaries(const test::TempDir& dir) {
  for (const auto& name : dir.entries()) {
    if (name.find(".tmp-") != std::string::npos) return true;
  }
  return false;
}

// A process forked to run `body`: it exits 0 when body returns and 1 when it throws (the
// message goes to stderr). One still running when the test ends is killed.
class ChildProcess {
 public:
  explicit ChildProcess(const std::function<void()>& body) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      try {
        body();
      } catch (const std::exception& error) {
        std::fprintf(stderr, "child: %s\n", error.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// The wait status (WIFEXITED, WTERMSIG...).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

// A one-way signal between two processes; receive() is false when the other side is gone.
class Pipe {
 public:
  Pipe() {
    if (::pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  /// Called by each process after the fork for the end it does not use, so that the reader
  /// sees end-of-file when the writer dies.
  void close_read_end() { close_end(0); }
  void close_write_end() { close_end(1); }
  void send() {
    const char byte = 1;
    if (::write(fds_[1], &byte, 1) != 1) throw std::runtime_error("pipe write failed");
  }
  bool receive() {
    char byte = 0;
    return ::read(fds_[0], &byte, 1) == 1;
  }

 private:
  void close_end(int end) {
    ::close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2] = {-1, -1};
};

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
            (std::vector<std::string>{"collect", "eval", "servers", "steps", "workers"}));

  const std::vector<std::pair<std::string, std::vector<std::string>>> integer_columns = {
      {"steps", {"step", "samples"}},
      {"eval", {"step", "samples"}},
      {"workers",
       {"step", "rank", "samples", "staleness", "micro_batches", "finished_early",
        "queued_updates"}},
      {"collect", {"step", "gradients", "samples"}},
      {"servers", {"step", "rank", "floats", "bytes_received"}}};
  const std::vector<std::pair<std::string, std::vector<std::string>>> all_columns = {
      {"steps",
       {"accuracy", "epoch", "loss", "lr", "samples", "step", "step_time", "throughput", "time",
        "wall_time"}},
      {"eval", {"accuracy", "epoch", "loss", "samples", "step", "time", "wall_time"}},
      {"workers",
       {"comm_delay", "compute_time", "exit_time", "finished_early", "micro_batches",
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
  const auto steps = read_steps(file);
  ASSERT_EQ(steps.size(), 2500u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    expect_same(steps[i], step_record(static_cast<std::int64_t>(i) + 1));
  }
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
  EXPECT_MBKIT_ERROR(MetricLog::create(path, sample_info(), false), ExitCode::kFailure,
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
  const auto steps = read_steps(file);
  ASSERT_EQ(steps.size(), 10u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    expect_same(steps[i], step_record(static_cast<std::int64_t>(i) + 1));
  }
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
    for (const char* name : {"steps/wall_time", "eval/wall_time", "workers/micro_batches",
                             "workers/finished_early", "workers/recv_time", "workers/exit_time",
                             "workers/queued_updates", "workers/comm_delay", "servers"}) {
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

TEST(MetricLog, ReaderInAnotherProcessFollowsTheLiveWriter) {
  test::TempDir dir;
  const std::string path = dir.file("live.h5");
  Pipe to_reader, to_writer;
  ChildProcess writer([&] {
    to_reader.close_read_end();
    to_writer.close_write_end();
    MetricLog log = MetricLog::create(path, sample_info(), false, /*flush_interval=*/3600);
    add_steps(log, 1, 4);  // no evaluation: nothing flushed yet
    log.flush();
    to_reader.send();
    if (!to_writer.receive()) return;
    add_steps(log, 5, 9);  // the evaluation at step 5 flushes
    to_reader.send();
    if (!to_writer.receive()) return;
    log.close();
  });
  to_reader.close_write_end();
  to_writer.close_read_end();

  ASSERT_TRUE(to_reader.receive()) << "the writer died";
  const io::File file = open_metric_log(path);  // while the writer holds it open
  expect_same(read_run_info(file), sample_info());
  io::Dataset loss = file.open_dataset("steps/loss");
  EXPECT_EQ(loss.dims(), std::vector<hsize_t>{4});
  EXPECT_EQ(read_steps(file).size(), 4u);
  EXPECT_EQ(read_workers(file).size(), 8u);
  EXPECT_EQ(read_evals(file).size(), 0u);

  to_writer.send();
  ASSERT_TRUE(to_reader.receive()) << "the writer died";
  loss.refresh();
  EXPECT_EQ(loss.dims(), std::vector<hsize_t>{5});
  const auto evals = read_evals(file);  // datasets opened now see the flushed rows
  ASSERT_EQ(evals.size(), 1u);
  expect_same(evals[0], eval_record(5));
  const auto steps = read_steps(file);
  ASSERT_EQ(steps.size(), 5u);
  expect_same(steps[4], step_record(5));

  to_writer.send();
  const int status = writer.wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  const io::File finished = io::File::open(path);
  EXPECT_EQ(read_steps(finished).size(), 9u);
}

TEST(MetricLog, KilledWriterLeavesTheFlushedRowsAndAppendResumesFromThem) {
  test::TempDir dir;
  const std::string path = dir.file("crash.h5");
  ChildProcess writer([&] {
    MetricLog log = MetricLog::create(path, sample_info(), false, /*flush_interval=*/3600);
    add_steps(log, 1, 10);  // flushed by the evaluation at step 10
    add_steps(log, 11, 14);
    log.flush_if_due();  // not due for an hour
    std::raise(SIGKILL);
  });
  const int status = writer.wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  {
    const io::File file = open_metric_log(path);
    expect_same(read_run_info(file), sample_info());
    const auto steps = read_steps(file);
    ASSERT_EQ(steps.size(), 10u);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      expect_same(steps[i], step_record(static_cast<std::int64_t>(i) + 1));
    }
    EXPECT_EQ(read_evals(file).size(), 2u);
    EXPECT_EQ(read_workers(file).size(), 20u);
    EXPECT_EQ(read_collects(file).size(), 10u);
    EXPECT_EQ(read_servers(file).size(), 20u);
  }

  // Resuming from a checkpoint at step 8 takes over the log the dead writer left marked open.
  {
    MetricLog log = MetricLog::append(path, 8);
    add_steps(log, 9, 11);
    log.close();
  }
  EXPECT_FALSE(has_temporaries(dir));
  const io::File file = io::File::open(path);  // closed properly now: plain reads work
  expect_same(read_run_info(file), sample_info());
  const auto steps = read_steps(file);
  ASSERT_EQ(steps.size(), 11u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    expect_same(steps[i], step_record(static_cast<std::int64_t>(i) + 1));
  }
  const auto evals = read_evals(file);
  ASSERT_EQ(evals.size(), 2u);
  expect_same(evals[1], eval_record(10));
  EXPECT_EQ(read_workers(file).size(), 22u);
  EXPECT_EQ(read_collects(file).back().step, 11);
}

TEST(MetricLog, FlushIfDueFlushesOnceTheIntervalHasPassed) {
  test::TempDir dir;
  const std::string eager = dir.file("eager.h5"), lazy = dir.file("lazy.h5");
  ChildProcess writer([&] {
    MetricLog always = MetricLog::create(eager, sample_info(), false, /*flush_interval=*/0);
    MetricLog hourly = MetricLog::create(lazy, sample_info(), false, /*flush_interval=*/3600);
    add_steps(always, 1, 3);
    add_steps(hourly, 1, 3);
    always.flush_if_due();
    hourly.flush_if_due();
    std::raise(SIGKILL);
  });
  const int status = writer.wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_EQ(read_steps(open_metric_log(eager)).size(), 3u);
  EXPECT_EQ(read_steps(open_metric_log(lazy)).size(), 0u);
}

}  // namespace
}  // namespace mbkit::metrics
