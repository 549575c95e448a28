// Checkpoints: read and validated as --resume and mb-eval read them, then checked for NaN.
#include "fuzz_input.hpp"
#include "mbkit/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mbkit::fuzz::ScratchFile scratch(".h5");
  const std::string& path = scratch.write({data, size});
  mbkit::fuzz::expect_errors_only([&] {
    const auto checkpoint = mbkit::train::read_checkpoint(path);
    mbkit::train::require_finite(checkpoint.params, path);
    mbkit::train::require_finite(checkpoint.state, path);
  });
  return 0;
}
