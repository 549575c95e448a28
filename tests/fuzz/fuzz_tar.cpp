// tar archives, plain or compressed (cifar-10-binary.tar.gz): the members CIFAR needs are read.
#include "fuzz_input.hpp"
#include "mbkit/data/archive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mbkit::fuzz::ScratchFile scratch(".tar.gz");
  const std::string& path = scratch.write({data, size});
  mbkit::fuzz::expect_errors_only([&] {
    (void)mbkit::data::read_tar_members(path,
                                        {"data_batch_1.bin", "test_batch.bin", "batches.meta.txt"});
    (void)mbkit::data::read_maybe_gzipped(path);
  });
  return 0;
}
