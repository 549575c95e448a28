#include "mbkit/emulation/delay_trace.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/digest.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::emulation {

namespace {

constexpr const char* kFormat = "mbkit-delay-trace";
constexpr std::int64_t kFormatVersion = 1;
constexpr const char* kDataset = "trace/seconds";
constexpr const char* kCsvHeader = "worker,step,seconds";
// Far beyond any cluster or run, and small enough that W x S cells never overflow.
constexpr std::int64_t kMaxWorkers = 1 << 20;
constexpr std::int64_t kMaxSteps = std::int64_t{1} << 32;
// Cells an HDF5 trace may declare: 1 GiB of values, read whole.
constexpr std::int64_t kMaxCells = std::int64_t{1} << 27;

[[noreturn]] void line_error(const std::string& path, std::size_t line, const std::string& what) {
  data_error(cat(path, ":", line, ": ", what));
}

// Text of the file as an error message shows it: one line, printable, not too long (a binary
// file given as CSV shows as '?'s).
std::string shown(std::string_view text) {
  constexpr std::size_t kLongest = 60;
  std::string out;
  for (const char c : text.substr(0, kLongest)) {
    out += c >= ' ' && c <= '~' ? c : '?';
  }
  if (text.size() > kLongest) out += "...";
  return out;
}

std::optional<std::int64_t> read_index(std::string_view field) {
  std::int64_t value = 0;
  const auto* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  if (field.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> read_value(std::string_view field) {
  double value = 0;
  const auto* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  // from_chars reads "nan" and "inf" too: the caller says what is wrong with them.
  if (field.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value + 0.0;  // -0 -> 0
}

// The lines of a text file, without their ends ("\n" or "\r\n"); a final newline ends the last.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  while (true) {
    const std::size_t comma = line.find(',');
    fields.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return fields;
}

// A value that a delay may be: finite and >= 0; otherwise what is wrong with it.
std::string bad_delay(double value) {
  if (std::isnan(value)) return "is not a number (NaN)";
  if (std::isinf(value)) return "is infinite";
  if (value < 0) return cat(shortest_decimal(value), " is negative");
  return {};
}

// One (step, worker) cell and the line that gave it.
struct Cell {
  std::int64_t step = 0;
  std::int64_t worker = 0;
  double value = 0;
  std::size_t line = 0;
};

// The cells of a CSV trace, as a W x S table: refuses duplicates and gaps, naming the lines.
// `name(worker, step)`: how errors name a cell ("worker 3 step 5").
DelayTrace table_of(std::vector<Cell> cells, const std::string& path,
                    const std::function<std::string(std::int64_t, std::int64_t)>& name) {
  if (cells.empty()) data_error(cat(path, ": no rows after the header"));
  std::sort(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) {
    return std::tie(a.step, a.worker, a.line) < std::tie(b.step, b.worker, b.line);
  });
  std::int64_t workers = 0, steps = 0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    workers = std::max(workers, cells[i].worker + 1);
    steps = std::max(steps, cells[i].step + 1);
    if (i > 0 && cells[i].step == cells[i - 1].step && cells[i].worker == cells[i - 1].worker) {
      line_error(
          path, cells[i].line,
          cat("repeats ", name(cells[i].worker, cells[i].step), " of line ", cells[i - 1].line));
    }
  }
  // Sorted and without duplicates: cell k is (k / W, k % W) until the first gap.
  for (std::int64_t k = 0; k < workers * steps; ++k) {
    const auto index = static_cast<std::size_t>(k);
    if (index >= cells.size() || cells[index].step != k / workers ||
        cells[index].worker != k % workers) {
      data_error(cat(path, ": no row for ", name(k % workers, k / workers), " (", workers,
                     " workers x ", steps, " steps: each pair needs a row)"));
    }
  }
  DelayTrace trace;
  trace.path = path;
  trace.workers = static_cast<int>(workers);
  trace.steps = steps;
  trace.seconds.reserve(cells.size());
  for (const Cell& cell : cells) trace.seconds.push_back(cell.value);
  return trace;
}

bool is_hdf5(const std::vector<std::uint8_t>& bytes) {
  static constexpr std::uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kSignature, 8) == 0;
}

