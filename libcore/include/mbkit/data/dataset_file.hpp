// Writing and reading mbkit dataset files (format in data/format.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mbkit/data/format.hpp"
#include "mbkit/io/hdf5.hpp"

namespace mbkit::data {

/// Per-channel mean and population standard deviation of pixels scaled to [0, 1], accumulated
/// as exact integer sums, so every writer (and verify) of the same pixels gets the same numbers.
class PixelStatistics {
 public:
  explicit PixelStatistics(ImageShape shape);
  /// Adds `rows` images laid out C, H, W.
  void add(const std::uint8_t* images, std::uint64_t rows);
  std::vector<double> mean() const;
  std::vector<double> stddev() const;

 private:
  ImageShape shape_;
  std::vector<std::uint64_t> sum_, square_sum_;
  std::uint64_t pixels_per_channel_ = 0;
};

/// What the writer records at the root, besides the statistics it computes itself.
struct DatasetHeader {
  std::string name;
  int num_classes = 0;
  std::vector<std::string> class_names;         ///< optional; size num_classes when given
  std::vector<std::string> coarse_class_names;  ///< optional (CIFAR-100)
  std::string source;
  std::vector<SourceFile> source_files;
  std::optional<ShardInfo> shard;
  /// Shards keep the normalisation of the file they came from; otherwise the writer computes
  /// mean/std from the training pixels it is given.
  std::optional<std::pair<std::vector<double>, std::vector<double>>> normalization;
};

/// Streams splits into a new dataset file. Labels are checked against num_classes as they
/// arrive; mean and std are computed exactly (integer sums) from the training split.
class DatasetWriter {
 public:
  /// `path` is normally an fs::AtomicOutput temporary. deflate_level is 0..9.
  DatasetWriter(const std::string& path, DatasetHeader header, int deflate_level = 4);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  /// Starts a split of `count` images of `shape`; rows are then appended in order.
  void begin_split(std::string_view split, std::uint64_t count, ImageShape shape,
                   bool with_source_index = false, bool with_coarse_labels = false);
  /// Appends `rows` images (rows * shape.pixels() bytes) and their labels to the open split.
  void append(std::span<const std::uint8_t> images, std::span<const std::int32_t> labels,
              std::span<const std::int64_t> source_index = {},
              std::span<const std::int32_t> coarse_labels = {});
  /// Writes a whole split at once (with a /coarse_labels column when coarse_labels is given).
  void write_split(std::string_view split, ImageShape shape, std::span<const std::uint8_t> images,
                   std::span<const std::int32_t> labels,
                   std::optional<std::span<const std::int32_t>> coarse_labels = std::nullopt);
  /// Checks that every split is complete, writes the root attributes and closes the file.
  void finish();

 private:
  struct OpenSplit;
  void end_split();

  io::File file_;
  DatasetHeader header_;
  int deflate_level_;
  std::unique_ptr<OpenSplit> open_;
  std::vector<std::string> finished_splits_;
  ImageShape train_shape_;
  std::optional<PixelStatistics> train_statistics_;
};

/// A dataset (or shard) file opened for reading.
class DatasetFile {
 public:
  /// Opens and validates the structure (read_info); errors name the file.
  static DatasetFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const DatasetInfo& info() const { return info_; }
  const io::File& file() const { return file_; }

  /// Reads rows [first, first + count) of a split into out (count * pixels bytes).
  void read_images(std::string_view split, std::uint64_t first, std::uint64_t count,
                   std::uint8_t* out) const;
  std::vector<std::int32_t> read_labels(std::string_view split) const;
  /// Labels of rows [first, first + count).
  void read_labels(std::string_view split, std::uint64_t first, std::uint64_t count,
                   std::int32_t* out) const;
  bool has_source_index(std::string_view split) const;
  std::vector<std::int64_t> read_source_index(std::string_view split) const;
  std::vector<std::int32_t> read_coarse_labels(std::string_view split) const;

 private:
  DatasetFile(io::File file, DatasetInfo info, std::string path)
      : file_(std::move(file)), info_(std::move(info)), path_(std::move(path)) {}
  io::File file_;
  DatasetInfo info_;
  std::string path_;
};

}  // namespace mbkit::data
