// The data loader: epoch order (every row once, seeded, file order without shuffle), batching
// (partial and dropped last batches), slices and limit, normalisation by the file's statistics,
// augmentation (zero-padded crops and mirrors; per sample, whatever slice loads it), bit-identical
// streams after seek() and for any prefetch depth, errors, and the prefetch thread's failures and
// shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/data/synth.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

const ImageShape kIndexedShape{2, 6, 5};  // H != W, so a swapped axis shows
constexpr int kIndexedClasses = 10;
constexpr std::uint64_t kTestRowOffset = 1000;

std::uint8_t indexed_pixel(std::uint64_t row, std::size_t pixel) {
  const std::size_t plane = kIndexedShape.pixels() / 2;
  if (pixel == 0) return static_cast<std::uint8_t>(1 + row % 255);
  if (pixel == plane) return static_cast<std::uint8_t>(1 + row / 255);
  return static_cast<std::uint8_t>(1 + (row * 11 + pixel * 37) % 255);
}

// Every image says which row it is (the first pixel of each channel holds the row in base 255,
// plus 1) and no stored pixel is 0, so padding shows in crops. Mean 0 and std 1/255 make the
// loader's floats equal the stored bytes. Test rows are numbered from kTestRowOffset.
std::string write_indexed_dataset(const test::TempDir& dir, std::uint64_t train_rows,
                                  std::uint64_t test_rows = 3) {
  DatasetHeader header;
  header.name = "indexed";
  header.num_classes = kIndexedClasses;
  header.source = "unit test";
  header.normalization = {{0.0, 0.0}, {1.0 / 255.0, 1.0 / 255.0}};
  const std::string path = dir.file("indexed.h5");
  DatasetWriter writer(path, header, 1);
  for (const auto& [split, count, offset] : {std::tuple{kTrain, train_rows, std::uint64_t{0}},
                                             std::tuple{kTest, test_rows, kTestRowOffset}}) {
    std::vector<std::uint8_t> images(count * kIndexedShape.pixels());
    std::vector<std::int32_t> labels(count);
    for (std::uint64_t row = 0; row < count; ++row) {
      labels[row] = static_cast<std::int32_t>((offset + row) % kIndexedClasses);
      for (std::size_t p = 0; p < kIndexedShape.pixels(); ++p) {
        images[row * kIndexedShape.pixels() + p] = indexed_pixel(offset + row, p);
      }
    }
    writer.write_split(split, kIndexedShape, images, labels);
  }
  writer.finish();
  return path;
}

std::uint64_t row_of(const Batch& batch, int i) {
  const std::size_t pixels = kIndexedShape.pixels();
  const float* image = batch.images.data() + static_cast<std::size_t>(i) * pixels;
  const auto low = static_cast<std::uint64_t>(std::lround(image[0]));
  const auto high = static_cast<std::uint64_t>(std::lround(image[pixels / 2]));
  return (low - 1) + 255 * (high - 1);
}

std::vector<std::uint64_t> rows_of(const Batch& batch) {
  std::vector<std::uint64_t> rows;
  for (int i = 0; i < batch.size; ++i) {
    rows.push_back(row_of(batch, i));
    EXPECT_EQ(batch.labels[static_cast<std::size_t>(i)],
              static_cast<std::int32_t>(rows.back() % kIndexedClasses));
  }
  return rows;
}

/// crop:PAD,flip (flip alone when padding is 0).
Augmentation crop_and_flip_options(int padding) {
  Augmentation augmentation;
  augmentation.crop_padding = padding;
  augmentation.flip = true;
  return augmentation;
}

LoaderOptions indexed_options(const std::string& path, int batch_size) {
  LoaderOptions options;
  options.path = path;
  options.batch_size = batch_size;
  options.seed = 42;
  return options;
}

