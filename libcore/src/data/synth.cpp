#include "mbkit/data/synth.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::data {
namespace {

constexpr std::uint64_t kBlockRows = 512;

std::uint8_t quantise(double value) {
  return static_cast<std::uint8_t>(std::clamp(std::lround(value), 0L, 255L));
}

// Writes both splits in blocks of `block_rows`: `fill(rng, rows, images, labels)` generates one
// block. Each split draws from its own stream of the seed, so --train does not change the test
// split.
template <class Fill>
void generate_splits(DatasetWriter& writer, ImageShape shape, std::uint64_t train,
                     std::uint64_t test, std::uint64_t seed, std::uint64_t block_rows, Fill fill) {
  std::uint64_t stream = 2;
  for (const auto& [split, count] : {std::pair{kTrain, train}, std::pair{kTest, test}}) {
    Rng rng(seed, stream++);
    writer.begin_split(split, count, shape);
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
    for (std::uint64_t first = 0; first < count; first += block_rows) {
      const std::uint64_t rows = std::min(block_rows, count - first);
      images.resize(rows * shape.pixels());
      labels.resize(rows);
      fill(rng, rows, images, labels);
      writer.append(images, labels);
    }
  }
  writer.finish();
}

// Synthetic pixels do not compress: a dataset larger than the free space of its folder would
// run for hours and then fail on a full disk, so it is refused before anything is written.
void require_room(const std::string& path, ImageShape shape, std::uint64_t train,
                  std::uint64_t test) {
  const std::string directory = fs::parent_directory(path);
  struct statvfs disk {};
  if (::statvfs(directory.c_str(), &disk) != 0) return;  // the writer will name the problem
  const long double bytes = (static_cast<long double>(train) + static_cast<long double>(test)) *
                            (static_cast<long double>(shape.pixels()) + sizeof(std::int32_t));
  const long double room = static_cast<long double>(disk.f_bavail) * disk.f_frsize;
  if (bytes > room) {
    usage_error(strprintf(
        "--train %llu --test %llu: the dataset would take %.3g GB, but %s has "
        "%.3g GB free",
        static_cast<unsigned long long>(train), static_cast<unsigned long long>(test),
        static_cast<double>(bytes / 1e9), directory.c_str(), static_cast<double>(room / 1e9)));
  }
}

}  // namespace

void write_synth_toy(const std::string& path, const ToySynthOptions& options, int deflate_level) {
  if (options.classes < 2) usage_error("toy: --classes must be at least 2");
  if (!std::isfinite(options.separation) || options.separation < 0) {
    usage_error(cat("toy: --separation ", options.separation, " must be a finite value >= 0"));
  }
  const ImageShape shape{1, 10, 10};
  const std::size_t features = shape.pixels();
  const auto classes = static_cast<std::size_t>(options.classes);

  // Class means come from their own stream so that --train/--test do not change them.
  Rng mean_rng(options.seed, 1);
  std::vector<double> class_means(classes * features, 0.0);
  if (options.learnable) {
    for (auto& mean : class_means) mean = mean_rng.normal(0.0, options.separation);
  }
  const double spread =
      options.learnable ? std::sqrt(1.0 + options.separation * options.separation) : 1.0;
  const double scale = 32.0 / spread;

  DatasetHeader header;
  header.name = options.learnable ? "toy-learnable" : "toy";
  header.num_classes = options.classes;
  header.source = options.learnable
                      ? strprintf("synthetic: AMB toy, learnable (separation %g), seed %llu",
                                  options.separation, static_cast<unsigned long long>(options.seed))
                      : strprintf("synthetic: AMB toy, random labels, seed %llu",
                                  static_cast<unsigned long long>(options.seed));
  require_room(path, shape, options.train, options.test);
  DatasetWriter writer(path, std::move(header), deflate_level);
  generate_splits(
      writer, shape, options.train, options.test, options.seed, kBlockRows,
      [&](Rng& rng, std::uint64_t rows, std::vector<std::uint8_t>& images,
          std::vector<std::int32_t>& labels) {
        for (std::uint64_t row = 0; row < rows; ++row) {
          const auto label = static_cast<std::int32_t>(rng.below(classes));
          labels[row] = label;
          const double* mean = class_means.data() + static_cast<std::size_t>(label) * features;
          for (std::size_t f = 0; f < features; ++f) {
            images[row * features + f] = quantise(128.0 + scale * (mean[f] + rng.normal()));
          }
        }
      });
}

void write_synth_images(const std::string& path, const ImagesSynthOptions& options,
                        int deflate_level) {
  if (options.classes < 1) usage_error("images: --classes must be at least 1");
  const ImageShape shape = options.shape;
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1 || shape.channels > 64 ||
      shape.height > 8192 || shape.width > 8192) {
    usage_error(cat("images: --shape ", shape.text(), " is not a usable C,H,W image shape"));
  }
  DatasetHeader header;
  header.name = strprintf("synthetic-%s-%d", shape.text().c_str(), options.classes);
  header.num_classes = options.classes;
  header.source = strprintf("synthetic: uniform random pixels and labels, seed %llu",
                            static_cast<unsigned long long>(options.seed));
  require_room(path, shape, options.train, options.test);
  DatasetWriter writer(path, std::move(header), deflate_level);
  const std::uint64_t block = std::max<std::uint64_t>(1, (8u << 20) / shape.pixels());
  generate_splits(
      writer, shape, options.train, options.test, options.seed, block,
      [&](Rng& rng, std::uint64_t, std::vector<std::uint8_t>& images,
          std::vector<std::int32_t>& labels) {
        for (auto& label : labels) {
          label = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(options.classes)));
        }
        // Eight pixels per 64-bit draw.
        for (std::size_t i = 0; i < images.size(); i += 8) {
          std::uint64_t bits = rng.next_u64();
          for (std::size_t k = 0; k < 8 && i + k < images.size(); ++k, bits >>= 8) {
            images[i + k] = static_cast<std::uint8_t>(bits);
          }
        }
      });
}

}  // namespace mbkit::data
