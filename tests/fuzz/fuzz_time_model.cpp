// Time-model files (mb-bench-partitions --fit --time-model, read by mb-train-dbsl --time-model).
#include "fuzz_input.hpp"
#include "mbkit/train/time_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mbkit::fuzz::ScratchFile scratch(".h5");
  const std::string& path = scratch.write({data, size});
  mbkit::fuzz::expect_errors_only([&] {
    const auto records = mbkit::train::read_time_model(path);
    (void)mbkit::train::time_model_for_rank(records, 1, path);
  });
  return 0;
}
