// gzip streams (the published .gz files): inflated in memory, as mb-dataset fetch and import do.
#include "fuzz_input.hpp"
#include "mbkit/data/archive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mbkit::fuzz::expect_errors_only(
      [&] { (void)mbkit::data::gunzip(std::span<const std::uint8_t>(data, size), "file.gz"); });
  return 0;
}
