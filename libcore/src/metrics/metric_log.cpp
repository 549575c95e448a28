// The metric log: four tables of extendible columns in one HDF5 file, laid out under a
// temporary name, then reopened for SWMR writing so that readers can follow the run and a
// killed run leaves a readable file.
#include "mbkit/metrics/metric_log.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "mbkit/io/format.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/nn/precision.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::metrics {
namespace {

// 1024 rows of 8 bytes: a chunk per column is rewritten at each flush, so keep chunks small.
constexpr hsize_t kChunkRows = 1024;
constexpr int kDeflateLevel = 4;

// One column of a table: its dataset name and the record field it holds. Columns added to
// the format later may be missing from older logs: readers go without them, and appending to
// such a log first adds them, filled from the column `filled_from` (or with 1).
template <class Record>
struct Field {
  const char* name;
  std::variant<std::int64_t Record::*, double Record::*> member;
  bool added_later = false;
  const char* filled_from = nullptr;
  int fill = 1;  ///< the value of older rows when there is no column to fill from
};

template <class Member>
struct MemberValue;
template <class Record, class T>
struct MemberValue<T Record::*> {
  using type = T;
};
template <class Member>
using MemberValueT = typename MemberValue<Member>::type;

// The tables of the format, in one place: group name and columns in file order.
template <class Record>
struct Schema;

template <>
struct Schema<StepRecord> {
  static constexpr const char* kGroup = "steps";
  static constexpr bool kAddedLater = false;
  static constexpr std::array<Field<StepRecord>, 10> kFields{{
      {"step", &StepRecord::step},
      {"time", &StepRecord::time},
      {"epoch", &StepRecord::epoch},
      {"loss", &StepRecord::loss},
      {"accuracy", &StepRecord::accuracy},
      {"lr", &StepRecord::lr},
      {"samples", &StepRecord::samples},
      {"step_time", &StepRecord::step_time},
      {"throughput", &StepRecord::throughput},
      {"wall_time", &StepRecord::wall_time, true, "time"},
  }};
};

template <>
struct Schema<EvalRecord> {
  static constexpr const char* kGroup = "eval";
  static constexpr bool kAddedLater = false;
  static constexpr std::array<Field<EvalRecord>, 7> kFields{{
      {"step", &EvalRecord::step},
      {"time", &EvalRecord::time},
      {"epoch", &EvalRecord::epoch},
      {"loss", &EvalRecord::loss},
      {"accuracy", &EvalRecord::accuracy},
      {"samples", &EvalRecord::samples},
      {"wall_time", &EvalRecord::wall_time, true, "time"},
  }};
};

template <>
struct Schema<WorkerRecord> {
  static constexpr const char* kGroup = "workers";
  static constexpr bool kAddedLater = false;
  static constexpr std::array<Field<WorkerRecord>, 15> kFields{{
      {"step", &WorkerRecord::step},
      {"rank", &WorkerRecord::rank},
      {"samples", &WorkerRecord::samples},
      {"compute_time", &WorkerRecord::compute_time},
      {"sleep_time", &WorkerRecord::sleep_time},
      {"send_time", &WorkerRecord::send_time},
      {"wait_time", &WorkerRecord::wait_time},
      {"staleness", &WorkerRecord::staleness},
      {"micro_batches", &WorkerRecord::micro_batches, true},
      {"finished_early", &WorkerRecord::finished_early, true, nullptr, 0},
      {"recv_time", &WorkerRecord::recv_time, true, nullptr, 0},
      {"exit_time", &WorkerRecord::exit_time, true, nullptr, 0},
      {"queued_updates", &WorkerRecord::queued_updates, true, nullptr, 0},
      {"comm_delay", &WorkerRecord::comm_delay, true, nullptr, 0},
      {"dropped", &WorkerRecord::dropped, true, nullptr, 0},
  }};
};

template <>
struct Schema<WorkerSummaryRecord> {
  static constexpr const char* kGroup = "worker_summary";
  static constexpr bool kAddedLater = true;  // logs from before it lack the table
#define MBKIT_STATISTIC_FIELD(name) {#name, &WorkerSummaryRecord::name},
#define MBKIT_STATISTICS_FIELDS(column) MBKIT_WORKER_STATISTICS(MBKIT_STATISTIC_FIELD, column)
  static constexpr std::array<Field<WorkerSummaryRecord>, 2 + 13 * 6> kFields{
      {{"step", &WorkerSummaryRecord::step},
       {"workers", &WorkerSummaryRecord::workers},
       MBKIT_SUMMARISED_WORKER_COLUMNS(MBKIT_STATISTICS_FIELDS)}};
#undef MBKIT_STATISTICS_FIELDS
#undef MBKIT_STATISTIC_FIELD
};

template <>
struct Schema<CollectRecord> {
  static constexpr const char* kGroup = "collect";
  static constexpr bool kAddedLater = false;
  static constexpr std::array<Field<CollectRecord>, 4> kFields{{
      {"step", &CollectRecord::step},
      {"gradients", &CollectRecord::gradients},
      {"samples", &CollectRecord::samples},
      {"wait_time", &CollectRecord::wait_time},
  }};
};

template <>
struct Schema<ServerRecord> {
  static constexpr const char* kGroup = "servers";
  static constexpr bool kAddedLater = true;  // logs from before it lack the table
  static constexpr std::array<Field<ServerRecord>, 7> kFields{{
      {"step", &ServerRecord::step},
      {"rank", &ServerRecord::rank},
      {"floats", &ServerRecord::floats},
      {"bytes_received", &ServerRecord::bytes_received},
      {"recv_time", &ServerRecord::recv_time},
      {"update_time", &ServerRecord::update_time},
      {"send_time", &ServerRecord::send_time},
  }};
};

// Opens a column's dataset, checking it is what the format says it is.
template <class T>
io::Dataset open_column_dataset(const io::Location& group, const char* name) {
  io::Dataset dataset = group.open_dataset(name);
  const bool integer = std::is_integral_v<T>;
  const auto dims = dataset.dims();
  if (dims.size() != 1 || dataset.max_dims().at(0) != H5S_UNLIMITED ||
      dataset.type_class() != (integer ? H5T_INTEGER : H5T_FLOAT)) {
    data_error(cat(dataset.describe(), ": not an extendible 1-D ", integer ? "int64" : "float64",
                   " column"));
  }
  return dataset;
}

// The columns of one table, appended to together.
template <class Record>
class Table {
 public:
  using Column = std::variant<io::Column<std::int64_t>, io::Column<double>>;
  static constexpr const auto& kFields = Schema<Record>::kFields;
  static constexpr const char* kGroup = Schema<Record>::kGroup;

