// The mbkit dataset format, version 1 (documented in mbkit-formats(5)).
//
// One HDF5 file per dataset or shard:
//   /train/images   uint8  (N, C, H, W)  chunked, deflate, Fletcher-32
//   /train/labels   int32  (N)           class ids in [0, num_classes)
//   /test/images, /test/labels           the same for the test split
//   /class_names    strings (num_classes)            optional
//   /train/source_index  int64 (N)                   shards: row in the source file
//   /train/coarse_labels, /coarse_class_names        CIFAR-100 superclasses, optional
// Root attributes: format, format_version, name, num_classes, mean, std, source, created_by,
// and optionally source_files/source_sha256 and the shard_* attributes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mbkit::io {
class File;
}

namespace mbkit::data {

inline constexpr std::string_view kFormatName = "mbkit-dataset";
inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kTrain = "train";
inline constexpr std::string_view kTest = "test";

/// Channels, height, width of one image (stored as C, H, W: channels-first).
struct ImageShape {
  int channels = 0;
  int height = 0;
  int width = 0;

  std::size_t pixels() const {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) *
           static_cast<std::size_t>(width);
  }
  /// "3x32x32".
  std::string text() const;
  bool operator==(const ImageShape&) const = default;
};

/// One input file the dataset was made from, with the SHA-256 of its bytes.
struct SourceFile {
  std::string name;
  std::string sha256;
};

/// Present in shard files: which part of which file this is.
struct ShardInfo {
  int index = 0;
  int count = 1;
  std::string method;         ///< contiguous, strided or random
  std::uint64_t seed = 0;     ///< for random
  std::string source_name;    ///< file name of the dataset that was split
  std::string source_sha256;  ///< SHA-256 of that file's bytes
};

struct SplitSummary {
  std::string name;
  std::uint64_t count = 0;
  ImageShape shape;
};

/// Everything in a dataset file except the pixels and labels.
struct DatasetInfo {
  int format_version = kFormatVersion;
  std::string name;
  int num_classes = 0;
  std::vector<std::string> class_names;  ///< empty when unknown
  std::vector<double> mean;              ///< per channel, of training pixels scaled to [0, 1]
  std::vector<double> std;               ///< per channel (population standard deviation)
  std::string source;
  std::vector<SourceFile> source_files;
  std::optional<ShardInfo> shard;
  std::vector<SplitSummary> splits;  ///< train, then test
  std::string created_by;
  bool has_coarse_labels = false;
  std::vector<std::string> coarse_class_names;  ///< CIFAR-100 superclasses, when present

  const SplitSummary& split(std::string_view split_name) const;
  ImageShape shape() const { return splits.empty() ? ImageShape{} : splits.front().shape; }
};

/// Reads and structurally validates the metadata of an open dataset file: format name and
/// version, datasets present with consistent shapes and types, attributes present and well
/// formed. Throws a data error naming the file and the first problem found.
DatasetInfo read_info(const io::File& file);

/// Result of a full check of a file against the format.
struct VerifyReport {
  std::vector<std::string> problems;  ///< empty when the file is valid
  DatasetInfo info;                   ///< filled when the structure could be read
  std::vector<std::vector<std::uint64_t>> class_counts;  ///< per split, per class
  bool ok() const { return problems.empty(); }
};

/// read_info plus a read of every image and label: labels in range, per-chunk Fletcher-32
/// checksums, shard consistency, and (for non-shards) mean/std recomputed from the pixels.
VerifyReport verify(const std::string& path);

/// True when `path` is an HDF5 file whose root says format = "mbkit-dataset" (cheap check).
bool looks_like_dataset(const std::string& path);

}  // namespace mbkit::data