/// A copy of a batch, to compare streams after the loader reused its buffers.
struct Snapshot {
  int size;
  std::int64_t epoch, index;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  explicit Snapshot(const Batch& batch)
      : size(batch.size),
        epoch(batch.epoch),
        index(batch.index),
        images(batch.images),
        labels(batch.labels) {}
  bool operator==(const Snapshot&) const = default;
};

std::vector<Snapshot> record(DataLoader& loader, std::int64_t batches) {
  std::vector<Snapshot> stream;
  for (std::int64_t i = 0; i < batches; ++i) stream.emplace_back(loader.next());
  return stream;
}

std::vector<Snapshot> record(const LoaderOptions& options, std::int64_t batches) {
  DataLoader loader(options);
  return record(loader, batches);
}

TEST(DataLoader, WithoutShuffleBatchesFollowTheFileAndEpochsRepeat) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 10), 4);
  options.shuffle = false;
  DataLoader loader(options);
  EXPECT_EQ(loader.rows(), 10u);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  EXPECT_EQ(loader.shape(), kIndexedShape);
  EXPECT_EQ(loader.info().name, "indexed");
  EXPECT_EQ(loader.options().batch_size, 4);

  const std::vector<std::vector<std::uint64_t>> expected = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    for (std::int64_t index = 0; index < 3; ++index) {
      const Batch& batch = loader.next();
      EXPECT_EQ(batch.epoch, epoch);
      EXPECT_EQ(batch.index, index);
      EXPECT_EQ(batch.size, static_cast<int>(expected[static_cast<std::size_t>(index)].size()));
      EXPECT_EQ(batch.images.size(), static_cast<std::size_t>(batch.size) * kIndexedShape.pixels());
      EXPECT_EQ(rows_of(batch), expected[static_cast<std::size_t>(index)]);
    }
  }
}

TEST(DataLoader, DropLastSkipsTheFinalPartialBatch) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 10), 4);
  options.drop_last = true;
  DataLoader loader(options);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<std::uint64_t> seen;
    for (std::int64_t index = 0; index < 2; ++index) {
      const Batch& batch = loader.next();
      EXPECT_EQ(batch.epoch, epoch);
      EXPECT_EQ(batch.index, index);
      EXPECT_EQ(batch.size, 4);
      for (const auto row : rows_of(batch)) EXPECT_TRUE(seen.insert(row).second) << row;
    }
    EXPECT_EQ(seen.size(), 8u);
  }

  // A batch that divides the rows exactly loses nothing.
  options.batch_size = 5;
  EXPECT_EQ(DataLoader(options).batches_per_epoch(), 2);
  options.drop_last = false;
  EXPECT_EQ(DataLoader(options).batches_per_epoch(), 2);
}

TEST(DataLoader, EveryEpochVisitsEveryRowOnceInANewOrder) {
  test::TempDir dir;
  const auto options = indexed_options(write_indexed_dataset(dir, 103), 10);
  DataLoader loader(options);
  ASSERT_EQ(loader.batches_per_epoch(), 11);
  std::vector<std::uint64_t> identity(103);
  std::iota(identity.begin(), identity.end(), std::uint64_t{0});
  std::vector<std::vector<std::uint64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::uint64_t> order;
    for (int index = 0; index < 11; ++index) {
      const auto rows = rows_of(loader.next());
      order.insert(order.end(), rows.begin(), rows.end());
    }
    EXPECT_NE(order, identity) << "epoch " << epoch << " is not shuffled";
    orders.push_back(order);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, identity) << "epoch " << epoch;
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(DataLoader, TheSeedDecidesTheStream) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 50), 8);
  options.augment = crop_and_flip_options(2);
  const auto stream = record(options, 20);
  EXPECT_EQ(record(options, 20), stream);
  options.seed = 43;
  const auto other = record(options, 20);
  ASSERT_EQ(other.size(), stream.size());
  for (std::size_t i = 0; i < stream.size(); ++i) {
    EXPECT_NE(other[i].images, stream[i].images) << "batch " << i;
  }
}

