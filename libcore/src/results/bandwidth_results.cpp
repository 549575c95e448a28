// The results file of mb-bench-bandwidth --append (mbkit-formats.5, "Bandwidth results"):
// a group /np<ranks>/<op> per run, a dataset per column; and the table's rows as printed.
#include "mbkit/results/bandwidth_results.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "mbkit/config.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::results {
namespace {

constexpr const char* kFormat = "mbkit-bandwidth";
// 2: large_iters and large_from (a version-1 run timed iters at every size).
constexpr std::int64_t kFormatVersion = 2;

template <class T, class Field>
void write_column(io::Group& group, const std::string& name, const std::vector<Row>& rows,
                  Field field) {
  std::vector<T> values;
  for (const Row& row : rows) values.push_back(static_cast<T>(field(row)));
  group.create_dataset<T>(name, {static_cast<hsize_t>(values.size())})
      .write(std::span<const T>(values));
}

void write_run(io::File& file, const Run& run) {
  io::Group ranks = file.require_group(cat("np", run.ranks));
  io::Group group = ranks.create_group(run.op);
  group.set_attribute("ranks", run.ranks);
  group.set_attribute("op", run.op);
  group.set_attribute("dtype", run.dtype);
  group.set_attribute("iters", run.iters);
  group.set_attribute("warmup_iters", run.warmup_iters);
  group.set_attribute("large_iters", run.large_iters);
  group.set_attribute("large_from", static_cast<std::int64_t>(run.large_from));
  group.set_attribute("hosts", run.hosts);
  group.set_attribute("created", run.created);
  std::vector<std::string> modes;
  for (const Row& row : run.rows) modes.push_back(row.op);
  group.create_string_dataset("mode", modes);
  const auto& rows = run.rows;
  write_column<std::uint64_t>(group, "bytes", rows, [](const Row& r) { return r.bytes; });
  write_column<std::uint64_t>(group, "count", rows, [](const Row& r) { return r.count; });
  write_column<double>(group, "time_us", rows, [](const Row& r) { return r.avg_us; });
  write_column<double>(group, "min_us", rows, [](const Row& r) { return r.min_us; });
  write_column<double>(group, "max_us", rows, [](const Row& r) { return r.max_us; });
  write_column<double>(group, "algbw_GBps", rows, [](const Row& r) { return r.algbw_gbps; });
  write_column<double>(group, "busbw_GBps", rows, [](const Row& r) { return r.busbw_gbps; });
  write_column<std::int64_t>(group, "wrong", rows, [](const Row& r) { return r.wrong; });
}

template <class T>
std::vector<T> read_column(const io::Group& group, const std::string& name, std::size_t rows) {
  if (!group.has(name)) data_error(cat(group.describe(), " has no dataset ", name));
  auto values = group.open_dataset(name).read<T>();
  if (values.size() != rows) {
    data_error(cat(group.describe(), "/", name, " has ", values.size(), " values, not ", rows));
  }
  return values;
}

Run read_run(const io::Group& group) {
  Run run;
  run.ranks = static_cast<int>(group.int_attribute("ranks"));
  run.op = group.string_attribute("op");
  run.dtype = group.string_attribute("dtype");
  run.iters = static_cast<int>(group.int_attribute("iters"));
  run.warmup_iters = static_cast<int>(group.int_attribute("warmup_iters"));
  if (group.has_attribute("large_iters")) {
    const std::int64_t iters = group.int_attribute("large_iters");
    const std::int64_t from = group.int_attribute("large_from");
    if (iters < 0 || iters > INT_MAX || from < 0) {
      data_error(cat(group.describe(), ": large_iters ", iters, " or large_from ", from,
                     " is out of range"));
    }
    run.large_iters = static_cast<int>(iters);
    run.large_from = static_cast<std::uint64_t>(from);
  }
  run.hosts = group.string_attribute("hosts");
  run.created = group.string_attribute("created");
  if (!group.has("mode")) data_error(cat(group.describe(), " has no dataset mode"));
  const auto modes = group.open_dataset("mode").read_strings();
  const std::size_t n = modes.size();
  const auto bytes = read_column<std::uint64_t>(group, "bytes", n);
  const auto count = read_column<std::uint64_t>(group, "count", n);
  const auto time = read_column<double>(group, "time_us", n);
  const auto min = read_column<double>(group, "min_us", n);
  const auto max = read_column<double>(group, "max_us", n);
  const auto algbw = read_column<double>(group, "algbw_GBps", n);
  const auto busbw = read_column<double>(group, "busbw_GBps", n);
  const auto wrong = read_column<std::int64_t>(group, "wrong", n);
  for (std::size_t i = 0; i < n; ++i) {
    run.rows.push_back({modes[i], bytes[i], count[i], run.dtype, time[i], min[i], max[i], algbw[i],
                        busbw[i], wrong[i]});
  }
  return run;
}

}  // namespace

std::vector<Run> read_runs(const std::string& path) {
  const io::File file = io::File::open(path);
  if (!file.has_attribute("format") || file.string_attribute("format") != kFormat) {
    data_error(cat(path, " is not a bandwidth results file (no format attribute '", kFormat,
                   "'; mb-bench-bandwidth --append writes them)"));
  }
  if (file.int_attribute("format_version") > kFormatVersion) {
    data_error(cat(path, " has format version ", file.int_attribute("format_version"),
                   "; this mbkit reads up to ", kFormatVersion));
  }
  std::vector<Run> runs;
  for (const auto& ranks : file.member_names()) {
    const io::Group group = file.open_group(ranks);
    for (const auto& op : group.member_names()) runs.push_back(read_run(group.open_group(op)));
  }
  std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return std::pair(a.ranks, a.op) < std::pair(b.ranks, b.op);
  });
  return runs;
}

void append_run(const std::string& path, const Run& run) {
  std::vector<Run> runs = fs::exists(path) ? read_runs(path) : std::vector<Run>{};
  std::erase_if(runs, [&](const Run& r) { return r.ranks == run.ranks && r.op == run.op; });
  runs.push_back(run);
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kFormat);
  file.set_attribute("format_version", kFormatVersion);
  file.set_attribute("created_by", cat("mb-bench-bandwidth ", MBKIT_VERSION));
  for (const Run& r : runs) write_run(file, r);
  file.close();
  output.commit();
}

const char* column_header() {
  return "# op size count type time_us min_us max_us algbw_GBps busbw_GBps wrong";
}

std::string format_row(const Row& row) {
  return strprintf("%-24s %12zu %11zu %6s %10.2f %10.2f %10.2f %10.3f %10.3f %6lld", row.op.c_str(),
                   row.bytes, row.count, row.type.c_str(), row.avg_us, row.min_us, row.max_us,
                   row.algbw_gbps, row.busbw_gbps, static_cast<long long>(row.wrong));
}

}  // namespace mbkit::results
