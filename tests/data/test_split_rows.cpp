// One split's rows shared by many loaders (SplitRows, LoaderOptions::rows, batch_buffer and
// order_buffer, the emulated workers' data): a loader on the shared rows gives the batches of a
// loader that reads its slice from the file, for every slice, epoch, order and augmentation;
// loaders that share a batch buffer fill the same memory; loaders that share an order buffer,
// read in turns, give the batches of loaders with orders of their own; the shared rows are
// checked as a file's are.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "mbkit/data/loader.hpp"
#include "mbkit/data/synth.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

std::string write_toy(const test::TempDir& dir, std::uint64_t train = 103) {
  ToySynthOptions options;
  options.train = train;
  options.test = 17;
  options.learnable = true;
  const std::string path = dir.file("toy.h5");
  write_synth_toy(path, options, 0);
  return path;
}

LoaderOptions slice_options(const std::string& path, int slice, int slices, int batch) {
  LoaderOptions options;
  options.path = path;
  options.batch_size = batch;
  options.seed = 7;
  options.slice_index = slice;
  options.slice_count = slices;
  options.prefetch = 0;
  return options;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  ASSERT_EQ(a.size, b.size);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.images, b.images);  // floats compared exactly: the same table, the same bytes
}

TEST(SplitRows, SlicesGiveTheBatchesOfTheFile) {
  test::TempDir dir;
  const std::string path = write_toy(dir);
  const auto rows = load_split_rows(path, std::string(kTrain));
  EXPECT_EQ(rows->count, 103u);
  for (const auto& [slices, batch, shuffle, augment] :
       {std::tuple{1, 16, true, false}, std::tuple{7, 4, true, false},
        std::tuple{7, 4, false, false}, std::tuple{13, 3, true, true}}) {
    for (int slice = 0; slice < slices; ++slice) {
      LoaderOptions from_file = slice_options(path, slice, slices, batch);
      from_file.shuffle = shuffle;
      if (augment) from_file.augment = parse_augmentation("flip");
      LoaderOptions shared = from_file;
      shared.rows = rows;
      DataLoader a(from_file), b(shared);
      ASSERT_EQ(a.rows(), b.rows());
      ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
      for (std::int64_t i = 0; i < 3 * a.batches_per_epoch(); ++i) {
        SCOPED_TRACE(testing::Message() << slices << " slices, slice " << slice << ", batch " << i);
        expect_same_batch(a.next(), b.next());
      }
      a.seek(1, 0);
      b.seek(1, 0);
      expect_same_batch(a.next(), b.next());
    }
  }
}

TEST(SplitRows, ALimitedSplitIsSlicedAsTheFileWouldBe) {
  test::TempDir dir;
  const std::string path = write_toy(dir);
  const auto rows = load_split_rows(path, std::string(kTest), 10);
  EXPECT_EQ(rows->count, 10u);
  for (int slice = 0; slice < 3; ++slice) {
    LoaderOptions from_file = slice_options(path, slice, 3, 2);
    from_file.split = std::string(kTest);
    from_file.split_limit = 10;
    from_file.shuffle = false;
    LoaderOptions shared = from_file;
    shared.rows = rows;
    DataLoader a(from_file), b(shared);
    for (std::int64_t i = 0; i < a.batches_per_epoch(); ++i) expect_same_batch(a.next(), b.next());
  }
}

TEST(SplitRows, LoadersSharingABatchBufferFillTheSameMemory) {
  test::TempDir dir;
  const std::string path = write_toy(dir);
  const auto rows = load_split_rows(path, std::string(kTrain));
  const auto buffer = std::make_shared<Batch>();
  LoaderOptions first = slice_options(path, 0, 2, 8), second = slice_options(path, 1, 2, 8);
  first.rows = second.rows = rows;
  first.batch_buffer = second.batch_buffer = buffer;
  DataLoader a(first), b(second);
  const Batch& from_a = a.next();
  const std::vector<std::int32_t> labels_of_a = from_a.labels;
  const Batch& from_b = b.next();
  EXPECT_EQ(&from_a, buffer.get());
  EXPECT_EQ(&from_b, buffer.get());
  // The buffer now holds b's batch, as a loader of its own would have given it.
  DataLoader alone(slice_options(path, 1, 2, 8));
  expect_same_batch(from_b, alone.next());
  DataLoader alone_a(slice_options(path, 0, 2, 8));
  EXPECT_EQ(alone_a.next().labels, labels_of_a);
}

TEST(SplitRows, LoadersSharingAnOrderBufferGiveTheBatchesOfTheirOwn) {
  test::TempDir dir;
  const std::string path = write_toy(dir);
  const auto rows = load_split_rows(path, std::string(kTrain));
  const auto order = std::make_shared<EpochOrder>();
  // As emulated DBSL workers (the whole split, an epoch each), and beside them loaders whose
  // order differs only by seed, slice or rows at the same epoch: the order held is one.
  std::vector<LoaderOptions> options = {slice_options(path, 0, 1, 8), slice_options(path, 0, 1, 5),
                                        slice_options(path, 0, 2, 8), slice_options(path, 1, 2, 8),
                                        slice_options(path, 0, 1, 8)};
  options[4].seed = 8;
  std::vector<std::unique_ptr<DataLoader>> shared, alone;
  for (LoaderOptions o : options) {
    o.rows = rows;
    alone.push_back(std::make_unique<DataLoader>(o));
    o.order_buffer = order;
    shared.push_back(std::make_unique<DataLoader>(o));
  }
  // Rounds interleaved: each loader reads two batches of its epoch, then the next loader; an
  // epoch is read again later (the order held is then another's) and runs into the next one.
  const std::vector<std::int64_t> epochs = {3, 4, 3, 3, 3};
  for (int round = 0; round < 3; ++round) {
    for (std::size_t k = 0; k < shared.size(); ++k) {
      const std::int64_t epoch = epochs[k] + (round == 2 ? 0 : round);
      const std::int64_t index = round == 2 ? shared[k]->batches_per_epoch() - 1 : 0;
      shared[k]->seek(epoch, index);
      alone[k]->seek(epoch, index);
      for (int b = 0; b < 2; ++b) {
        SCOPED_TRACE(testing::Message()
                     << "round " << round << ", loader " << k << ", batch " << b);
        expect_same_batch(shared[k]->next(), alone[k]->next());
      }
    }
  }
  // The last batch drawn: loader 4's, the first batch of epoch 4 of the whole split, seed 8.
  EXPECT_EQ(order->epoch, 4);
  EXPECT_EQ(order->seed, 8u);
  EXPECT_EQ(order->rows.size(), 103u);
}

TEST(SplitRows, MoreSlicesThanRowsNameTheWorkers) {
  test::TempDir dir;
  const std::string path = write_toy(dir, 5);
  LoaderOptions options = slice_options(path, 0, 6, 1);
  options.rows = load_split_rows(path, std::string(kTrain));
  const ExitCode code = test::code_of([&] { DataLoader loader(options); });
  EXPECT_EQ(code, ExitCode::kUsage);
}

TEST(SplitRows, AMissingSplitIsAUsageError) {
  test::TempDir dir;
  const std::string path = write_toy(dir);
  EXPECT_EQ(test::code_of([&] { load_split_rows(path, "validation"); }), ExitCode::kUsage);
}

}  // namespace
}  // namespace mbkit::data
