// CIFAR binary record files (data_batch_N.bin, train.bin) and the class-name lists beside
// them: the first byte picks CIFAR-10 (1 label byte) or CIFAR-100 (2), or the name list.
#include "fuzz_input.hpp"
#include "mbkit/data/parsers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::span<const std::uint8_t> bytes(data + 1, size - 1);
  mbkit::fuzz::expect_errors_only([&] {
    switch (data[0] % 3) {
      case 0: {
        const auto split = mbkit::data::parse_cifar(bytes, 1, 10, 0, "data_batch_1.bin");
        if (split.images.size() != split.count() * split.shape.pixels()) std::abort();
        break;
      }
      case 1: {
        const auto split = mbkit::data::parse_cifar(bytes, 2, 100, 20, "train.bin");
        if (split.coarse_labels.size() != split.labels.size()) std::abort();
        break;
      }
      default:
        (void)mbkit::data::parse_class_name_lines(bytes);
    }
  });
  return 0;
}
