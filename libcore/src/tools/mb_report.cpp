#include "mbkit/tools/mb_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>

#include "mbkit/plot/run_log.hpp"
#include "mbkit/report/bandwidth_report.hpp"
#include "mbkit/report/compare.hpp"
#include "mbkit/report/inputs.hpp"
#include "mbkit/report/report.hpp"
#include "mbkit/report/scaling.hpp"
#include "mbkit/report/trace.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::report {
namespace {

void write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  fs::AtomicOutput output(path);
  std::ofstream file(output.temp_path(), std::ios::binary | std::ios::trunc);
  write(file);
  file.close();
  if (!file) fail(cat("cannot write ", path, ": ", std::strerror(errno)));
  output.commit();
}

// A report in the format asked for (--json, --csv, else the table), to standard output or to
// -o FILE (atomically, with `written` said on stderr).
template <class Json, class Csv, class Table>
void emit(const ReportOptions& options, std::ostream& out, const std::string& written, Json json,
          Csv csv, Table table) {
  const auto write = [&](std::ostream& stream) {
    if (options.json) {
      json(stream);
    } else if (options.csv) {
      csv(stream);
    } else {
      table(stream);
    }
  };
  if (options.output.empty()) {
    write(out);
    out.flush();
    if (!out) fail("cannot write the report to standard output");
    return;
  }
  write_file(options.output, write);
  log::info(cat("wrote ", options.output, ": ", written));
}

int report_trace(const ReportOptions& options) {
  if (options.json || options.csv || options.has_target || !options.output.empty()) {
    usage_error("--trace writes a timeline file: --json, --csv, --target and -o do not apply");
  }
  if (options.logs.size() != 1) {
    usage_error(cat("--trace: one metric log is expected, ", options.logs.size(), " given"));
  }
  fs::require_replaceable(options.trace, options.force);
  if (mbkit::report::is_bandwidth_file(options.logs[0])) {
    usage_error(cat("--trace: ", options.logs[0], " holds bandwidth results, not a metric log"));
  }
  const auto log = plot::RunLog::open(options.logs[0]);
  const mbkit::report::Trace trace = mbkit::report::build_trace(log);
  write_file(options.trace, [&](std::ostream& stream) {
    mbkit::report::write_trace(trace, options.logs[0], stream);
  });
  log::info(cat("wrote ", options.trace, ": ", trace.spans.size(), " spans on ",
                trace.tracks.size(), " tracks"));
  return 0;
}

int report_bandwidth(const ReportOptions& options, std::ostream& out,
                     const std::vector<std::string>& files) {
  if (options.has_target) usage_error("--target: bandwidth results have no accuracy");
  const auto runs = mbkit::report::read_bandwidth_runs(files);
  emit(
      options, out, cat(runs.size(), " bandwidth runs"),
      [&](std::ostream& stream) { mbkit::report::write_bandwidth_json(runs, stream); },
      [&](std::ostream& stream) { mbkit::report::write_bandwidth_csv(runs, stream); },
      [&](std::ostream& stream) { mbkit::report::write_bandwidth_table(runs, stream); });
  return 0;
}

int report_scaling(const ReportOptions& options, const std::vector<std::string>& logs,
                   std::ostream& out) {
  const auto report = mbkit::report::build_scaling(logs, options.warmup_steps);
  emit(
      options, out, cat(report.rows.size(), " worker counts"),
      [&](std::ostream& stream) { mbkit::report::write_scaling_json(report, stream); },
      [&](std::ostream& stream) { mbkit::report::write_scaling_csv(report, stream); },
      [&](std::ostream& stream) { mbkit::report::write_scaling_table(report, stream); });
  return 0;
}

int report_compare(const ReportOptions& options, std::ostream& out) {
  if (options.logs.size() != 2) {
    usage_error(
        cat("--compare: two metric logs are expected, the real run and its emulation "
            "(mb-report --compare REAL.h5 EMULATED.h5), ",
            options.logs.size(), " given"));
  }
  const auto target = options.has_target ? std::optional<double>(options.target) : std::nullopt;
  const auto comparison = mbkit::report::compare_clocks(
      options.logs[0], options.logs[1], target, options.has_warmup ? options.warmup_steps : 0);
  emit(
      options, out, cat(comparison.real.log, " against its emulation ", comparison.emulated.log),
      [&](std::ostream& stream) { mbkit::report::write_compare_json(comparison, stream); },
      [&](std::ostream& stream) { mbkit::report::write_compare_csv(comparison, stream); },
      [&](std::ostream& stream) { mbkit::report::write_compare_table(comparison, stream); });
  return 0;
}

}  // namespace

int run_report(const ReportOptions& options, std::ostream& out) {
  // The command line first, before any file is read.
  if (options.scaling && !options.trace.empty()) {
    usage_error("--scaling and --trace exclude each other");
  }
  if (options.scaling && options.has_target)
    usage_error("--scaling and --target exclude each other");
  if (options.compare && options.scaling) usage_error("--compare and --scaling exclude each other");
  if (options.compare && !options.trace.empty()) {
    usage_error("--compare and --trace exclude each other");
  }
  if (options.has_warmup && !options.scaling && !options.compare) {
    usage_error("--warmup-steps applies to --scaling and --compare");
  }
  if (options.has_warmup && options.warmup_steps < 0) {
    usage_error(cat("--warmup-steps ", options.warmup_steps, ": must be 0 or more"));
  }
  if (!options.trace.empty()) return report_trace(options);
  if (options.json && options.csv) usage_error("--json and --csv exclude each other");
  if (!options.output.empty()) fs::require_replaceable(options.output, options.force);
  if (options.compare) return report_compare(options, out);
  if (options.logs.empty()) {
    usage_error(
        cat("no metric log given (mb-report ", options.scaling ? "--scaling " : "", "RUN.h5 ...)"));
  }
  // A glob (out/quick/*.h5) names checkpoints, evaluations and datasets too: the logs are
  // reported, the others left out with a line that says so. Bandwidth results make a table of
  // their own when no log is given.
  auto inputs = mbkit::report::sort_inputs(options.logs);
  if (inputs.logs.empty() && !inputs.bandwidth.empty() && !options.scaling) {
    if (!inputs.others.empty()) log::info(mbkit::report::skipped_text(inputs.others));
    return report_bandwidth(options, out, inputs.bandwidth);
  }
  for (const auto& path : inputs.bandwidth) {
    inputs.others.push_back({path, mbkit::report::describe_format("mbkit-bandwidth")});
  }
  if (inputs.logs.empty()) mbkit::report::no_log_left(inputs.others);
  if (!inputs.others.empty()) log::info(mbkit::report::skipped_text(inputs.others));
  if (options.scaling) return report_scaling(options, inputs.logs, out);
  const auto target = options.has_target ? std::optional<double>(options.target) : std::nullopt;
  const mbkit::report::Report report = mbkit::report::build_report(inputs.logs, target);
  emit(
      options, out, cat(report.runs.size(), report.runs.size() == 1 ? " run" : " runs"),
      [&](std::ostream& stream) { mbkit::report::write_json(report, stream); },
      [&](std::ostream& stream) { mbkit::report::write_csv(report, stream); },
      [&](std::ostream& stream) { mbkit::report::write_table(report, stream); });
  return 0;
}

}  // namespace mbkit::tools::report