  Table() = default;

  /// Creates the group and its empty columns.
  static void create(io::Location& file) {
    io::Group group = file.create_group(kGroup);
    for (const auto& field : kFields) {
      std::visit(
          [&](auto member) {
            io::Column<MemberValueT<decltype(member)>>::create(group, field.name, kChunkRows,
                                                               kDeflateLevel);
          },
          field.member);
    }
  }

  /// Checks the group and every column. Returns the number of rows that every column holds
  /// (columns may differ after a crash: each is flushed on its own).
  static hsize_t check(const io::Location& file) {
    if (Schema<Record>::kAddedLater && !file.has(kGroup)) return 0;
    const io::Group group = file.open_group(kGroup);
    hsize_t rows = std::numeric_limits<hsize_t>::max();
    for (const auto& field : kFields) {
      if (field.added_later && !group.has(field.name)) continue;
      std::visit(
          [&](auto member) {
            const auto dataset =
                open_column_dataset<MemberValueT<decltype(member)>>(group, field.name);
            rows = std::min(rows, dataset.dims()[0]);
          },
          field.member);
    }
    return readable_rows(file, kGroup, rows);
  }

  /// Opens the columns to append to them.
  static Table open(io::Location& file) {
    check(file);
    io::Group group = file.open_group(kGroup);
    Table table;
    for (const auto& field : kFields) {
      std::visit(
          [&](auto member) {
            using T = MemberValueT<decltype(member)>;
            table.columns_.emplace_back(std::in_place_type<io::Column<T>>,
                                        io::Column<T>::open(group, field.name));
          },
          field.member);
    }
    return table;
  }

