// What the metric log tests share (test_metric_log.cpp, test_metric_log_crash.cpp): sample
// records, the tables as the format documents them with a reader that wants columns of one
// length, and a forked child process with a pipe to step it.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::metrics::log_test {

inline RunInfo sample_info() {
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

inline StepRecord step_record(std::int64_t step) {
  const double x = static_cast<double>(step);
  return {step,          0.5 * x,   x / 100,  1 / (x + 3),    x / (x + 1),
          0.1 / (1 + x), 64 * step, 0.01 * x, 6400 / (x + 1), 0.75 * x};
}

inline EvalRecord eval_record(std::int64_t step) {
  const double x = static_cast<double>(step);
  return {step, 0.5 * x + 0.25, x / 100, 2 / (x + 3), 0.9 - 1 / (x + 10), 10000, 0.75 * x + 1};
}

inline WorkerRecord worker_record(std::int64_t step, std::int64_t rank) {
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
          x / 29,
          (step + rank) % 5 == 0};
}

inline CollectRecord collect_record(std::int64_t step) {
  return {step, 3 + step % 2, 48 + step, 0.001 * static_cast<double>(step)};
}

inline ServerRecord server_record(std::int64_t step, std::int64_t rank) {
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
      column("comm_delay", &R::comm_delay), column("dropped", &R::dropped));
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

inline std::vector<StepRecord> read_steps(const io::File& log) {
  return read_table<StepRecord>(log);
}
inline std::vector<EvalRecord> read_evals(const io::File& log) {
  return read_table<EvalRecord>(log);
}
inline std::vector<WorkerRecord> read_workers(const io::File& log) {
  return read_table<WorkerRecord>(log);
}
inline std::vector<CollectRecord> read_collects(const io::File& log) {
  return read_table<CollectRecord>(log);
}
inline std::vector<ServerRecord> read_servers(const io::File& log) {
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

inline void expect_same(const RunInfo& a, const RunInfo& b) {
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

// The log's step table holds exactly steps 1..count, each as add_steps wrote it.
inline void expect_steps_one_to(const io::File& log, std::size_t count) {
  const auto steps = read_steps(log);
  ASSERT_EQ(steps.size(), count);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    expect_same(steps[i], step_record(static_cast<std::int64_t>(i) + 1));
  }
}

// Steps first..last with their worker, collect and (every 5 steps) evaluation rows.
inline void add_steps(MetricLog& log, std::int64_t first, std::int64_t last, int workers = 2) {
  for (std::int64_t step = first; step <= last; ++step) {
    for (int rank = 0; rank < workers; ++rank) log.add(worker_record(step, rank));
    log.add(collect_record(step));
    for (int server = 0; server < 2; ++server) log.add(server_record(step, server));
    log.add(step_record(step));
    if (step % 5 == 0) log.add(eval_record(step));
  }
}

inline bool has_temporaries(const test::TempDir& dir) {
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

}  // namespace mbkit::metrics::log_test
