#include "mbkit/train/time_model.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/config.hpp"
#include "mbkit/io/format.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

namespace {

constexpr const char* kFormat = "mbkit-time-model";
constexpr int kFormatVersion = 1;
constexpr const char* kDevicesGroup = "devices";

}  // namespace

std::string time_model_problem(const TimeModel& model) {
  if (!std::isfinite(model.a)) return cat("a = ", model.a, " is not finite");
  if (!std::isfinite(model.b)) return cat("b = ", model.b, " is not finite");
  if (model.a < 0) return cat("a = ", model.a, " s per sample is negative");
  if (model.b < 0) return cat("b = ", model.b, " s per batch is negative");
  if (!(model.a + model.b > 0)) return "a and b are both 0";
  return {};
}

TimeModelFit fit_time_model(std::span<const double> batch_sizes, std::span<const double> seconds) {
  if (batch_sizes.size() != seconds.size()) {
    usage_error(
        cat("time model: ", batch_sizes.size(), " batch sizes for ", seconds.size(), " times"));
  }
  const std::size_t n = batch_sizes.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (!(std::isfinite(batch_sizes[i]) && batch_sizes[i] > 0)) {
      usage_error(cat("time model: batch size ", batch_sizes[i], " is not a positive number"));
    }
    if (!(std::isfinite(seconds[i]) && seconds[i] > 0)) {
      usage_error(cat("time model: time ", seconds[i], " s for batch size ", batch_sizes[i],
                      " is not a positive number"));
    }
  }
  // Centred sums: the textbook normal equations lose digits when x is large and t small.
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean_x += batch_sizes[i];
    mean_y += seconds[i];
  }
  mean_x /= static_cast<double>(std::max<std::size_t>(n, 1));
  mean_y /= static_cast<double>(std::max<std::size_t>(n, 1));
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = batch_sizes[i] - mean_x, dy = seconds[i] - mean_y;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  if (n < 2 || !(sxx > 0)) {
    usage_error("time model: fitting t(x) = a*x + b needs at least two different batch sizes");
  }
  TimeModelFit fit;
  fit.model.a = sxy / sxx;
  fit.model.b = mean_y - fit.model.a * mean_x;
  if (fit.model.b < 0) {
    // A negative fixed cost is noise around a small one (it would plan rounds of negative
    // length): the least-squares line with b >= 0 is then the one through the origin, whose a
    // is positive with positive times.
    double xx = 0, xy = 0;
    for (std::size_t i = 0; i < n; ++i) {
      xx += batch_sizes[i] * batch_sizes[i];
      xy += batch_sizes[i] * seconds[i];
    }
    fit.model = {xy / xx, 0.0};
  }
  double residual_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double residual = fit.model.seconds(batch_sizes[i]) - seconds[i];
    residual_sum += residual * residual;
    fit.max_relative_residual =
        std::max(fit.max_relative_residual, std::abs(residual) / seconds[i]);
  }
  fit.r_squared = syy > 0 ? 1.0 - residual_sum / syy : 1.0;
  return fit;
}

void write_time_model(const std::string& path, const std::vector<TimeModelRecord>& records) {
  if (records.empty()) fail(cat("time model ", path, ": no measurement to write"));
  // Before the temporary exists: an unusable model is not written at all.
  for (const TimeModelRecord& record : records) {
    if (const std::string problem = time_model_problem(record.fit.model); !problem.empty()) {
      fail(cat("not writing the time model ", path, ": rank ", record.rank,
               "'s fit t(B) = a*B + b: ", problem,
               record.fit.model.a <= 0 ? " (the step time does not grow with the batch)" : "",
               "; larger --batch-sizes or a quieter machine give a usable model"));
    }
  }
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kFormat);
  file.set_attribute("format_version", kFormatVersion);
  file.set_attribute("created_by", cat("mbkit ", MBKIT_VERSION));
  io::Group devices = file.create_group(kDevicesGroup);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const TimeModelRecord& record = records[i];
    if (record.batch_sizes.size() != record.seconds.size()) {
      fail(cat("time model ", path, ": rank ", record.rank, " has ", record.batch_sizes.size(),
               " batch sizes for ", record.seconds.size(), " times"));
    }
    io::Group device = devices.create_group(std::to_string(i));
    device.set_attribute("rank", record.rank);
    device.set_attribute("host", record.host);
    device.set_attribute("model", record.model);
    device.set_attribute("threads", record.threads);
    device.set_attribute("device", record.device);
    device.set_attribute("cpu_model", record.cpu_model);
    std::vector<std::string> libraries;
    for (const auto& [name, version] : record.library_versions) {
      libraries.push_back(cat(name, " ", version));
    }
    device.set_attribute("libraries", libraries);
    device.set_attribute("a", record.fit.model.a);
    device.set_attribute("b", record.fit.model.b);
    device.set_attribute("r_squared", record.fit.r_squared);
    device.set_attribute("max_relative_residual", record.fit.max_relative_residual);
    // The points are few (one per batch size): attributes, so the file needs no chunked data.
    device.set_attribute("batch_sizes", record.batch_sizes);
    device.set_attribute("seconds", record.seconds);
  }
  file.close();
  output.commit();
}