  /// Drops the rows from the first one whose step is after `resume_step`, and any rows that
  /// not every column holds.
  static void truncate(io::Location& file, std::int64_t resume_step) {
    if (Schema<Record>::kAddedLater && !file.has(kGroup)) return;
    const hsize_t common_rows = check(file);
    io::Group group = file.open_group(kGroup);
    const auto steps = group.open_dataset("step").read<std::int64_t>();
    hsize_t keep = 0;
    while (keep < common_rows && steps[keep] <= resume_step) ++keep;
    for (const auto& field : kFields) {
      if (field.added_later && !group.has(field.name)) continue;
      io::Dataset dataset = group.open_dataset(field.name);
      if (dataset.dims()[0] != keep) dataset.set_extent({keep});
    }
  }

  /// Copies the rows that every column of `from` holds into the (empty) table of `to`.
  static void copy(const io::Location& from, io::Location& to) {
    if (Schema<Record>::kAddedLater && !from.has(kGroup)) return;  // stays empty
    const hsize_t rows = check(from);
    const io::Group source = from.open_group(kGroup);
    io::Group target = to.open_group(kGroup);
    for (const auto& field : kFields) {
      std::visit(
          [&](auto member) {
            using T = MemberValueT<decltype(member)>;
            std::vector<T> values;
            if (source.has(field.name)) {
              values = source.open_dataset(field.name).template read<T>();
            } else {  // a column added after `from` was written: filled as documented
              MBKIT_CHECK(field.added_later, "metric log: column ", field.name, " missing");
              values.assign(static_cast<std::size_t>(rows), static_cast<T>(field.fill));
              if (field.filled_from != nullptr) {
                const auto filled = source.open_dataset(field.filled_from).template read<double>();
                for (std::size_t i = 0; i < values.size(); ++i) {
                  values[i] = static_cast<T>(filled[i]);
                }
              }
            }
            auto column = io::Column<T>::open(target, field.name);
            column.append(std::span<const T>(values.data(), rows));
            column.flush();
          },
          field.member);
    }
  }

  void append(const Record& record) {
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      std::visit(
          [&](auto member) {
            using T = MemberValueT<decltype(member)>;
            std::get<io::Column<T>>(columns_[i]).append(record.*member);
          },
          kFields[i].member);
    }
  }

  void flush() {
    for (auto& column : columns_) std::visit([](auto& typed) { typed.flush(); }, column);
  }

  /// Rows appended so far (every column holds as many).
  hsize_t rows() const {
    return columns_.empty()
               ? 0
               : std::visit([](const auto& typed) { return typed.size(); }, columns_.front());
  }

  /// Closes the datasets (buffered values not flushed are dropped).
  void close() { columns_.clear(); }

 private:
  std::vector<Column> columns_;  // in kFields order
};

// Calls `function` with an empty table of each kind, for its static members.
template <class Function>
void for_each_table(Function&& function) {
  function(Table<StepRecord>{});
  function(Table<EvalRecord>{});
  function(Table<WorkerRecord>{});
  function(Table<CollectRecord>{});
  function(Table<ServerRecord>{});
  function(Table<WorkerSummaryRecord>{});
}

// The tables in the order of /committed_rows.
std::vector<std::string> table_names() {
  std::vector<std::string> names;
  for_each_table([&](auto table) { names.emplace_back(table.kGroup); });
  return names;
}

constexpr const char* kCommittedRows = "committed_rows";

// /committed_rows of a new log: no row committed (a resumed log's copy: `rows`).
void create_committed_rows(io::File& file, const std::vector<std::int64_t>& rows) {
  const auto names = table_names();
  io::Dataset committed = file.create_dataset<std::int64_t>(kCommittedRows, {names.size()});
  committed.set_attribute("tables", names);
  committed.write(std::span<const std::int64_t>(rows));
}

// The committed row count of each table of `log`, by name; empty for a log from before them.
std::vector<std::pair<std::string, std::uint64_t>> read_committed_rows(const io::Location& log) {
  if (!log.has(kCommittedRows)) return {};
  io::Dataset dataset = log.open_dataset(kCommittedRows);
  dataset.refresh();  // a live writer's latest
  const auto counts = dataset.read<std::int64_t>();
  const auto names = dataset.string_array_attribute("tables");
  if (names.size() != counts.size()) {
    data_error(
        cat(dataset.describe(), ": ", counts.size(), " counts for ", names.size(), " tables"));
  }
  std::vector<std::pair<std::string, std::uint64_t>> committed;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) data_error(cat(dataset.describe(), ": a negative count of rows"));
    committed.emplace_back(names[i], static_cast<std::uint64_t>(counts[i]));
  }
  return committed;
}