TEST(DataLoader, SeekGivesTheBatchesOfAnUninterruptedStream) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 37), 5);
  options.augment = crop_and_flip_options(2);
  DataLoader reference(options);
  const std::int64_t per_epoch = reference.batches_per_epoch();
  ASSERT_EQ(per_epoch, 8);
  const auto stream = record(reference, 3 * per_epoch);
  const auto at = [&](std::int64_t epoch, std::int64_t index) {
    return stream[static_cast<std::size_t>(epoch * per_epoch + index)];
  };

  for (const int prefetch : {0, 2}) {
    options.prefetch = prefetch;
    DataLoader loader(options);
    loader.seek(1, 3);
    for (std::int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(Snapshot(loader.next()), at(1 + (3 + i) / per_epoch, (3 + i) % per_epoch))
          << "prefetch " << prefetch << " batch " << i;
    }
    loader.seek(0, 0);  // backwards, with batches prepared ahead
    EXPECT_EQ(Snapshot(loader.next()), at(0, 0));
    loader.seek(2, per_epoch - 1);
    EXPECT_EQ(Snapshot(loader.next()), at(2, per_epoch - 1));
    EXPECT_EQ(Snapshot(loader.next()).epoch, 3);
    // Seeks in quick succession leave no stale batch behind.
    for (std::int64_t index = 0; index < per_epoch; ++index) loader.seek(1, index);
    EXPECT_EQ(Snapshot(loader.next()), at(1, per_epoch - 1));
    EXPECT_EQ(Snapshot(loader.next()), at(2, 0));
  }
  EXPECT_MBKIT_ERROR(reference.seek(0, per_epoch), ExitCode::kFailure, "an epoch has 8 batches");
  EXPECT_MBKIT_ERROR(reference.seek(-1, 0), ExitCode::kFailure, "seek to batch 0 of epoch -1");
}

TEST(DataLoader, PrefetchDepthDoesNotChangeTheStream) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 61), 7);
  options.augment = crop_and_flip_options(4);
  options.prefetch = 0;
  const auto inline_stream = record(options, 30);
  for (const int prefetch : {1, 3}) {
    options.prefetch = prefetch;
    EXPECT_EQ(record(options, 30), inline_stream) << "prefetch " << prefetch;
  }
}

TEST(DataLoader, TheBatchStaysValidWhileThePrefetchThreadRunsAhead) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 40), 4);
  options.prefetch = 3;
  DataLoader loader(options);
  const Batch& batch = loader.next();
  const Snapshot copy(batch);
  // Give the thread time to fill (and, were it wrong, overwrite) every buffer it has.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(Snapshot(batch), copy);
  EXPECT_EQ(loader.next().index, 1);
}

TEST(DataLoader, CountsItsThreadsCpuForEveryBatchItPrepares) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 400), 100);
  options.augment = crop_and_flip_options(4);
  options.prefetch = 2;
  DataLoader loader(options);
  for (int i = 0; i < 20; ++i) loader.next();
  // The 20 batches taken and up to 2 ahead (the last may still be in the making).
  const auto cpu = loader.producer_cpu();
  EXPECT_GE(cpu.batches, 20);
  EXPECT_LE(cpu.batches, 22);
  EXPECT_GT(cpu.seconds, 0);
  // Inline, the caller's thread prepares them: nothing beside it.
  options.prefetch = 0;
  DataLoader inline_loader(options);
  for (int i = 0; i < 5; ++i) inline_loader.next();
  EXPECT_EQ(inline_loader.producer_cpu().batches, 0);
  EXPECT_EQ(inline_loader.producer_cpu().seconds, 0.0);
}

