// mb-report: summaries of training runs from their metric logs (the library side of the tool):
// a table of the runs, their time to a target test accuracy and the ratios of those times
// between tools (mbkit/report/report.hpp), as text, JSON or CSV, on standard output or into a
// file written under a temporary name and renamed when complete; or a run's timeline as a
// Chrome trace (mbkit/report/trace.hpp), the scaling of throughput with the workers
// (mbkit/report/scaling.hpp), or a real run against its emulation (mbkit/report/compare.hpp).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mbkit::tools::report {

struct ReportOptions {
  std::vector<std::string> logs;  ///< metric logs (--log of mb-train-*)
  double target = 0;              ///< test accuracy in (0, 1]; with has_target only
  bool has_target = false;
  bool json = false;
  bool csv = false;
  std::string output;     ///< FILE instead of `out`
  bool force = false;     ///< replace an existing output
  std::string trace;      ///< --trace FILE: the timeline of the one log, as a Chrome trace
  bool scaling = false;   ///< --scaling: throughput against workers (report/scaling.hpp)
  int warmup_steps = -1;  ///< --warmup-steps; -1: a tenth of each run's steps (--scaling), 0
                          ///< (--compare)
  bool has_warmup = false;
  bool compare = false;  ///< --compare REAL.h5 EMULATED.h5 (report/compare.hpp)
};

/// Writes the report on `out`, or into `output`. Returns the exit status.
int run_report(const ReportOptions& options, std::ostream& out);

}  // namespace mbkit::tools::report
