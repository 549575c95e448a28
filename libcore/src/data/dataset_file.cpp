#include "mbkit/data/dataset_file.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/util/check.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::data {

PixelStatistics::PixelStatistics(ImageShape shape)
    : shape_(shape),
      sum_(static_cast<std::size_t>(shape.channels), 0),
      square_sum_(static_cast<std::size_t>(shape.channels), 0) {}

void PixelStatistics::add(const std::uint8_t* images, std::uint64_t rows) {
  const auto channels = static_cast<std::size_t>(shape_.channels);
  const std::size_t plane = shape_.pixels() / channels;
  for (std::uint64_t row = 0; row < rows; ++row) {
    const std::uint8_t* image = images + row * shape_.pixels();
    for (std::size_t c = 0; c < channels; ++c) {
      std::uint64_t s = 0, s2 = 0;
      for (std::size_t i = 0; i < plane; ++i) {
        const std::uint64_t v = image[c * plane + i];
        s += v;
        s2 += v * v;
      }
      sum_[c] += s;
      square_sum_[c] += s2;
    }
  }
  pixels_per_channel_ += rows * plane;
}

std::vector<double> PixelStatistics::mean() const {
  std::vector<double> mean(sum_.size(), 0.0);
  if (pixels_per_channel_ == 0) return mean;
  for (std::size_t c = 0; c < sum_.size(); ++c) {
    mean[c] = static_cast<double>(static_cast<long double>(sum_[c]) /
                                  static_cast<long double>(pixels_per_channel_) / 255.0L);
  }
  return mean;
}

std::vector<double> PixelStatistics::stddev() const {
  std::vector<double> stddev(sum_.size(), 0.0);
  if (pixels_per_channel_ == 0) return stddev;
  const auto n = static_cast<long double>(pixels_per_channel_);
  for (std::size_t c = 0; c < sum_.size(); ++c) {
    // Sums are exact integers; long double keeps the variance's cancellation harmless.
    const long double m = static_cast<long double>(sum_[c]) / n;
    const long double variance = static_cast<long double>(square_sum_[c]) / n - m * m;
    stddev[c] = static_cast<double>(std::sqrt(std::max(0.0L, variance)) / 255.0L);
  }
  return stddev;
}

namespace {

// About 1 MiB of pixels per chunk: big enough for deflate to work well, small enough that a
// rank reading its slice does not decompress much it does not need.
std::vector<hsize_t> image_chunk(std::uint64_t count, ImageShape shape) {
  const std::uint64_t rows =
      std::clamp<std::uint64_t>((1u << 20) / std::max<std::size_t>(1, shape.pixels()), 1, count);
  return {rows, static_cast<hsize_t>(shape.channels), static_cast<hsize_t>(shape.height),
          static_cast<hsize_t>(shape.width)};
}

io::StorageOptions column_storage(std::uint64_t count, int deflate_level) {
  io::StorageOptions storage;
  if (count == 0) return storage;  // fixed-size chunked datasets need a chunk of at least 1
  storage.chunk = {std::min<std::uint64_t>(count, 1u << 16)};
  storage.deflate_level = deflate_level;
  storage.shuffle = true;
  storage.fletcher32 = true;
  return storage;
}

}  // namespace

struct DatasetWriter::OpenSplit {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t written = 0;
  ImageShape shape;
  io::Group group;
  io::Dataset images;
  io::Dataset labels;
  std::optional<io::Dataset> source_index;
  std::optional<io::Dataset> coarse_labels;
};

