#include "mbkit/report/inputs.hpp"

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {

std::string mbkit_format_of(const std::string& path) {
  if (!fs::is_regular_file(path)) return {};
  io::quiet_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) return {};
  try {
    const io::File file = io::File::open(path, io::File::Mode::kSwmrRead);
    if (!file.has_attribute("format")) return {};
    return file.string_attribute("format");
  } catch (const Error&) {
    return {};
  }
}

std::string describe_format(const std::string& format) {
  if (format == metrics::kLogFormat) return "a metric log";
  if (format == "mbkit-checkpoint") return "a checkpoint";
  if (format == "mbkit-eval") return "an evaluation";
  if (format == "mbkit-dataset") return "a dataset";
  if (format == "mbkit-bandwidth") return "bandwidth results";
  if (format == "mbkit-partitions") return "partition timings";
  return cat("an mbkit file of format ", format);
}

InputFiles sort_inputs(const std::vector<std::string>& paths) {
  InputFiles inputs;
  for (const auto& path : paths) {
    const std::string format = mbkit_format_of(path);
    if (format == "mbkit-bandwidth") {
      inputs.bandwidth.push_back(path);
    } else if (format.starts_with("mbkit-") && format != metrics::kLogFormat) {
      inputs.others.push_back({path, describe_format(format)});
    } else {
      inputs.logs.push_back(path);
    }
  }
  return inputs;
}

std::string skipped_text(const std::vector<SkippedFile>& skipped) {
  std::vector<std::string> files;
  for (const auto& file : skipped) files.push_back(cat(file.path, " (", file.what, ")"));
  return cat("left out ", skipped.size(), skipped.size() == 1 ? " file that is" : " files that are",
             " not a metric log: ", join(files, ", "));
}

void no_log_left(const std::vector<SkippedFile>& skipped) {
  MBKIT_CHECK(!skipped.empty(), "no_log_left without files");
  const SkippedFile& first = skipped.front();
  std::string text = cat(first.path, ": not an mbkit metric log (", first.what, ")");
  if (skipped.size() == 2) text += "; nor is the other file given";
  if (skipped.size() > 2) text += cat("; nor are the ", skipped.size() - 1, " other files given");
  data_error(text);
}

}  // namespace mbkit::report
