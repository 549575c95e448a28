#include "mbkit/tools/mb_report.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "mbkit/report/report.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::report {

int run_report(const ReportOptions& options, std::ostream& out) {
  // The command line first, before any file is read.
  if (options.json && options.csv) usage_error("--json and --csv exclude each other");
  if (!options.output.empty() && !options.force && fs::exists(options.output)) {
    fail(cat(options.output, " exists; use --force to replace it"));
  }
  const auto target = options.has_target ? std::optional<double>(options.target) : std::nullopt;
  const mbkit::report::Report report = mbkit::report::build_report(options.logs, target);
  const auto write = [&](std::ostream& stream) {
    if (options.json) {
      mbkit::report::write_json(report, stream);
    } else if (options.csv) {
      mbkit::report::write_csv(report, stream);
    } else {
      mbkit::report::write_table(report, stream);
    }
  };
  if (options.output.empty()) {
    write(out);
    out.flush();
    if (!out) fail("cannot write the report to standard output");
    return 0;
  }
  fs::AtomicOutput output(options.output);
  std::ofstream file(output.temp_path(), std::ios::binary | std::ios::trunc);
  write(file);
  file.close();
  if (!file) fail(cat("cannot write ", options.output, ": ", std::strerror(errno)));
  output.commit();
  log::info(cat("wrote ", options.output, ": ", report.runs.size(),
                report.runs.size() == 1 ? " run" : " runs"));
  return 0;
}

}  // namespace mbkit::tools::report