DatasetWriter::DatasetWriter(const std::string& path, DatasetHeader header, int deflate_level)
    : file_(io::File::create(path)), header_(std::move(header)), deflate_level_(deflate_level) {
  MBKIT_CHECK(header_.num_classes > 0, "dataset ", header_.name, ": num_classes must be positive");
  MBKIT_CHECK(deflate_level_ >= 0 && deflate_level_ <= 9, "deflate level must be 0..9");
  if (!header_.class_names.empty() &&
      header_.class_names.size() != static_cast<std::size_t>(header_.num_classes)) {
    data_error(cat("dataset ", header_.name, ": ", header_.class_names.size(), " class names for ",
                   header_.num_classes, " classes"));
  }
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::begin_split(std::string_view split, std::uint64_t count, ImageShape shape,
                                bool with_source_index, bool with_coarse_labels) {
  MBKIT_CHECK(!open_, "split ", open_ ? open_->name : "", " is still open");
  MBKIT_CHECK(split == kTrain || split == kTest, "unknown split ", split);
  MBKIT_CHECK(
      std::find(finished_splits_.begin(), finished_splits_.end(), split) == finished_splits_.end(),
      "split ", split, " written twice");
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1) {
    data_error(cat("dataset ", header_.name, ": invalid image shape ", shape.text()));
  }
  if (!finished_splits_.empty() && shape != train_shape_) {
    data_error(cat("dataset ", header_.name, ": ", split, " images are ", shape.text(),
                   " but the other split's are ", train_shape_.text()));
  }
  train_shape_ = shape;
  open_ = std::make_unique<OpenSplit>();
  open_->name = std::string(split);
  open_->count = count;
  open_->shape = shape;
  open_->group = file_.create_group(open_->name);

  io::StorageOptions image_storage;
  if (count > 0) {
    image_storage.chunk = image_chunk(count, shape);
    image_storage.deflate_level = deflate_level_;
    image_storage.fletcher32 = true;
  }
  open_->images = open_->group.create_dataset<std::uint8_t>(
      "images",
      {count, static_cast<hsize_t>(shape.channels), static_cast<hsize_t>(shape.height),
       static_cast<hsize_t>(shape.width)},
      image_storage);
  open_->labels = open_->group.create_dataset<std::int32_t>("labels", {count},
                                                            column_storage(count, deflate_level_));
  if (with_source_index) {
    open_->source_index = open_->group.create_dataset<std::int64_t>(
        "source_index", {count}, column_storage(count, deflate_level_));
  }
  if (with_coarse_labels) {
    open_->coarse_labels = open_->group.create_dataset<std::int32_t>(
        "coarse_labels", {count}, column_storage(count, deflate_level_));
  }
  if (split == kTrain) train_statistics_.emplace(shape);
  if (count == 0) end_split();
}

void DatasetWriter::append(std::span<const std::uint8_t> images,
                           std::span<const std::int32_t> labels,
                           std::span<const std::int64_t> source_index,
                           std::span<const std::int32_t> coarse_labels) {
  MBKIT_CHECK(open_ != nullptr, "append without begin_split");
  OpenSplit& split = *open_;
  const std::size_t pixels = split.shape.pixels();
  const std::uint64_t rows = labels.size();
  MBKIT_CHECK(images.size() == rows * pixels, "append: ", images.size(), " pixel bytes for ", rows,
              " labels of ", split.shape.text(), " images");
  MBKIT_CHECK(split.written + rows <= split.count, "append: more rows than announced for ",
              split.name);
  MBKIT_CHECK(source_index.size() == (split.source_index ? rows : 0),
              "append: source_index does not match the split's layout");
  MBKIT_CHECK(coarse_labels.size() == (split.coarse_labels ? rows : 0),
              "append: coarse_labels do not match the split's layout");
  for (std::uint64_t i = 0; i < rows; ++i) {
    if (labels[i] < 0 || labels[i] >= header_.num_classes) {
      data_error(cat("dataset ", header_.name, ": ", split.name, " label ", labels[i], " at index ",
                     split.written + i, " is outside [0, ", header_.num_classes, ")"));
    }
  }
  if (split.name == kTrain) train_statistics_->add(images.data(), rows);
  split.images.write_rows(split.written, rows, images.data());
  split.labels.write_rows(split.written, rows, labels.data());
  if (split.source_index) split.source_index->write_rows(split.written, rows, source_index.data());
  if (split.coarse_labels) {
    split.coarse_labels->write_rows(split.written, rows, coarse_labels.data());
  }
  split.written += rows;
  if (split.written == split.count) end_split();
}

void DatasetWriter::end_split() {
  finished_splits_.push_back(open_->name);
  open_.reset();
}

void DatasetWriter::write_split(std::string_view split, ImageShape shape,
                                std::span<const std::uint8_t> images,
                                std::span<const std::int32_t> labels,
                                std::optional<std::span<const std::int32_t>> coarse_labels) {
  begin_split(split, labels.size(), shape, false, coarse_labels.has_value());
  if (!labels.empty()) {
    append(images, labels, {}, coarse_labels.value_or(std::span<const std::int32_t>{}));
  }
}

