// The files given to mb-report, sorted by what they are. Metric logs, checkpoints, evaluations,
// datasets and bandwidth results all end in .h5, so that `mb-report out/quick/*.h5` names some
// of each: the logs are reported and the other mbkit files are left out, saying which.
#pragma once

#include <string>
#include <vector>

namespace mbkit::report {

/// The "format" root attribute of an mbkit HDF5 file ("mbkit-log", "mbkit-checkpoint"...); ""
/// for anything else: a missing file, not HDF5, no such attribute, or one that cannot be read
/// (then the metric-log reader names what is wrong). Opened as SWMR readers open a log, so that
/// a live log, or one whose writer was killed, reads.
std::string mbkit_format_of(const std::string& path);

/// What an mbkit format holds, for messages: "a checkpoint" for "mbkit-checkpoint".
std::string describe_format(const std::string& format);

struct SkippedFile {
  std::string path;
  std::string what;  ///< describe_format() of its format
};

struct InputFiles {
  /// Metric logs, and every file that is no other mbkit file: the log reader reports those
  /// (missing, not HDF5, not an mbkit metric log, damaged).
  std::vector<std::string> logs;
  std::vector<std::string> bandwidth;  ///< mb-bench-bandwidth --append results
  std::vector<SkippedFile> others;     ///< other mbkit files: checkpoints, datasets...
};

/// Sorts `paths`, keeping their order within each kind.
InputFiles sort_inputs(const std::vector<std::string>& paths);

/// One line for the files left out: "left out 2 files that are not metric logs: a.h5 (a
/// checkpoint), b.h5 (a dataset)".
std::string skipped_text(const std::vector<SkippedFile>& skipped);

/// The data error when no metric log is left: the first file left out, what it is, and how many
/// others there were.
[[noreturn]] void no_log_left(const std::vector<SkippedFile>& skipped);

}  // namespace mbkit::report