DelayTrace read_hdf5_trace(const std::string& path) {
  const io::File file = io::File::open(path);
  if (!file.has_attribute("format") || file.string_attribute("format") != kFormat) {
    data_error(cat(path, ": not a delay trace (root attribute format is not ", kFormat,
                   "; mbkit-formats(5))"));
  }
  const std::int64_t version = file.int_attribute("format_version");
  if (version != kFormatVersion) {
    data_error(cat(path, ": delay trace format_version ", version, " (this mbkit reads ",
                   kFormatVersion, ")"));
  }
  if (!file.has(kDataset)) data_error(cat(path, ": no dataset /", kDataset));
  const io::Dataset dataset = file.open_dataset(kDataset);
  const auto dims = dataset.dims();
  if (dims.size() != 2 || dims[0] == 0 || dims[1] == 0) {
    data_error(cat(path, ": /", kDataset, " is not a [steps][workers] table of one cell or more"));
  }
  if (static_cast<std::int64_t>(dims[1]) > kMaxWorkers ||
      static_cast<std::int64_t>(dims[0]) > kMaxSteps ||
      static_cast<std::int64_t>(dims[0] * dims[1]) > kMaxCells) {
    data_error(cat(path, ": /", kDataset, " has ", dims[0], " x ", dims[1],
                   " cells, more than a trace may"));
  }
  if (dataset.type_class() != H5T_FLOAT) data_error(cat(path, ": /", kDataset, " is not float"));
  DelayTrace trace;
  trace.path = path;
  trace.steps = static_cast<std::int64_t>(dims[0]);
  trace.workers = static_cast<int>(dims[1]);
  trace.seconds = dataset.read<double>();
  const io::Group group = file.open_group("trace");
  if (group.has_attribute("source")) trace.source = group.string_attribute("source");
  for (std::size_t i = 0; i < trace.seconds.size(); ++i) {
    const std::string wrong = bad_delay(trace.seconds[i]);
    if (!wrong.empty()) {
      const auto workers = static_cast<std::size_t>(trace.workers);
      data_error(cat(path, ": /", kDataset, "[", i / workers, "][", i % workers, "] (step ",
                     i / workers, ", worker ", i % workers, "): ", wrong));
    }
  }
  return trace;
}

// The index of each named column in a header; a missing one is an error naming the line.
std::map<std::string, std::size_t> columns_of(std::string_view header, const std::string& path,
                                              const std::vector<std::string>& needed) {
  std::map<std::string, std::size_t> found;
  const auto fields = fields_of(header);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!fields[i].empty()) found.emplace(std::string(fields[i]), i);
  }
  for (const std::string& name : needed) {
    if (found.count(name) == 0) {
      line_error(path, 1,
                 cat("the header '", shown(header), "' has no column ", name, " (needs ",
                     join(needed, ", "), ")"));
    }
  }
  return found;
}

}  // namespace

double DelayTrace::at(std::int64_t step, int worker) const {
  MBKIT_CHECK(step >= 0 && worker >= 0 && workers > 0 && steps > 0, "trace cell of step ", step,
              " worker ", worker);
  const std::int64_t row = step % steps;
  const std::int64_t column = worker % workers;
  return seconds[static_cast<std::size_t>(row * workers + column)] * scale;
}

double DelayTrace::mean() const {
  double total = 0;
  for (const double value : seconds) total += value;
  return seconds.empty() ? 0.0 : total / static_cast<double>(seconds.size()) * scale;
}

std::string DelayTrace::digest() const {
  Sha256 sha;
  const auto put = [&](std::uint64_t word) {
    std::uint8_t bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(word >> (8 * i));
    sha.update(bytes, sizeof bytes);
  };
  put(static_cast<std::uint64_t>(workers));
  put(static_cast<std::uint64_t>(steps));
  for (const double value : seconds) put(std::bit_cast<std::uint64_t>(value));
  return sha.hex();
}

