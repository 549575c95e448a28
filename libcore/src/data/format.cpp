#include "mbkit/data/format.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/io/format.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::data {

std::string ImageShape::text() const {
  return cat(channels, "x", height, "x", width);
}

const SplitSummary& DatasetInfo::split(std::string_view split_name) const {
  for (const auto& summary : splits) {
    if (summary.name == split_name) return summary;
  }
  data_error(cat("dataset ", name, " has no split '", split_name, "'"));
}

namespace {

const std::vector<std::string> kShardMethods = {"contiguous", "strided", "random"};

SplitSummary read_split_summary(const io::File& file, std::string_view split) {
  const std::string group = std::string(split);
  const std::string where = cat(file.path(), ":/", group);
  if (!file.has(group)) data_error(cat(file.path(), ": missing group /", group));
  const auto images = file.open_dataset(group + "/images");
  const auto labels = file.open_dataset(group + "/labels");
  const auto image_dims = images.dims();
  if (image_dims.size() != 4) {
    data_error(
        cat(where, "/images has ", image_dims.size(), " dimensions, expected 4 (N, C, H, W)"));
  }
  if (images.type_class() != H5T_INTEGER || images.type_size() != 1 || images.type_is_signed()) {
    data_error(cat(where, "/images is not uint8"));
  }
  const auto label_dims = labels.dims();
  if (label_dims.size() != 1) {
    data_error(cat(where, "/labels has ", label_dims.size(), " dimensions, expected 1"));
  }
  if (labels.type_class() != H5T_INTEGER || labels.type_size() > 8) {
    data_error(cat(where, "/labels is not an integer type"));
  }
  if (label_dims[0] != image_dims[0]) {
    data_error(cat(where, ": ", image_dims[0], " images but ", label_dims[0], " labels"));
  }
  for (int d = 1; d < 4; ++d) {
    if (image_dims[static_cast<std::size_t>(d)] == 0 ||
        image_dims[static_cast<std::size_t>(d)] > 1u << 20) {
      data_error(cat(where, "/images has an unusable shape"));
    }
  }
  // Metadata only: every chunk the extents declare must be stored (a damaged extent would
  // otherwise read fill values as pixels, or ask for more memory than exists).
  images.check_complete();
  labels.check_complete();
  SplitSummary summary;
  summary.name = group;
  summary.count = image_dims[0];
  summary.shape = {static_cast<int>(image_dims[1]), static_cast<int>(image_dims[2]),
                   static_cast<int>(image_dims[3])};
  for (const char* optional : {"source_index", "coarse_labels"}) {
    if (file.has(group + "/" + optional)) {
      const auto extra = file.open_dataset(group + "/" + optional);
      if (extra.dims() != label_dims || extra.type_class() != H5T_INTEGER) {
        data_error(cat(where, "/", optional, " does not match /", group, "/labels"));
      }
      extra.check_complete();
    }
  }
  return summary;
}

}  // namespace

DatasetInfo read_info(const io::File& file) {
  const std::string& path = file.path();
  DatasetInfo info;
  info.format_version = io::check_format(file, kFormatName, kFormatVersion, "dataset");
  info.name = file.string_attribute("name");
  const auto num_classes = file.int_attribute("num_classes");
  if (num_classes < 1 || num_classes > 1'000'000) {
    data_error(cat(path, ": num_classes ", num_classes, " is out of range"));
  }
  info.num_classes = static_cast<int>(num_classes);
  info.mean = file.double_array_attribute("mean");
  info.std = file.double_array_attribute("std");
  info.source = file.string_attribute("source");
  if (file.has_attribute("created_by")) info.created_by = file.string_attribute("created_by");

  const bool has_files = file.has_attribute("source_files");
  if (has_files != file.has_attribute("source_sha256")) {
    data_error(cat(path, ": source_files and source_sha256 must be present together"));
  }
  if (has_files) {
    const auto names = file.string_array_attribute("source_files");
    const auto digests = file.string_array_attribute("source_sha256");
    if (names.size() != digests.size()) {
      data_error(cat(path, ": source_files has ", names.size(), " entries but source_sha256 has ",
                     digests.size()));
    }
    for (std::size_t i = 0; i < names.size(); ++i)
      info.source_files.push_back({names[i], digests[i]});
  }

  if (file.has_attribute("shard_index")) {
    ShardInfo shard;
    shard.index = static_cast<int>(file.int_attribute("shard_index"));
    shard.count = static_cast<int>(file.int_attribute("shard_count"));
    shard.method = file.string_attribute("shard_method");
    shard.source_name = file.string_attribute("shard_source");
    shard.source_sha256 = file.string_attribute("shard_source_sha256");
    if (file.has_attribute("shard_seed")) {
      shard.seed = static_cast<std::uint64_t>(file.int_attribute("shard_seed"));
    }
    if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count) {
      data_error(cat(path, ": shard_index ", shard.index,
                     " is not in [0, shard_count=", shard.count, ")"));
    }
    if (std::find(kShardMethods.begin(), kShardMethods.end(), shard.method) ==
        kShardMethods.end()) {
      data_error(cat(path, ": unknown shard_method '", shard.method, "'"));
    }
    info.shard = shard;
  }

  for (const auto split : {kTrain, kTest}) info.splits.push_back(read_split_summary(file, split));
  const ImageShape shape = info.splits.front().shape;
  if (info.splits.back().shape != shape) {
    data_error(cat(path, ": train images are ", shape.text(), " but test images are ",
                   info.splits.back().shape.text()));
  }
  if (info.mean.size() != static_cast<std::size_t>(shape.channels) ||
      info.std.size() != static_cast<std::size_t>(shape.channels)) {
    data_error(cat(path, ": mean/std have ", info.mean.size(), "/", info.std.size(),
                   " entries for ", shape.channels, " channels"));
  }
  for (std::size_t c = 0; c < info.mean.size(); ++c) {
    if (!std::isfinite(info.mean[c]) || !std::isfinite(info.std[c]) || info.std[c] < 0) {
      data_error(cat(path, ": mean/std of channel ", c, " are not valid"));
    }
  }
  if (file.has("class_names")) {
    info.class_names = file.open_dataset("class_names").read_strings();
    if (info.class_names.size() != static_cast<std::size_t>(info.num_classes)) {
      data_error(cat(path, ": /class_names has ", info.class_names.size(), " names for ",
                     info.num_classes, " classes"));
    }
  }
  info.has_coarse_labels = file.has("train/coarse_labels");
  if (info.has_coarse_labels != file.has("test/coarse_labels")) {
    data_error(cat(path, ": coarse_labels must be present in both splits or in neither"));
  }
  if (file.has("coarse_class_names")) {
    info.coarse_class_names = file.open_dataset("coarse_class_names").read_strings();
  }
  return info;
}