namespace {

double finite_attribute(const io::Group& group, const char* name) {
  const double value = group.double_attribute(name);
  if (!std::isfinite(value)) data_error(cat(group.describe(), ": '", name, "' is not finite"));
  return value;
}

TimeModelRecord read_record(const io::Group& device) {
  TimeModelRecord record;
  record.rank = device.int_attribute("rank");
  record.host = device.string_attribute("host");
  record.model = device.string_attribute("model");
  record.threads = device.int_attribute("threads");
  record.device = device.string_attribute("device");
  record.cpu_model = device.string_attribute("cpu_model");
  for (const std::string& line : device.string_array_attribute("libraries")) {
    const auto space = line.find(' ');
    record.library_versions.emplace_back(line.substr(0, space),
                                         space == std::string::npos ? "" : line.substr(space + 1));
  }
  record.fit.model.a = finite_attribute(device, "a");
  record.fit.model.b = finite_attribute(device, "b");
  record.fit.r_squared = finite_attribute(device, "r_squared");
  record.fit.max_relative_residual = finite_attribute(device, "max_relative_residual");
  record.batch_sizes = device.double_array_attribute("batch_sizes");
  record.seconds = device.double_array_attribute("seconds");
  if (record.batch_sizes.size() != record.seconds.size()) {
    data_error(cat(device.describe(), ": ", record.batch_sizes.size(), " batch sizes for ",
                   record.seconds.size(), " times"));
  }
  if (record.rank < 0) data_error(cat(device.describe(), ": negative rank ", record.rank));
  if (const std::string problem = time_model_problem(record.fit.model); !problem.empty()) {
    data_error(cat(device.describe(), " (rank ", record.rank, "): t(B) = a*B + b with ", problem,
                   ": not a usable time model"));
  }
  return record;
}

}  // namespace

std::vector<TimeModelRecord> read_time_model(const std::string& path) {
  const io::File file = io::File::open(path);
  try {
    io::check_format(file, kFormat, kFormatVersion, "time model");
    const io::Group devices = file.open_group(kDevicesGroup);
    const auto names = devices.member_names();
    std::vector<TimeModelRecord> records(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!devices.has(std::to_string(i))) {
        data_error(cat(path, ": /", kDevicesGroup, " holds ", names.size(),
                       " devices but not one named ", i));
      }
      records[i] = read_record(devices.open_group(std::to_string(i)));
      if (i > 0 && records[i].rank <= records[i - 1].rank) {
        data_error(cat(path, ": devices are not in increasing rank order"));
      }
    }
    if (records.empty()) data_error(cat(path, ": holds no device's time model"));
    return records;
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
}

TimeModel time_model_for_rank(const std::vector<TimeModelRecord>& records, std::int64_t rank,
                              const std::string& path) {
  if (records.size() == 1) return records.front().fit.model;
  for (const TimeModelRecord& record : records) {
    if (record.rank == rank) return record.fit.model;
  }
  data_error(
      cat(path, ": holds time models of ", records.size(), " ranks but none of rank ", rank));
}

}  // namespace mbkit::train
