// Metric logs: opened as mb-plot and mb-report open them (SWMR reader, run description, the
// configuration's JSON), then summarised, which reads every column mb-report uses.
#include "fuzz_input.hpp"
#include "mbkit/plot/run_log.hpp"
#include "mbkit/report/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mbkit::fuzz::ScratchFile scratch(".h5");
  const std::string& path = scratch.write({data, size});
  mbkit::fuzz::expect_errors_only([&] {
    const auto log = mbkit::plot::RunLog::open(path);
    (void)log.workers();
    (void)log.straggler_profile();
    (void)mbkit::report::summarize_run(log, 0.5);
    for (const char* table : {"steps", "eval", "workers", "collect", "servers"}) {
      if (log.has_column(table, "step")) (void)log.column(table, "step");
    }
  });
  return 0;
}
