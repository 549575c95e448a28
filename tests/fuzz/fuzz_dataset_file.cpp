// Dataset files: opened and validated as every tool opens its --data, a few rows of each split
// read as the loader reads them, then the whole file checked as mb-dataset verify checks it.
#include "fuzz_input.hpp"
#include "mbkit/data/dataset_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mbkit::fuzz::ScratchFile scratch(".h5");
  const std::string& path = scratch.write({data, size});
  mbkit::fuzz::expect_errors_only([&] {
    (void)mbkit::data::looks_like_dataset(path);
    const auto file = mbkit::data::DatasetFile::open(path);
    for (const auto& split : file.info().splits) {
      const std::uint64_t rows = std::min<std::uint64_t>(split.count, 64);
      std::vector<std::uint8_t> pixels(rows * split.shape.pixels());
      file.read_images(split.name, 0, rows, pixels.data());
      std::vector<std::int32_t> labels(rows);
      file.read_labels(split.name, 0, rows, labels.data());
      if (file.has_source_index(split.name)) (void)file.read_source_index(split.name);
    }
  });
  mbkit::fuzz::expect_errors_only([&] { (void)mbkit::data::verify(path); });
  return 0;
}