TEST(DataLoader, NormalisesWithTheFileMeanAndStd) {
  test::TempDir dir;
  ImagesSynthOptions synth;
  synth.shape = {3, 5, 7};
  synth.classes = 4;
  synth.train = 9;
  synth.test = 2;
  write_synth_images(dir.file("images.h5"), synth, 1);
  const auto file = DatasetFile::open(dir.file("images.h5"));
  const auto& info = file.info();
  const std::size_t pixels = synth.shape.pixels(), plane = pixels / 3;
  std::vector<std::uint8_t> stored(synth.train * pixels);
  file.read_images(kTrain, 0, synth.train, stored.data());
  const auto labels = file.read_labels(kTrain);

  LoaderOptions options;
  options.path = dir.file("images.h5");
  options.batch_size = 9;
  options.shuffle = false;
  DataLoader loader(options);
  const Batch& batch = loader.next();
  ASSERT_EQ(batch.size, 9);
  EXPECT_EQ(batch.labels, labels);
  for (std::size_t i = 0; i < stored.size(); ++i) {
    const std::size_t channel = i % pixels / plane;
    const double expected = (stored[i] / 255.0 - info.mean[channel]) / info.std[channel];
    ASSERT_NEAR(batch.images[i], expected, 1e-5 * std::max(1.0, std::fabs(expected))) << i;
  }
}

TEST(DataLoader, AStdOfZeroCountsAsOne) {
  test::TempDir dir;
  DatasetHeader header;
  header.name = "flat";
  header.num_classes = 2;
  header.source = "unit test";
  header.normalization = {{0.5, 0.25}, {0.0, 0.5}};
  const ImageShape shape{2, 1, 2};
  const std::vector<std::uint8_t> images = {0, 255, 51, 102};
  const std::vector<std::int32_t> labels = {1};
  DatasetWriter writer(dir.file("flat.h5"), header, 1);
  writer.write_split(kTrain, shape, images, labels);
  writer.write_split(kTest, shape, images, labels);
  writer.finish();

  LoaderOptions options;
  options.path = dir.file("flat.h5");
  options.batch_size = 1;
  DataLoader loader(options);
  const Batch& batch = loader.next();
  EXPECT_FLOAT_EQ(batch.images[0], -0.5f);
  EXPECT_FLOAT_EQ(batch.images[1], 0.5f);
  EXPECT_FLOAT_EQ(batch.images[2], (0.2f - 0.25f) / 0.5f);
  EXPECT_FLOAT_EQ(batch.images[3], (0.4f - 0.25f) / 0.5f);
}

TEST(DataLoader, SlicesPartitionTheSplit) {
  test::TempDir dir;
  const auto path = write_indexed_dataset(dir, 103, 10);
  for (const auto& [split, total, offset] :
       {std::tuple{"train", std::uint64_t{103}, std::uint64_t{0}},
        std::tuple{"test", std::uint64_t{10}, kTestRowOffset}}) {
    std::vector<std::uint64_t> all;
    for (int slice = 0; slice < 4; ++slice) {
      auto options = indexed_options(path, 6);
      options.split = split;
      options.slice_index = slice;
      options.slice_count = 4;
      DataLoader loader(options);
      const std::uint64_t first = slice * total / 4, end = (slice + 1) * total / 4;
      ASSERT_EQ(loader.rows(), end - first) << split << " slice " << slice;
      std::vector<std::uint64_t> rows;
      for (std::int64_t index = 0; index < loader.batches_per_epoch(); ++index) {
        const auto batch_rows = rows_of(loader.next());
        rows.insert(rows.end(), batch_rows.begin(), batch_rows.end());
      }
      std::sort(rows.begin(), rows.end());
      std::vector<std::uint64_t> expected(end - first);
      std::iota(expected.begin(), expected.end(), offset + first);
      EXPECT_EQ(rows, expected) << split << " slice " << slice;
      all.insert(all.end(), rows.begin(), rows.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "slices overlap";
    EXPECT_EQ(all.size(), total);
  }
}

TEST(DataLoader, SlicesShuffleIndependently) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 40), 20);
  options.slice_count = 2;
  const auto first_slice = rows_of(DataLoader(options).next());
  options.slice_index = 1;
  auto second_slice = rows_of(DataLoader(options).next());
  for (auto& row : second_slice) row -= 20;
  EXPECT_NE(first_slice, second_slice) << "both slices drew the same permutation";
}

