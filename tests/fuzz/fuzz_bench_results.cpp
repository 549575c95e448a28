// Benchmark result files: mb-bench-bandwidth -o / --append (read by --append, mb-report and
// mb-plot) and mb-bench-partitions -o (read by mb-plot --type partitions). The first byte picks
// which reader gets the rest.
#include "fuzz_input.hpp"
#include "mbkit/results/bandwidth_results.hpp"
#include "mbkit/results/partition_timings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static mbkit::fuzz::ScratchFile scratch(".h5");
  const std::string& path = scratch.write({data + 1, size - 1});
  mbkit::fuzz::expect_errors_only([&] {
    if (data[0] % 2 == 0) {
      (void)mbkit::results::read_runs(path);
    } else {
      (void)mbkit::results::read_partitions_file(path);
    }
  });
  return 0;
}