std::string DelayTrace::describe() const {
  const double largest =
      seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end()) * scale;
  return cat(path, ": ", workers, workers == 1 ? " worker x " : " workers x ", steps,
             steps == 1 ? " step" : " steps", ", mean ", strprintf("%.3g", mean()), " s, max ",
             strprintf("%.3g", largest), " s",
             scale != 1 ? cat(" (x", shortest_decimal(scale), ")") : std::string());
}

std::string trace_path_of(const std::string& induce) {
  constexpr std::string_view kPrefix = "trace:";
  return induce.starts_with(kPrefix) ? induce.substr(kPrefix.size()) : std::string();
}

DelayTrace parse_delay_trace_csv(std::string_view text, const std::string& path) {
  const auto lines = lines_of(text);
  if (lines.empty())
    data_error(cat(path, ": empty (a delay trace starts with the line ", kCsvHeader, ")"));
  if (trim(lines[0]) != kCsvHeader) {
    line_error(path, 1, cat("the header is '", shown(lines[0]), "', not ", kCsvHeader));
  }
  std::vector<Cell> cells;
  cells.reserve(lines.size() - 1);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::size_t line = i + 1;
    const auto fields = fields_of(lines[i]);
    if (fields.size() != 3) {
      line_error(path, line,
                 cat("'", shown(lines[i]), "' has ", fields.size(),
                     fields.size() == 1 ? " field" : " fields", ", not 3 (", kCsvHeader, ")"));
    }
    const auto worker = read_index(fields[0]);
    if (!worker || *worker < 0 || *worker >= kMaxWorkers) {
      line_error(
          path, line,
          cat("worker '", shown(fields[0]), "' is not a worker index 0 to ", kMaxWorkers - 1));
    }
    const auto step = read_index(fields[1]);
    if (!step || *step < 0 || *step >= kMaxSteps) {
      line_error(path, line,
                 cat("step '", shown(fields[1]), "' is not a step index 0 to ", kMaxSteps - 1));
    }
    const auto value = read_value(fields[2]);
    if (!value) line_error(path, line, cat("seconds '", shown(fields[2]), "' is not a number"));
    const std::string wrong = bad_delay(*value);
    if (!wrong.empty()) line_error(path, line, cat("seconds ", wrong));
    cells.push_back({*step, *worker, *value, line});
  }
  return table_of(std::move(cells), path, [](std::int64_t worker, std::int64_t step) {
    return cat("worker ", worker, " step ", step);
  });
}

DelayTrace read_delay_trace(const std::string& path) {
  const std::vector<std::uint8_t> bytes = fs::read_file(path);
  if (is_hdf5(bytes)) return read_hdf5_trace(path);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return parse_delay_trace_csv(text, path);
}

void write_delay_trace(const std::string& path, const DelayTrace& trace) {
  MBKIT_CHECK(trace.workers > 0 && trace.steps > 0 &&
                  trace.seconds.size() == static_cast<std::size_t>(trace.steps) *
                                              static_cast<std::size_t>(trace.workers),
              "delay trace of ", trace.workers, " x ", trace.steps, " with ", trace.seconds.size(),
              " values");
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kFormat);
  file.set_attribute("format_version", kFormatVersion);
  io::Group group = file.create_group("trace");
  group.set_attribute("source", trace.source);
  io::StorageOptions storage;
  storage.chunk = {static_cast<hsize_t>(std::min<std::int64_t>(trace.steps, 1024)),
                   static_cast<hsize_t>(trace.workers)};
  storage.deflate_level = 4;
  storage.shuffle = true;
  group
      .create_dataset<double>(
          "seconds", {static_cast<hsize_t>(trace.steps), static_cast<hsize_t>(trace.workers)},
          storage)
      .write(std::span<const double>(trace.seconds));
  file.close();
  output.commit();
}