TEST(DataLoader, LimitKeepsTheFirstRowsOfTheSlice) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 100), 4);
  options.shuffle = false;
  options.slice_index = 1;
  options.slice_count = 2;
  options.limit = 7;
  DataLoader loader(options);
  EXPECT_EQ(loader.rows(), 7u);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  EXPECT_EQ(rows_of(loader.next()), (std::vector<std::uint64_t>{50, 51, 52, 53}));
  EXPECT_EQ(rows_of(loader.next()), (std::vector<std::uint64_t>{54, 55, 56}));
  EXPECT_EQ(loader.next().epoch, 1);

  options.limit = 1000;
  EXPECT_EQ(DataLoader(options).rows(), 50u);
}

// Augmented images next to the same batches unaugmented: the order does not depend on
// augmentation, so image i of both batches comes from the same row.
struct AugmentedPairs {
  std::vector<std::vector<float>> originals, augmented;
};

AugmentedPairs augmented_pairs(const std::string& path, int padding, std::int64_t batches) {
  auto options = indexed_options(path, 16);
  DataLoader plain(options);
  options.augment = crop_and_flip_options(padding);
  DataLoader augmenting(options);
  AugmentedPairs pairs;
  const std::size_t pixels = kIndexedShape.pixels();
  for (std::int64_t b = 0; b < batches; ++b) {
    const Batch& original = plain.next();
    const Batch& augmented = augmenting.next();
    EXPECT_EQ(original.labels, augmented.labels);
    for (int i = 0; i < original.size; ++i) {
      const auto offset = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * pixels);
      const auto size = static_cast<std::ptrdiff_t>(pixels);
      pairs.originals.emplace_back(original.images.begin() + offset,
                                   original.images.begin() + offset + size);
      pairs.augmented.emplace_back(augmented.images.begin() + offset,
                                   augmented.images.begin() + offset + size);
    }
  }
  return pairs;
}

/// Crop with the window at (dy, dx) of the image padded by `padding` zeros, then maybe mirror.
std::vector<float> crop_and_flip(const std::vector<float>& image, int padding, int dy, int dx,
                                 bool flip) {
  const int height = kIndexedShape.height, width = kIndexedShape.width;
  std::vector<float> out(image.size(), 0.0f);
  for (int c = 0; c < kIndexedShape.channels; ++c) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        const int source_y = y + dy - padding;
        const int source_x = (flip ? width - 1 - x : x) + dx - padding;
        if (source_y < 0 || source_y >= height || source_x < 0 || source_x >= width) continue;
        out[static_cast<std::size_t>((c * height + y) * width + x)] =
            image[static_cast<std::size_t>((c * height + source_y) * width + source_x)];
      }
    }
  }
  return out;
}

TEST(DataLoader, WithoutPaddingAugmentationIsIdentityOrMirror) {
  test::TempDir dir;
  const auto pairs = augmented_pairs(write_indexed_dataset(dir, 64), 0, 4);
  int mirrored = 0;
  for (std::size_t i = 0; i < pairs.originals.size(); ++i) {
    const auto& original = pairs.originals[i];
    const bool flipped = pairs.augmented[i] == crop_and_flip(original, 0, 0, 0, true);
    EXPECT_TRUE(flipped || pairs.augmented[i] == original) << "image " << i;
    mirrored += flipped ? 1 : 0;
  }
  // 64 fair coins: all heads or all tails would point at a broken flip.
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, 64);
}

