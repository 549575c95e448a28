// mb-dataset import-trace: per-worker, per-step times into the HDF5 delay trace that the
// trainers' --induce trace:FILE replays (mbkit/emulation/delay_trace.hpp).
#include <string>
#include <string_view>
#include <vector>

#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/tools/mb_dataset.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::dataset {

int run_import_trace(const ImportTraceOptions& options) {
  const bool pai = options.format == "pai";
  if (!pai && options.format != "csv") {
    usage_error(cat("import-trace: unknown format '", options.format, "' (known: pai, csv)"));
  }
  if (options.whole && !pai) usage_error("import-trace: --whole is for the pai format");
  if (options.output.empty()) usage_error("no output file given (-o FILE)");
  fs::require_replaceable(options.output, options.force);
  const std::vector<std::uint8_t> bytes = fs::read_file(options.input);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  emulation::DelayTrace trace =
      pai ? emulation::parse_pai_trace(
                text, options.input,
                options.whole ? emulation::PaiDelays::kWhole : emulation::PaiDelays::kExcess)
          : emulation::parse_delay_trace_csv(text, options.input);
  if (!pai) trace.source = cat("CSV ", options.input);
  emulation::write_delay_trace(options.output, trace);
  trace.path = options.output;
  log::info(cat("wrote ", trace.describe()));
  return 0;
}

}  // namespace mbkit::tools::dataset