void check_flush_interval(double flush_interval) {
  MBKIT_CHECK(flush_interval >= 0, "metric log flush interval ", flush_interval, " s is negative");
}

RunInfo read_run_info_attributes(const io::File& log) {
  RunInfo info;
  info.tool = log.string_attribute("tool");
  info.version = log.string_attribute("version");
  info.command_line = log.string_attribute("command_line");
  info.config_json = log.string_attribute("config");
  info.seed = log.uint_attribute("seed");
  info.host = log.string_attribute("host");
  info.start_time = log.string_attribute("start_time");
  const std::int64_t world_size = log.int_attribute("world_size");
  if (world_size < 1 || world_size > std::numeric_limits<int>::max()) {
    data_error(cat(log.path(), ": world_size ", world_size, " is out of range"));
  }
  info.world_size = static_cast<int>(world_size);
  info.model = log.string_attribute("model");
  info.dataset = log.string_attribute("dataset");
  // Added later: older logs ran on the wall clock.
  if (log.has_attribute("clock")) {
    info.clock = log.string_attribute("clock");
    if (info.clock != "wall" && info.clock != "virtual") {
      data_error(cat(log.path(), ": clock '", info.clock, "' is not wall or virtual"));
    }
    info.comm_model = log.string_attribute("comm_model");
    info.compute_model = log.string_attribute("compute_model");
  }
  // Added later still: older logs computed in fp32.
  if (log.has_attribute("precision")) {
    info.precision = log.string_attribute("precision");
    if (!nn::find_precision(info.precision)) {
      data_error(cat(log.path(), ": precision '", info.precision, "' is not fp32, tf32 or bf16"));
    }
  }
  return info;
}

void write_run_info(io::File& file, const RunInfo& info) {
  file.set_attribute("format", kLogFormat);
  file.set_attribute("format_version", kLogFormatVersion);
  file.set_attribute("tool", info.tool);
  file.set_attribute("version", info.version);
  file.set_attribute("command_line", info.command_line);
  file.set_attribute("config", info.config_json);
  file.set_attribute("seed", info.seed);
  file.set_attribute("host", info.host);
  file.set_attribute("start_time", info.start_time);
  file.set_attribute("world_size", info.world_size);
  file.set_attribute("model", info.model);
  file.set_attribute("dataset", info.dataset);
  file.set_attribute("clock", info.clock);
  file.set_attribute("comm_model", info.comm_model);
  file.set_attribute("compute_model", info.compute_model);
  file.set_attribute("precision", info.precision);
}

// A log with its layout and no rows, written under a temporary name and renamed to `path`.
void write_empty_log(const std::string& path, const RunInfo& info) {
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path(), io::File::Format::kLatest);
  write_run_info(file, info);
  for_each_table([&](auto table) { table.create(file); });
  create_committed_rows(file, std::vector<std::int64_t>(table_names().size(), 0));
  file.close();
  output.commit();
}

// The log a resumed run appends to: the rows of the old one up to `resume_step`, copied into a
// fresh log renamed over it. A writer that was killed leaves its log marked as open for writing
// (HDF5 then refuses to open it for writing again), but SWMR readers still see everything it
// flushed, consistently; and building beside the old log means a kill at any moment of the
// resume leaves one of the two, each readable (truncating in place once left a log marked open
// for writing without SWMR, which no reader and no later resume could open).
void rebuild_up_to(const std::string& path, std::int64_t resume_step) {
  fs::AtomicOutput output(path);
  {
    const io::File old = open_metric_log(path);
    io::File copy = io::File::create(output.temp_path(), io::File::Format::kLatest);
    write_run_info(copy, read_run_info(old));
    std::vector<std::int64_t> rows;
    for_each_table([&](auto table) {
      table.create(copy);
      table.copy(old, copy);
      table.truncate(copy, resume_step);
      rows.push_back(static_cast<std::int64_t>(table.check(copy)));
    });
    create_committed_rows(copy, rows);
    copy.close();
  }
  output.commit();
}