void DatasetWriter::finish() {
  if (open_) {
    fail(cat("dataset ", header_.name, ": split ", open_->name, " has ", open_->written, " of ",
             open_->count, " rows"));
  }
  for (const auto split : {kTrain, kTest}) {
    if (std::find(finished_splits_.begin(), finished_splits_.end(), split) ==
        finished_splits_.end()) {
      fail(cat("dataset ", header_.name, ": split ", split, " was not written"));
    }
  }
  std::vector<double> mean, stddev;
  if (header_.normalization) {
    std::tie(mean, stddev) = *header_.normalization;
  } else {
    mean = train_statistics_->mean();
    stddev = train_statistics_->stddev();
  }
  MBKIT_CHECK(mean.size() == static_cast<std::size_t>(train_shape_.channels), "normalisation has ",
              mean.size(), " channels for ", train_shape_.text(), " images");

  file_.set_attribute("format", std::string(kFormatName));
  file_.set_attribute("format_version", kFormatVersion);
  file_.set_attribute("name", header_.name);
  file_.set_attribute("num_classes", header_.num_classes);
  file_.set_attribute("mean", mean);
  file_.set_attribute("std", stddev);
  file_.set_attribute("source", header_.source);
  file_.set_attribute("created_by", cat("mbkit ", version()));
  if (!header_.source_files.empty()) {
    std::vector<std::string> names, digests;
    for (const auto& source : header_.source_files) {
      names.push_back(source.name);
      digests.push_back(source.sha256);
    }
    file_.set_attribute("source_files", names);
    file_.set_attribute("source_sha256", digests);
  }
  if (header_.shard) {
    const ShardInfo& shard = *header_.shard;
    file_.set_attribute("shard_index", shard.index);
    file_.set_attribute("shard_count", shard.count);
    file_.set_attribute("shard_method", shard.method);
    file_.set_attribute("shard_seed", static_cast<std::int64_t>(shard.seed));
    file_.set_attribute("shard_source", shard.source_name);
    file_.set_attribute("shard_source_sha256", shard.source_sha256);
  }
  if (!header_.class_names.empty()) file_.create_string_dataset("class_names", header_.class_names);
  if (!header_.coarse_class_names.empty()) {
    file_.create_string_dataset("coarse_class_names", header_.coarse_class_names);
  }
  file_.close();
}

// ---------------------------------------------------------------------------------------------

namespace {

// A failed HDF5 call on a file that opened is damage: a data error naming the file.
template <class Fn>
auto reading(const std::string& path, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
}

}  // namespace

DatasetFile DatasetFile::open(const std::string& path) {
  io::File file = io::File::open(path);
  DatasetInfo info = reading(path, [&] { return read_info(file); });
  return DatasetFile(std::move(file), std::move(info), path);
}

void DatasetFile::read_images(std::string_view split, std::uint64_t first, std::uint64_t count,
                              std::uint8_t* out) const {
  reading(path_, [&] { file_.open_dataset(cat(split, "/images")).read_rows(first, count, out); });
}

std::vector<std::int32_t> DatasetFile::read_labels(std::string_view split) const {
  return reading(path_,
                 [&] { return file_.open_dataset(cat(split, "/labels")).read<std::int32_t>(); });
}

void DatasetFile::read_labels(std::string_view split, std::uint64_t first, std::uint64_t count,
                              std::int32_t* out) const {
  reading(path_, [&] { file_.open_dataset(cat(split, "/labels")).read_rows(first, count, out); });
}

bool DatasetFile::has_source_index(std::string_view split) const {
  return reading(path_, [&] { return file_.has(cat(split, "/source_index")); });
}

std::vector<std::int64_t> DatasetFile::read_source_index(std::string_view split) const {
  return reading(
      path_, [&] { return file_.open_dataset(cat(split, "/source_index")).read<std::int64_t>(); });
}

std::vector<std::int32_t> DatasetFile::read_coarse_labels(std::string_view split) const {
  return reading(
      path_, [&] { return file_.open_dataset(cat(split, "/coarse_labels")).read<std::int32_t>(); });
}

}  // namespace mbkit::data