TEST(DataLoader, AugmentationCropsFromTheZeroPaddedImage) {
  test::TempDir dir;
  constexpr int kPadding = 2;
  const auto pairs = augmented_pairs(write_indexed_dataset(dir, 128), kPadding, 8);
  std::set<std::pair<int, int>> windows;
  int with_padding = 0;
  for (std::size_t i = 0; i < pairs.originals.size(); ++i) {
    bool matched = false;
    for (int dy = 0; dy <= 2 * kPadding && !matched; ++dy) {
      for (int dx = 0; dx <= 2 * kPadding && !matched; ++dx) {
        for (const bool flip : {false, true}) {
          if (pairs.augmented[i] != crop_and_flip(pairs.originals[i], kPadding, dy, dx, flip)) {
            continue;
          }
          matched = true;
          windows.insert({dy, dx});
          break;
        }
      }
    }
    EXPECT_TRUE(matched) << "image " << i << " is no padded crop of its row";
    // Stored pixels are never 0, so zeros are padding; an off-centre window must show some.
    const auto zeros = std::count(pairs.augmented[i].begin(), pairs.augmented[i].end(), 0.0f);
    if (zeros > 0) ++with_padding;
  }
  EXPECT_GT(with_padding, 64) << "most of 25 windows include padding";
  EXPECT_GE(windows.size(), 20u) << "crop offsets should cover the 5 x 5 windows";
  EXPECT_TRUE(windows.count({0, 0}) && windows.count({4, 4})) << "corners never drawn";
}

TEST(DataLoader, PaddingIsBlackBeforeNormalisation) {
  test::TempDir dir;
  ImagesSynthOptions synth;
  synth.shape = {3, 4, 4};
  synth.classes = 2;
  synth.train = 64;
  synth.test = 1;
  write_synth_images(dir.file("images.h5"), synth, 1);
  LoaderOptions options;
  options.path = dir.file("images.h5");
  options.batch_size = 64;
  options.augment =
      crop_and_flip_options(4);  // as wide as the image: about 80% of the output is padding
  DataLoader loader(options);
  const auto& info = loader.info();
  const Batch& batch = loader.next();
  const std::size_t plane = 16;
  std::size_t black = 0;
  for (std::size_t image = 0; image < 64; ++image) {
    for (std::size_t c = 0; c < 3; ++c) {
      const auto black_value = static_cast<float>((0.0 - info.mean[c]) / info.std[c]);
      const float* values = batch.images.data() + (image * 3 + c) * plane;
      black += static_cast<std::size_t>(std::count(values, values + plane, black_value));
    }
  }
  // Random pixels are 0 once in 256; padding makes black the majority.
  EXPECT_GT(black, batch.images.size() / 2);
}

// Each sample's augmentation is drawn from (seed, epoch, row in the split): the same whichever
// slice (rank) holds the row, whatever the batch size and prefetch depth; another epoch draws
// again.
TEST(DataLoader, AugmentationIsAFunctionOfSeedEpochAndRowOnly) {
  test::TempDir dir;
  const auto path = write_indexed_dataset(dir, 40);
  auto options = indexed_options(path, 40);
  options.shuffle = false;
  options.augment = parse_augmentation("crop:2,shift:0.3,flip");
  options.prefetch = 0;
  DataLoader whole(options);
  const Snapshot epoch0(whole.next());
  const Snapshot epoch1(whole.next());
  ASSERT_EQ(epoch1.epoch, 1);
  const std::size_t pixels = kIndexedShape.pixels();
  const auto image = [&](const Snapshot& batch, std::size_t i) {
    return std::vector<float>(batch.images.begin() + static_cast<std::ptrdiff_t>(i * pixels),
                              batch.images.begin() + static_cast<std::ptrdiff_t>((i + 1) * pixels));
  };
  std::size_t changed = 0;
  for (std::size_t i = 0; i < 40; ++i) changed += image(epoch0, i) != image(epoch1, i) ? 1 : 0;
  EXPECT_GT(changed, 35u) << "another epoch should augment (almost) every image otherwise";

  for (const int prefetch : {0, 2}) {
    auto sliced = options;
    sliced.batch_size = 3;
    sliced.slice_count = 4;
    sliced.slice_index = 2;  // rows 20..29
    sliced.prefetch = prefetch;
    DataLoader loader(sliced);
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      std::size_t row = 20;
      for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
        const Snapshot batch(loader.next());
        for (std::size_t i = 0; i < static_cast<std::size_t>(batch.size); ++i, ++row) {
          EXPECT_EQ(image(batch, i), image(epoch == 0 ? epoch0 : epoch1, row))
              << "row " << row << " epoch " << epoch << " prefetch " << prefetch;
        }
      }
      EXPECT_EQ(row, 30u);
    }
  }
}