// "cannot write PATH: REASON" from what HDF5 said, with the system's reason first when HDF5
// gave one ("No space left on device"), since its own message is long.
std::string write_failure(const std::string& path, std::string what) {
  const std::string prefix = cat("cannot write ", path, ": ");
  if (what.starts_with(prefix)) what.erase(0, prefix.size());
  constexpr std::string_view kReason = "error message = '";
  const auto at = what.find(kReason);
  if (at != std::string::npos) {
    const auto from = at + kReason.size();
    const auto to = what.find('\'', from);
    if (to != std::string::npos) {
      const auto call = what.find(' ');
      return cat(prefix, what.substr(from, to - from), " (", what.substr(0, call), " failed)");
    }
  }
  return prefix + what;
}

}  // namespace

std::uint64_t complete_rows(const io::Group& table, std::uint64_t rows) {
  // The column no record holds 0 in: steps, evaluations and the rows of workers, masters and
  // servers count from step 1.
  std::vector<io::Dataset> columns;
  if (table.has("step")) columns.push_back(table.open_dataset("step"));
  // Backwards a block at a time; the first block is one row, all that a sound table reads.
  hsize_t block = 1;
  std::vector<double> values;
  std::vector<char> unwritten;
  while (rows > 0) {
    const hsize_t count = std::min<hsize_t>(block, rows);
    const hsize_t first = rows - count;
    unwritten.assign(count, 0);
    values.resize(count);
    for (const auto& column : columns) {
      column.read_rows(first, count, values.data());
      for (hsize_t i = 0; i < count; ++i) unwritten[i] |= values[i] == 0 ? 1 : 0;
    }
    for (hsize_t i = count; i > 0; --i) {
      if (!unwritten[i - 1]) return first + i;
    }
    rows = first;
    block = kChunkRows;
  }
  return 0;
}

std::uint64_t readable_rows(const io::Location& log, const std::string& table, std::uint64_t rows) {
  const auto committed = read_committed_rows(log);
  if (committed.empty()) {
    if (!log.has(table)) return 0;
    return complete_rows(log.open_group(table), rows);
  }
  for (const auto& [name, count] : committed) {
    if (name == table) return std::min(rows, count);
  }
  return 0;  // a table the writer had not (no row of it is committed)
}

io::File open_metric_log(const std::string& path) {
  io::File file = io::File::open(path, io::File::Mode::kSwmrRead);
  try {
    io::check_format(file, kLogFormat, kLogFormatVersion, "metric log");
    for_each_table([&](auto table) { table.check(file); });
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
  return file;
}

RunInfo read_run_info(const io::File& log) {
  try {
    return read_run_info_attributes(log);
  } catch (const Error&) {
    io::rethrow_as_damaged_file(log.path());
  }
}

struct MetricLog::Impl {
  std::string path;
  io::File file;  // declared before the tables, so destroyed after their datasets
  Table<StepRecord> steps;
  Table<EvalRecord> eval;
  Table<WorkerRecord> workers;
  Table<CollectRecord> collect;
  Table<ServerRecord> servers;
  Table<WorkerSummaryRecord> worker_summary;
  std::optional<WorkerTable> worker_table;  // none: every worker row
  std::chrono::steady_clock::duration flush_interval{};
  std::chrono::steady_clock::time_point last_flush;
  io::Dataset committed_rows;
  // After a failed write no count is committed again: HDF5 may have dropped what it could not
  // write, so a later flush that succeeds does not mean the rows are in the file.
  bool failed = false;
  bool closed = false;

  // Opens a complete log at `path` for SWMR writing: from here on only rows are appended.
  Impl(const std::string& log_path, double flush_seconds) : path(log_path) {
    file = io::File::open(path, io::File::Mode::kSwmrWrite);
    steps = Table<StepRecord>::open(file);
    eval = Table<EvalRecord>::open(file);
    workers = Table<WorkerRecord>::open(file);
    collect = Table<CollectRecord>::open(file);
    servers = Table<ServerRecord>::open(file);
    worker_summary = Table<WorkerSummaryRecord>::open(file);
    committed_rows = file.open_dataset(kCommittedRows);
    // Capped so that the conversion to clock ticks cannot overflow ("never" is a century).
    constexpr double kCentury = 100 * 365.25 * 24 * 3600;
    flush_interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(flush_seconds, kCentury)));
    last_flush = std::chrono::steady_clock::now();
  }

  void require_open() const { MBKIT_CHECK(!closed, "metric log ", path, " is closed"); }

  // Every column's rows and the file's metadata are in the file: say so, last.
  void commit() {
    const std::vector<std::int64_t> rows{static_cast<std::int64_t>(steps.rows()),
                                         static_cast<std::int64_t>(eval.rows()),
                                         static_cast<std::int64_t>(workers.rows()),
                                         static_cast<std::int64_t>(collect.rows()),
                                         static_cast<std::int64_t>(servers.rows()),
                                         static_cast<std::int64_t>(worker_summary.rows())};
    committed_rows.write(std::span<const std::int64_t>(rows));
    committed_rows.flush();
    file.flush();
  }
};

