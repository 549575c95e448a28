// Batches for training and evaluation from a dataset or shard file.
//
// The loader reads its rows of one split into memory once (as uint8; a slice of the file by
// hyperslab when slice_count > 1), and a background thread prepares the next batches: gather
// in the epoch's order, normalisation (x / 255 - mean) / std per channel with the file's mean and
// std (a std of 0 counts as 1), and optional augmentation (mbkit/data/augment.hpp: crop, shift,
// flip). The order is a pure function of (seed, slice, epoch) and each sample's augmentation of
// (seed, epoch, its row in the split), so a
// loader that seeks to (epoch, batch) produces exactly the batches it would have produced
// there: resume is bit-identical whatever the thread timing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/data/augment.hpp"
#include "mbkit/data/format.hpp"

namespace mbkit::data {

struct Batch;
struct EpochOrder;

/// One split's rows, loaded once into memory (as stored, uint8) and shared by the loaders that
/// read slices of it: the emulated workers of one process (mbkit/train/emulated_workers.hpp),
/// thousands of slices of one file, each loader keeping only its slice's order (or one order for
/// all: LoaderOptions::order_buffer).
struct SplitRows {
  std::string path;
  std::string split;
  DatasetInfo info;
  ImageShape shape;
  std::uint64_t count = 0;  ///< rows of the split (after split_limit)
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> labels;
  /// normalised[c * 256 + x] = (x / 255 - mean[c]) / std[c], computed in double: a table
  /// lookup per pixel is as fast as a multiply-add and gives the same floats on every build.
  std::vector<float> normalised;
};

/// Reads the first `split_limit` rows (0: all) of `split` of `path`; errors as DataLoader's.
std::shared_ptr<const SplitRows> load_split_rows(const std::string& path, const std::string& split,
                                                 std::uint64_t split_limit = 0);

struct LoaderOptions {
  std::string path;
  std::string split = "train";
  int batch_size = 64;
  std::uint64_t seed = 0;
  bool shuffle = true;     ///< a new permutation every epoch
  bool drop_last = false;  ///< skip the final partial batch of each epoch
  Augmentation augment;    ///< none by default
  int slice_index = 0;     ///< this reader takes rows [i N / n, (i + 1) N / n) of the split
  int slice_count = 1;
  std::uint64_t limit = 0;  ///< use only the first `limit` rows of this slice (0 = all)
  /// Slice only the first `split_limit` rows of the split (0 = all): ranks sharing out the
  /// first N rows.
  std::uint64_t split_limit = 0;
  int prefetch = 2;  ///< batches prepared ahead by the background thread (0 = inline)
  /// The split's rows already in memory (load_split_rows of `path`, `split`, `split_limit`):
  /// the loader reads its slice there instead of the file.
  std::shared_ptr<const SplitRows> rows;
  /// With prefetch 0: the buffer next() fills, shared by loaders that are read one after
  /// another (a batch is used before the next loader draws), so that a thousand loaders hold
  /// one batch, not a thousand.
  std::shared_ptr<Batch> batch_buffer;
  /// With prefetch 0: the epoch order next() draws from, shared like batch_buffer by loaders
  /// read one after another. Emulated DBSL workers each read a few batches of an epoch of
  /// their own over the whole split: sharing, they hold one order of the split, not one each
  /// (a loader draws the order again when the one held is not its own: the same rows).
  std::shared_ptr<EpochOrder> order_buffer;
};

/// The permutation of one epoch of a loader's rows, a pure function of (seed, slice_index,
/// rows, epoch), kept by whoever prepares batches so that it is drawn once per epoch, not once
/// per batch.
struct EpochOrder {
  std::uint64_t seed = 0;
  int slice_index = 0;
  std::int64_t epoch = -1;  ///< none drawn yet
  std::vector<std::uint64_t> rows;
};

struct Batch {
  int size = 0;               ///< rows in this batch (the last one may be smaller)
  std::vector<float> images;  ///< size * C * H * W, NCHW, normalised
  std::vector<std::int32_t> labels;
  std::int64_t epoch = 0;
  std::int64_t index = 0;  ///< batch number within the epoch
};

class DataLoader {
 public:
  /// Opens the file and loads this loader's rows; errors name the file (data errors, exit 3)
  /// or the option (usage errors: batch_size < 1, slice out of range, more slices than rows,
  /// an unknown split, drop_last with fewer rows than one batch).
  explicit DataLoader(LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const DatasetInfo& info() const;
  const LoaderOptions& options() const;
  ImageShape shape() const;
  /// Rows this loader serves (after slicing and limit).
  std::uint64_t rows() const;
  std::int64_t batches_per_epoch() const;

  /// Positions the stream so that the next batch is batch `index` of `epoch`
  /// (0 <= index < batches_per_epoch()).
  void seek(std::int64_t epoch, std::int64_t index);
  /// The next batch (epochs follow each other without end). The reference stays valid until
  /// the next call to next() or seek(). Errors of the background thread are rethrown here.
  const Batch& next();
  /// Samples of the batch the next call to next() returns (a loader without prefetch: the
  /// emulated workers', whose rounds are timed before they compute).
  int next_batch_size() const;
  /// Samples of the batch `ahead` batches after the one the next call to next() returns (0:
  /// that one), with or without prefetch: K-batch-sync times a worker's batches before it
  /// computes them.
  int batch_size_ahead(std::int64_t ahead) const;
  /// A loader without prefetch: prepares the batch the next call to next() returns, which then
  /// returns it as it is. The emulated workers call it on a helper thread for the worker after
  /// the one computing (each batch is the same whichever thread prepares it).
  void prepare_next();

  /// The background thread's CPU seconds preparing batches so far, and how many it prepared
  /// (0 and 0 with prefetch 0).
  struct ProducerCpu {
    double seconds = 0;
    std::int64_t batches = 0;
  };
  ProducerCpu producer_cpu() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
/// For tests: called before each batch is prepared (on the prefetch thread when there is one),
/// so a test can make preparation fail. Loaders constructed afterwards take a copy; an empty
/// function removes it.
using LoaderFaultHook = std::function<void(std::int64_t epoch, std::int64_t index)>;
void set_loader_fault_hook(LoaderFaultHook hook);
}  // namespace detail

}  // namespace mbkit::data