TEST(DataLoader, BadOptionsAreUsageErrorsNamingTheOption) {
  test::TempDir dir;
  const auto path = write_indexed_dataset(dir, 10, 2);
  auto options = indexed_options(path, 0);
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--batch-size 0 must be at least 1");
  options.batch_size = 4;
  options.slice_count = 3;
  options.slice_index = 3;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--slice-index 3 is outside [0, 3)");
  options.slice_index = -1;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--slice-index -1 is outside [0, 3)");
  options.slice_index = 0;
  options.slice_count = 0;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--slice-count 0 must be at least 1");
  options.slice_count = 11;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "has only 10 train rows");
  options.slice_count = 3;
  options.split = "test";
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "has only 2 test rows");
  options.slice_count = 1;
  options.split = "validation";
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--split 'validation'");
  options.split = "train";
  options.batch_size = 11;
  options.drop_last = true;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "not one full batch");
  options.drop_last = false;
  options.prefetch = -1;
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kUsage, "--prefetch -1");
}

TEST(DataLoader, BadFilesAreDataErrorsNamingTheFile) {
  test::TempDir dir;
  auto options = indexed_options(dir.file("missing.h5"), 4);
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kBadData, dir.file("missing.h5"));
  test::write_text(dir.file("text.h5"), "not hdf5\n");
  options.path = dir.file("text.h5");
  EXPECT_MBKIT_ERROR(DataLoader{options}, ExitCode::kBadData, dir.file("text.h5"));
}

// Removes the fault hook however the test ends.
struct FaultHookGuard {
  explicit FaultHookGuard(detail::LoaderFaultHook hook) {
    detail::set_loader_fault_hook(std::move(hook));
  }
  ~FaultHookGuard() { detail::set_loader_fault_hook({}); }
  FaultHookGuard(const FaultHookGuard&) = delete;
  FaultHookGuard& operator=(const FaultHookGuard&) = delete;
};

TEST(DataLoader, PreparationErrorsReachNextAndSeekRecovers) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 20), 4);
  for (const int prefetch : {0, 2}) {
    options.prefetch = prefetch;
    const FaultHookGuard guard([](std::int64_t epoch, std::int64_t index) {
      if (epoch == 0 && index == 2) fail("injected failure at batch 2");
    });
    DataLoader loader(options);
    EXPECT_EQ(loader.next().index, 0);
    EXPECT_EQ(loader.next().index, 1);
    EXPECT_MBKIT_ERROR(loader.next(), ExitCode::kFailure, "injected failure at batch 2");
    EXPECT_MBKIT_ERROR(loader.next(), ExitCode::kFailure, "injected failure at batch 2");
    loader.seek(0, 3);
    EXPECT_EQ(loader.next().index, 3);
    EXPECT_EQ(loader.next().index, 4);
    EXPECT_EQ(loader.next().epoch, 1);
  }
}

TEST(DataLoader, DestructionStopsThePrefetchThreadInAnyState) {
  test::TempDir dir;
  auto options = indexed_options(write_indexed_dataset(dir, 30), 3);
  options.prefetch = 3;
  { DataLoader untouched(options); }
  {
    DataLoader busy(options);
    busy.next();
    busy.seek(4, 2);
  }
  {
    const FaultHookGuard guard([](std::int64_t, std::int64_t index) {
      if (index == 1) fail("injected");
    });
    DataLoader failed(options);
    EXPECT_EQ(failed.next().index, 0);
    EXPECT_THROW(failed.next(), Error);
  }
  SUCCEED();  // reaching here means no destructor hung
}

}  // namespace
}  // namespace mbkit::data
