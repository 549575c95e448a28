// The metric log of a training run (format "mbkit-log", version 1, in mbkit-formats(5)).
//
// One HDF5 file, written while the run goes on:
//   /steps    one row per optimizer step: step, time, epoch, loss, accuracy, lr, samples,
//             step_time, throughput, wall_time
//   /eval     one row per evaluation: step, time, epoch, loss, accuracy, samples, wall_time
//   /workers  one row per worker per step (distributed runs): step, rank, samples,
//             compute_time, sleep_time, send_time, wait_time, staleness, micro_batches,
//             finished_early
// `time` is the run's clock (the emulated cluster's under --clock virtual), `wall_time` the
// real seconds. Logs written before wall_time and micro_batches existed read without them;
// appending to one adds them (wall_time = time, micro_batches = 1, finished_early = 0).
//   /worker_summary  one row per step when /workers holds not every worker's rows
//             (--worker-table summary or sample:K): step, workers, and for each per-worker
//             column COLUMN its COLUMN_min, _p10, _p50, _p90, _max and _mean over the step's
//             workers (WorkerSummaryRecord). Logs from before it have none.
//   /collect  one row per master step (parameter server): step, gradients, samples, wait_time
//   /servers  one row per server per step (synchronous ps, --servers S): step, rank, floats
//             (its shard), bytes_received, recv_time, update_time, send_time (wall seconds;
//             update and send of the server's previous step). Logs from before it have none.
// Each column is an extendible 1-D dataset. Root attributes describe the run (RunInfo).
//   /committed_rows  int64, one entry per table named in its attribute "tables": the rows of
//             that table written completely. The writer updates it after each flush has put
//             every column's rows and the file's metadata in the file; readers take no row past
//             it (a flush that a full disk or a kill cut short leaves rows some of whose columns
//             were written and others not). Logs from before it: readable_rows().
//
// The file is opened for single-writer/multiple-reader access (HDF5 SWMR) once its layout is
// created, and flushed at least every `flush_interval` seconds and at every evaluation, so a
// reader (mb-plot) can follow a live run and `kill -9` leaves a readable file that misses only
// the rows since the last flush.
//
// Readers open a log with open_metric_log() (h5py: `h5py.File(path, "r", swmr=True)`): while
// it is written, and after its writer was killed, the file is marked as open for writing and
// plain HDF5 opens refuse it; SWMR reads work in every case. MetricLog::append() takes over
// such a log (resume after a crash) by copying what was flushed into a fresh file.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace mbkit::io {
class File;
class Location;
class Group;
}  // namespace mbkit::io