bool looks_like_dataset(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  io::quiet_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  try {
    const auto file = io::File::open(path);
    return file.has_attribute("format") && file.string_attribute("format") == kFormatName;
  } catch (const Error&) {
    return false;
  }
}

VerifyReport verify(const std::string& path) {
  VerifyReport report;
  std::optional<DatasetFile> dataset;
  try {
    dataset.emplace(DatasetFile::open(path));
  } catch (const Error& error) {
    report.problems.emplace_back(error.what());
    return report;
  }
  report.info = dataset->info();
  const DatasetInfo& info = report.info;
  const ImageShape shape = info.shape();
  const std::size_t pixels = shape.pixels();
  PixelStatistics train_statistics(shape);
  for (const auto& split : info.splits) {
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(info.num_classes), 0);
    try {
      const auto labels = dataset->read_labels(split.name);
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (labels[i] < 0 || labels[i] >= info.num_classes) {
          report.problems.push_back(cat(path, ": /", split.name, "/labels[", i, "] = ", labels[i],
                                        " is outside [0, ", info.num_classes, ")"));
          break;
        }
        ++counts[static_cast<std::size_t>(labels[i])];
      }
      // Reading every chunk verifies its Fletcher-32 checksum and its compressed stream.
      const std::uint64_t block = std::max<std::uint64_t>(1, (8u << 20) / pixels);
      std::vector<std::uint8_t> images(block * pixels);
      for (std::uint64_t first = 0; first < split.count; first += block) {
        const std::uint64_t rows = std::min(block, split.count - first);
        dataset->read_images(split.name, first, rows, images.data());
        if (split.name == kTrain) train_statistics.add(images.data(), rows);
      }
      if (info.has_coarse_labels) {
        const auto coarse = dataset->read_coarse_labels(split.name);
        const auto limit = info.coarse_class_names.empty()
                               ? std::numeric_limits<std::int32_t>::max()
                               : static_cast<std::int32_t>(info.coarse_class_names.size());
        for (std::size_t i = 0; i < coarse.size(); ++i) {
          if (coarse[i] < 0 || coarse[i] >= limit) {
            report.problems.push_back(cat(path, ": /", split.name, "/coarse_labels[", i,
                                          "] = ", coarse[i], " is out of range"));
            break;
          }
        }
      }
      if (dataset->has_source_index(split.name)) {
        auto index = dataset->read_source_index(split.name);
        std::sort(index.begin(), index.end());
        if (!index.empty() && index.front() < 0) {
          report.problems.push_back(
              cat(path, ": /", split.name, "/source_index has a negative entry"));
        }
        if (std::adjacent_find(index.begin(), index.end()) != index.end()) {
          report.problems.push_back(cat(path, ": /", split.name, "/source_index repeats a row"));
        }
      }
    } catch (const Error& error) {
      report.problems.emplace_back(error.what());
    }
    report.class_counts.push_back(std::move(counts));
  }

  // Shards keep their source's statistics, so only whole datasets can be checked here.
  const std::uint64_t train_count = info.split(kTrain).count;
  if (!info.shard && train_count > 0 && report.problems.empty()) {
    const auto mean = train_statistics.mean();
    const auto stddev = train_statistics.stddev();
    for (std::size_t c = 0; c < mean.size(); ++c) {
      if (std::fabs(mean[c] - info.mean[c]) > 1e-9 || std::fabs(stddev[c] - info.std[c]) > 1e-9) {
        report.problems.push_back(strprintf(
            "%s: stored mean/std of channel %zu (%.6f/%.6f) differ from the pixels (%.6f/%.6f)",
            path.c_str(), c, info.mean[c], info.std[c], mean[c], stddev[c]));
      }
    }
  }
  return report;
}

}  // namespace mbkit::data