DelayTrace parse_pai_trace(std::string_view text, const std::string& path, PaiDelays delays) {
  const auto lines = lines_of(text);
  if (lines.empty()) data_error(cat(path, ": empty (a PAI mini-batch-time file has a header)"));
  const auto columns = columns_of(lines[0], path, {"worker", "time", "batch_time_norm"});
  const std::size_t worker_column = columns.at("worker");
  const std::size_t time_column = columns.at("time");
  const std::size_t value_column = columns.at("batch_time_norm");
  const std::size_t width = fields_of(lines[0]).size();
  std::vector<Cell> cells;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::size_t line = i + 1;
    const auto fields = fields_of(lines[i]);
    if (fields.size() != width) {
      line_error(path, line, cat("has ", fields.size(), " fields, the header ", width));
    }
    const auto worker = read_index(fields[worker_column]);
    if (!worker || *worker < 0 || *worker >= kMaxWorkers) {
      line_error(path, line,
                 cat("worker '", shown(fields[worker_column]), "' is not a worker number"));
    }
    const auto time = read_index(fields[time_column]);
    if (!time || *time < 0) {
      line_error(path, line,
                 cat("time '", shown(fields[time_column]), "' is not an iteration number"));
    }
    const auto value = read_value(fields[value_column]);
    if (!value) {
      line_error(path, line,
                 cat("batch_time_norm '", shown(fields[value_column]), "' is not a number"));
    }
    const std::string wrong = bad_delay(*value);
    if (!wrong.empty()) line_error(path, line, cat("batch_time_norm ", wrong));
    cells.push_back({*time, *worker, *value, line});
  }
  if (cells.empty()) data_error(cat(path, ": no rows after the header"));
  // Workers and iterations become dense indexes in the order of their numbers.
  std::map<std::int64_t, std::int64_t> worker_index, step_index;
  for (const Cell& cell : cells) {
    worker_index.emplace(cell.worker, 0);
    step_index.emplace(cell.step, 0);
  }
  std::int64_t next = 0;
  for (auto& [number, index] : worker_index) index = next++;
  next = 0;
  for (auto& [number, index] : step_index) index = next++;
  std::vector<std::int64_t> worker_number, iteration_number;
  for (const auto& [number, index] : worker_index) worker_number.push_back(number);
  for (const auto& [number, index] : step_index) iteration_number.push_back(number);
  for (Cell& cell : cells) {
    cell.worker = worker_index.at(cell.worker);
    cell.step = step_index.at(cell.step);
  }
  // Errors name the file's own worker and iteration numbers, not the dense indexes.
  DelayTrace trace = table_of(std::move(cells), path, [&](std::int64_t worker, std::int64_t step) {
    return cat("worker ", worker_number[static_cast<std::size_t>(worker)], " time ",
               iteration_number[static_cast<std::size_t>(step)]);
  });
  const auto workers = static_cast<std::size_t>(trace.workers);
  for (std::size_t row = 0; row < static_cast<std::size_t>(trace.steps); ++row) {
    double* values = trace.seconds.data() + row * workers;
    const double fastest =
        delays == PaiDelays::kExcess ? *std::min_element(values, values + workers) : 0.0;
    for (std::size_t w = 0; w < workers; ++w) values[w] = (values[w] - fastest) / 1000.0;
  }
  trace.source = cat("Alibaba PAI mini-batch-time ", path, ": batch_time_norm / 1000",
                     delays == PaiDelays::kExcess ? " minus the step's fastest worker's" : "",
                     "; workers ", worker_number.front(), "..", worker_number.back(),
                     ", iterations ", iteration_number.front(), "..", iteration_number.back());
  return trace;
}

TraceReplay::TraceReplay(std::shared_ptr<const DelayTrace> trace, int worker)
    : trace_(std::move(trace)), worker_(worker) {
  MBKIT_CHECK(trace_ != nullptr && worker_ >= 0, "trace replay of worker ", worker);
}

}  // namespace mbkit::emulation