MetricLog::MetricLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricLog::MetricLog(MetricLog&&) noexcept = default;
MetricLog& MetricLog::operator=(MetricLog&&) noexcept = default;

MetricLog::~MetricLog() {
  if (impl_ == nullptr || impl_->closed) return;
  // Unwinding from another error: keep what can be kept; close() is where errors are reported.
  try {
    flush();
  } catch (...) {
  }
}

MetricLog MetricLog::create(const std::string& path, const RunInfo& info, bool overwrite,
                            double flush_interval) {
  check_flush_interval(flush_interval);
  fs::require_replaceable(path, overwrite);
  write_empty_log(path, info);
  return MetricLog(std::make_unique<Impl>(path, flush_interval));
}

MetricLog MetricLog::append(const std::string& path, std::int64_t resume_step,
                            double flush_interval) {
  check_flush_interval(flush_interval);
  open_metric_log(path);  // a missing file, or one that is not a log, is a data error
  // A read-only log must fail here, not be replaced by the rebuild below.
  if (::access(path.c_str(), W_OK) != 0) {
    fail(cat("cannot append to ", path, ": ", std::strerror(errno)));
  }
  rebuild_up_to(path, resume_step);
  return MetricLog(std::make_unique<Impl>(path, flush_interval));
}

void MetricLog::add(const StepRecord& record) {
  impl_->require_open();
  impl_->steps.append(record);
}

void MetricLog::add(const EvalRecord& record) {
  impl_->require_open();
  impl_->eval.append(record);
  flush();
}

void MetricLog::add(const WorkerRecord& record) {
  impl_->require_open();
  if (!impl_->worker_table || impl_->worker_table->add(record)) impl_->workers.append(record);
}

void MetricLog::use_worker_table(WorkerTable table) {
  impl_->require_open();
  impl_->worker_table.emplace(std::move(table));
}

void MetricLog::end_worker_step(std::int64_t step) {
  impl_->require_open();
  if (!impl_->worker_table) return;
  if (auto summary = impl_->worker_table->end_step(step)) impl_->worker_summary.append(*summary);
}

void MetricLog::add(const WorkerSummaryRecord& record) {
  impl_->require_open();
  impl_->worker_summary.append(record);
}

void MetricLog::add(const CollectRecord& record) {
  impl_->require_open();
  impl_->collect.append(record);
}

void MetricLog::add(const ServerRecord& record) {
  impl_->require_open();
  impl_->servers.append(record);
}

void MetricLog::flush_if_due() {
  impl_->require_open();
  if (std::chrono::steady_clock::now() - impl_->last_flush >= impl_->flush_interval) flush();
}

void MetricLog::flush() {
  impl_->require_open();
  try {
    impl_->steps.flush();
    impl_->eval.flush();
    impl_->workers.flush();
    impl_->collect.flush();
    impl_->servers.flush();
    impl_->worker_summary.flush();
    impl_->file.flush();
    if (!impl_->failed) impl_->commit();
  } catch (const Error& error) {
    impl_->failed = true;
    throw Error(write_failure(impl_->path, error.what()), error.code());
  }
  impl_->last_flush = std::chrono::steady_clock::now();
}

void MetricLog::close() {
  if (impl_ == nullptr || impl_->closed) return;
  flush();
  impl_->closed = true;
  impl_->steps.close();
  impl_->eval.close();
  impl_->workers.close();
  impl_->collect.close();
  impl_->servers.close();
  impl_->worker_summary.close();
  impl_->file.close();
}

bool MetricLog::is_open() const {
  return impl_ != nullptr && !impl_->closed;
}

const std::string& MetricLog::path() const {
  return impl_->path;
}

}  // namespace mbkit::metrics
