// IDX files (MNIST, Fashion-MNIST): the first two bytes say where the image file ends and the
// label file starts; both are parsed, then combined as mb-dataset import idx does.
#include "fuzz_input.hpp"
#include "mbkit/data/parsers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t split = std::min<std::size_t>((std::size_t{data[0]} << 8 | data[1]), size - 2);
  const std::vector<std::uint8_t> images(data + 2, data + 2 + split);
  const std::vector<std::uint8_t> labels(data + 2 + split, data + size);
  mbkit::fuzz::expect_errors_only([&] {
    auto image_array = mbkit::data::parse_idx(images, "images.idx");
    auto label_array = mbkit::data::parse_idx(labels, "labels.idx");
    const auto split_images = mbkit::data::combine_idx(std::move(image_array), "images.idx",
                                                       std::move(label_array), "labels.idx", 10);
    if (split_images.images.size() != split_images.count() * split_images.shape.pixels())
      std::abort();
  });
  return 0;
}