namespace mbkit::metrics {

class WorkerTable;

inline constexpr const char* kLogFormat = "mbkit-log";
inline constexpr int kLogFormatVersion = 1;

/// What a log records about its run (root attributes).
struct RunInfo {
  std::string tool;          ///< "mb-train-fmb"
  std::string version;       ///< mbkit version and commit
  std::string command_line;  ///< shell-quoted
  std::string config_json;   ///< every resolved option, as a JSON object
  std::uint64_t seed = 0;
  std::string host;
  std::string start_time;  ///< ISO 8601, UTC
  int world_size = 1;
  std::string model;
  std::string dataset;
  /// "wall", or "virtual" (an emulated cluster: mbkit/train/virtual_clock.hpp) with the
  /// models it used (--comm-model ALPHA,BETA; --compute-model entries, empty: CPU time).
  std::string clock = "wall";
  std::string comm_model;
  std::string compute_model;
  /// --precision of the convolutions and dense layers: "fp32", "tf32" or "bf16" (logs older
  /// than the attribute: fp32, all there was).
  std::string precision = "fp32";
};

struct StepRecord {
  std::int64_t step = 0;
  double time = 0;      ///< seconds since the start of the run
  double epoch = 0;     ///< fractional epoch at the end of the step
  double loss = 0;      ///< mean training loss of the step's batch
  double accuracy = 0;  ///< training accuracy of the step's batch
  double lr = 0;
  std::int64_t samples = 0;
  double step_time = 0;   ///< seconds
  double throughput = 0;  ///< samples per second
  double wall_time = 0;   ///< real seconds since the start (= time unless the clock is virtual)
};

struct EvalRecord {
  std::int64_t step = 0;
  double time = 0;
  double epoch = 0;
  double loss = 0;
  double accuracy = 0;
  std::int64_t samples = 0;
  double wall_time = 0;
};

struct WorkerRecord {
  std::int64_t step = 0;
  std::int64_t rank = 0;
  std::int64_t samples = 0;
  double compute_time = 0;
  double sleep_time = 0;
  double send_time = 0;
  double wait_time = 0;
  std::int64_t staleness = 0;
  std::int64_t micro_batches = 1;   ///< AMB: micro-batches computed; FMB: 1
  std::int64_t finished_early = 0;  ///< AMB: 1 when the whole batch was done before the limit
  double recv_time = 0;             ///< the original's last_recv (0 in logs from before it)
  double exit_time = 0;             ///< the original's last_exit
  std::int64_t queued_updates = 0;  ///< the original's last_queued_update_count (async)
  double comm_delay = 0;            ///< --async-delay-std: the message's induced delay
  /// 1 when the step did not use this worker's gradient (--backup-workers, --k-sync: it was
  /// late and cancelled; its samples are 0, its times those of the round it had drawn).
  std::int64_t dropped = 0;
};

// The /workers columns that /worker_summary summarises per step, and the statistics of each
// (mbkit/metrics/worker_table.hpp): a column `compute_time` gives compute_time_min,
// compute_time_p10, compute_time_p50, compute_time_p90, compute_time_max, compute_time_mean.
// (Left as written: clang-format does not settle on one layout for these macros.)
// clang-format off
#define MBKIT_SUMMARISED_WORKER_COLUMNS(X)                                                  \
  X(samples) X(compute_time) X(sleep_time) X(send_time) X(wait_time) X(staleness)           \
  X(micro_batches) X(finished_early) X(recv_time) X(exit_time) X(queued_updates)            \
  X(comm_delay) X(dropped)
#define MBKIT_WORKER_STATISTICS(X, column)                                                  \
  X(column##_min) X(column##_p10) X(column##_p50) X(column##_p90) X(column##_max)           \
  X(column##_mean)
// clang-format on

/// One step of /worker_summary: over the step's workers, the quantiles (nearest rank: the
/// smallest value with at least the fraction p of the values at or below it) and the mean of
/// each summarised /workers column.
struct WorkerSummaryRecord {
  std::int64_t step = 0;
  std::int64_t workers = 0;  ///< the rows summarised
#define MBKIT_DECLARE_STATISTIC(name) double name = 0;
#define MBKIT_DECLARE_STATISTICS(column) MBKIT_WORKER_STATISTICS(MBKIT_DECLARE_STATISTIC, column)
  MBKIT_SUMMARISED_WORKER_COLUMNS(MBKIT_DECLARE_STATISTICS)
#undef MBKIT_DECLARE_STATISTICS
#undef MBKIT_DECLARE_STATISTIC
};

struct CollectRecord {
  std::int64_t step = 0;
  std::int64_t gradients = 0;
  std::int64_t samples = 0;
  double wait_time = 0;
};

struct ServerRecord {
  std::int64_t step = 0;
  std::int64_t rank = 0;
  std::int64_t floats = 0;          ///< the shard of the parameters this server keeps
  std::int64_t bytes_received = 0;  ///< gradient bytes from all workers (encoded if compressed)
  double recv_time = 0;             ///< seconds receiving and summing this step's gradients
  double update_time = 0;           ///< seconds updating its shard, of its previous step
  double send_time = 0;             ///< seconds sending its shard back, of its previous step
};

/// Opens a log for reading (finished, still being written, or left by a killed writer) and
/// checks its format, version and tables; problems are data errors naming the file. Datasets
/// opened from it see rows flushed later after Dataset::refresh().
io::File open_metric_log(const std::string& path);
/// The rows of a table (the group /steps, /eval...) that hold records in a log written before
/// committed_rows existed: `rows` (those that every column holds) less the rows at its end whose
/// step reads 0. A disk that fills while rows are flushed can leave a table grown over values
/// of its columns that were never written, which HDF5 reads as its fill value 0 (step 0,
/// accuracy 0); no record has step 0 (steps count from 1), so such a row is none. (A row whose
/// step was written but another column was not cannot be told from a record: the reason for
/// committed_rows.)
std::uint64_t complete_rows(const io::Group& table, std::uint64_t rows);
/// The rows of /TABLE that readers take, at most `rows` (those that every column holds): the
/// count the writer committed in /committed_rows once every column's values and the file's
/// metadata had reached the file, so that a row is complete or absent whatever a full disk or
/// a kill interrupted; in logs from before /committed_rows, complete_rows().
std::uint64_t readable_rows(const io::Location& log, const std::string& table, std::uint64_t rows);
/// The run description in a log's root attributes.
RunInfo read_run_info(const io::File& log);

class MetricLog {
 public:
  /// Creates a new log at `path` (an existing file is replaced only with `overwrite`, else it is
  /// an error naming the file).
  static MetricLog create(const std::string& path, const RunInfo& info, bool overwrite,
                          double flush_interval = 5.0);
  /// Reopens an existing log to append (resume). Rows after `resume_step` (steps logged after
  /// the checkpoint the run resumes from) are dropped so the log stays consistent.
  static MetricLog append(const std::string& path, std::int64_t resume_step,
                          double flush_interval = 5.0);

  MetricLog(MetricLog&&) noexcept;
  MetricLog& operator=(MetricLog&&) noexcept;
  ~MetricLog();

  void add(const StepRecord& record);
  void add(const EvalRecord& record);  ///< also flushes
  void add(const WorkerRecord& record);
  void add(const WorkerSummaryRecord& record);
  void add(const CollectRecord& record);
  void add(const ServerRecord& record);
  /// From now on the worker rows go through `table` (--worker-table): /workers keeps the rows
  /// it chooses, /worker_summary its summaries. Without one every row is kept.
  void use_worker_table(WorkerTable table);
  /// After a step's worker rows: its /worker_summary row, when the worker table keeps one.
  void end_worker_step(std::int64_t step);
  /// Flushes when flush_interval has passed since the last flush.
  void flush_if_due();
  void flush();
  /// Flushes and closes (errors are reported here, not in the destructor).
  void close();
  /// False once closed (or moved from).
  bool is_open() const;
  const std::string& path() const;

 private:
  struct Impl;
  explicit MetricLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mbkit::metrics
