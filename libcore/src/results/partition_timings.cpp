// The table and the file of mb-bench-partitions (mbkit-formats.5, "Partition timings").
#include "mbkit/results/partition_timings.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/config.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::results {
namespace {

constexpr const char* kFormat = "mbkit-partitions";
constexpr std::int64_t kFormatVersion = 1;

}  // namespace

Spread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {values.front(), median, values.back()};
}

const char* partitions_columns() {
  return "# rank batch partitions micro_batch step_ms_min step_ms_median step_ms_max "
         "sample_us_min sample_us_median sample_us_max step_ms_first load_ms";
}

void write_partitions_table(std::ostream& out, const PartitionsRun& run) {
  out << "# mb-bench-partitions " << MBKIT_VERSION << ": " << run.model << " on " << run.data
      << ", " << run.ranks << (run.ranks == 1 ? " rank" : " ranks") << "\n"
      << "# " << run.backend << "; CPU: " << run.cpu_model << "\n"
      << "# a step: P micro-batches of B/P samples and one update; " << run.steps
      << " timed steps after " << run.warmup_steps
      << " warm-up; min/median/max over steps; first: the first warm-up step (the first row's "
         "is the process's first step); load: the loader thread's CPU a batch, beside the step\n"
      << partitions_columns() << "\n";
  for (const auto& row : run.rows) {
    const Spread s = spread_of(row.seconds);
    const double per_sample = 1e6 / row.split.batch;
    const std::string first =
        std::isnan(row.first_seconds) ? "nan" : strprintf("%.3f", row.first_seconds * 1e3);
    const std::string load =
        std::isnan(row.load_seconds) ? "nan" : strprintf("%.3f", row.load_seconds * 1e3);
    out << strprintf("%4d %7d %10d %11d %11.3f %14.3f %11.3f %13.3f %16.3f %13.3f %13s %7s\n",
                     row.rank, row.split.batch, row.split.partitions, row.split.micro_batch(),
                     s.min * 1e3, s.median * 1e3, s.max * 1e3, s.min * per_sample,
                     s.median * per_sample, s.max * per_sample, first.c_str(), load.c_str());
  }
}

void write_partitions_file(const std::string& path, const PartitionsRun& run) {
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kFormat);
  file.set_attribute("format_version", kFormatVersion);
  file.set_attribute("created_by", cat("mb-bench-partitions ", MBKIT_VERSION));
  file.set_attribute("created", utc_timestamp());
  file.set_attribute("model", run.model);
  file.set_attribute("data", run.data);
  file.set_attribute("device", run.device);
  file.set_attribute("backend", run.backend);
  file.set_attribute("cpu_model", run.cpu_model);
  file.set_attribute("threads", run.threads);
  file.set_attribute("ranks", run.ranks);
  file.set_attribute("steps", run.steps);
  file.set_attribute("warmup_steps", run.warmup_steps);
  file.set_attribute("seed", run.seed);
  std::vector<std::string> libraries;
  for (const auto& [name, version] : library_versions())
    libraries.push_back(cat(name, " ", version));
  file.set_attribute("libraries", libraries);
  const auto n = static_cast<hsize_t>(run.rows.size());
  std::vector<std::int64_t> rank, batch, partitions, micro;
  std::vector<double> times, firsts, loads;
  for (const auto& row : run.rows) {
    firsts.push_back(row.first_seconds);
    loads.push_back(row.load_seconds);
    rank.push_back(row.rank);
    batch.push_back(row.split.batch);
    partitions.push_back(row.split.partitions);
    micro.push_back(row.split.micro_batch());
    times.insert(times.end(), row.seconds.begin(), row.seconds.end());
  }
  file.create_dataset<std::int64_t>("rank", {n}).write(std::span<const std::int64_t>(rank));
  file.create_dataset<std::int64_t>("batch", {n}).write(std::span<const std::int64_t>(batch));
  file.create_dataset<std::int64_t>("partitions", {n})
      .write(std::span<const std::int64_t>(partitions));
  file.create_dataset<std::int64_t>("micro_batch", {n}).write(std::span<const std::int64_t>(micro));
  file.create_dataset<double>("step_time", {n, static_cast<hsize_t>(run.steps)})
      .write(std::span<const double>(times));
  file.create_dataset<double>("first_step_time", {n}).write(std::span<const double>(firsts));
  file.create_dataset<double>("load_time", {n}).write(std::span<const double>(loads));
  file.close();
  output.commit();
}

PartitionsRun read_partitions_file(const std::string& path) {
  const io::File file = io::File::open(path);
  if (!file.has_attribute("format") || file.string_attribute("format") != kFormat) {
    data_error(cat(path, " is not a partitions file (mb-bench-partitions -o writes them)"));
  }
  PartitionsRun run;
  run.model = file.string_attribute("model");
  run.data = file.string_attribute("data");
  run.device = file.string_attribute("device");
  run.backend = file.string_attribute("backend");
  run.cpu_model = file.string_attribute("cpu_model");
  run.threads = static_cast<int>(file.int_attribute("threads"));
  run.ranks = static_cast<int>(file.int_attribute("ranks"));
  run.steps = static_cast<int>(file.int_attribute("steps"));
  run.warmup_steps = static_cast<int>(file.int_attribute("warmup_steps"));
  run.seed = file.uint_attribute("seed");
  const auto rank = file.open_dataset("rank").read<std::int64_t>();
  const auto batch = file.open_dataset("batch").read<std::int64_t>();
  const auto partitions = file.open_dataset("partitions").read<std::int64_t>();
  const auto times = file.open_dataset("step_time").read<double>();
  // Files written before a column are read with NaN in it.
  const auto optional_column = [&](const char* name) {
    return file.has(name) ? file.open_dataset(name).read<double>()
                          : std::vector<double>(rank.size(), std::nan(""));
  };
  const auto firsts = optional_column("first_step_time");
  const auto loads = optional_column("load_time");
  if (firsts.size() != rank.size() || loads.size() != rank.size()) {
    data_error(cat(path, ": the columns rank, first_step_time and load_time disagree in length"));
  }
  const auto steps = static_cast<std::size_t>(run.steps);
  if (batch.size() != rank.size() || partitions.size() != rank.size() ||
      times.size() != rank.size() * steps) {
    data_error(cat(path, ": the columns rank, batch, partitions and step_time disagree in length"));
  }
  for (std::size_t i = 0; i < rank.size(); ++i) {
    if (batch[i] < 1 || partitions[i] < 1) data_error(cat(path, ": row ", i, " has no batch"));
    SplitTimes row;
    row.rank = static_cast<int>(rank[i]);
    row.split = {static_cast<int>(batch[i]), static_cast<int>(partitions[i])};
    row.first_seconds = firsts[i];
    row.load_seconds = loads[i];
    row.seconds.assign(times.begin() + static_cast<std::ptrdiff_t>(i * steps),
                       times.begin() + static_cast<std::ptrdiff_t>((i + 1) * steps));
    run.rows.push_back(std::move(row));
  }
  return run;
}

}  // namespace mbkit::results
