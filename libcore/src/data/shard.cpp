#include "mbkit/data/shard.hpp"

#include <algorithm>
#include <memory>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/digest.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::data {

ShardMethod parse_shard_method(const std::string& name) {
  if (name == "contiguous") return ShardMethod::kContiguous;
  if (name == "strided") return ShardMethod::kStrided;
  if (name == "random") return ShardMethod::kRandom;
  usage_error(cat("--by: unknown method '", name, "' (known: contiguous, strided, random)"));
}

std::string shard_method_name(ShardMethod method) {
  switch (method) {
    case ShardMethod::kContiguous:
      return "contiguous";
    case ShardMethod::kStrided:
      return "strided";
    case ShardMethod::kRandom:
      return "random";
  }
  return "?";
}

std::vector<std::vector<std::int64_t>> assign_shards(std::span<const std::int32_t> labels,
                                                     int shard_count, ShardMethod method,
                                                     std::uint64_t seed) {
  MBKIT_CHECK(shard_count >= 1, "shard count must be at least 1");
  const auto rows = static_cast<std::int64_t>(labels.size());
  const auto n = static_cast<std::int64_t>(shard_count);
  std::vector<std::vector<std::int64_t>> shards(static_cast<std::size_t>(shard_count));
  switch (method) {
    case ShardMethod::kContiguous: {
      std::int64_t first = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t size = rows / n + (i < rows % n ? 1 : 0);
        auto& shard = shards[static_cast<std::size_t>(i)];
        for (std::int64_t row = first; row < first + size; ++row) shard.push_back(row);
        first += size;
      }
      break;
    }
    case ShardMethod::kStrided:
      for (std::int64_t row = 0; row < rows; ++row) {
        shards[static_cast<std::size_t>(row % n)].push_back(row);
      }
      break;
    case ShardMethod::kRandom: {
      const std::int32_t largest =
          labels.empty() ? 0 : *std::max_element(labels.begin(), labels.end());
      std::vector<std::vector<std::int64_t>> by_class(static_cast<std::size_t>(largest) + 1);
      for (std::int64_t row = 0; row < rows; ++row) {
        by_class[static_cast<std::size_t>(labels[static_cast<std::size_t>(row)])].push_back(row);
      }
      Rng rng(seed, 0x5a4d);
      // Deal each class's shuffled rows round-robin, continuing where the previous class
      // stopped: per-class and total counts then differ by at most one between shards.
      std::int64_t dealer = 0;
      for (auto& members : by_class) {
        rng.shuffle(members.begin(), members.end());
        for (const std::int64_t row : members) {
          shards[static_cast<std::size_t>(dealer % n)].push_back(row);
          ++dealer;
        }
      }
      for (auto& shard : shards) std::sort(shard.begin(), shard.end());
      break;
    }
  }
  return shards;
}

std::string shard_path(const std::string& prefix, int index, int count) {
  return strprintf("%s-%05d-of-%05d.h5", prefix.c_str(), index, count);
}

std::vector<std::string> shard_dataset(const ShardOptions& options) {
  if (options.count < 1) usage_error(cat("-n ", options.count, ": need at least 1 shard"));
  if (options.count > 99999) usage_error(cat("-n ", options.count, ": at most 99999 shards"));
  if (options.prefix.empty()) usage_error("no output prefix given (-o PREFIX)");
  if (options.deflate_level < 0 || options.deflate_level > 9) {
    usage_error(cat("--compression ", options.deflate_level, " is not in 0..9"));
  }
  const DatasetFile source = DatasetFile::open(options.input);
  const DatasetInfo& info = source.info();
  const SplitSummary train = info.split(kTrain);
  const SplitSummary test = info.split(kTest);
  if (static_cast<std::uint64_t>(options.count) > train.count) {
    usage_error(cat("-n ", options.count, ": ", options.input, " has only ", train.count,
                    " training images"));
  }
  const auto labels = source.read_labels(kTrain);
  const auto assignment = assign_shards(labels, options.count, options.method, options.seed);
  std::vector<int> shard_of(labels.size(), -1);
  for (std::size_t shard = 0; shard < assignment.size(); ++shard) {
    for (const auto row : assignment[shard])
      shard_of[static_cast<std::size_t>(row)] = static_cast<int>(shard);
  }
  const std::string source_sha256 = digest_file(options.input).sha256;
  const bool coarse = info.has_coarse_labels;

  std::vector<fs::AtomicOutput> outputs;
  std::vector<std::unique_ptr<DatasetWriter>> writers;
  for (int index = 0; index < options.count; ++index) {
    outputs.emplace_back(shard_path(options.prefix, index, options.count));
    DatasetHeader header;
    header.name = info.name;
    header.num_classes = info.num_classes;
    header.class_names = info.class_names;
    header.coarse_class_names = info.coarse_class_names;
    header.source = info.source;
    header.source_files = info.source_files;
    header.shard = ShardInfo{index,
                             options.count,
                             shard_method_name(options.method),
                             options.seed,
                             fs::base_name(options.input),
                             source_sha256};
    header.normalization = {info.mean, info.std};
    writers.push_back(std::make_unique<DatasetWriter>(outputs.back().temp_path(), std::move(header),
                                                      options.deflate_level));
    writers.back()->begin_split(kTrain, assignment[static_cast<std::size_t>(index)].size(),
                                train.shape, true, coarse);
  }

  // One sequential pass over the source: each shard's rows are increasing, so appending rows
  // in source order keeps every shard in order.
  const std::size_t pixels = train.shape.pixels();
  const std::uint64_t block = std::max<std::uint64_t>(1, (8u << 20) / pixels);
  std::vector<std::uint8_t> images(block * pixels);
  std::vector<std::int32_t> coarse_labels;
  if (coarse) coarse_labels = source.read_coarse_labels(kTrain);
  struct Pending {
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels, coarse;
    std::vector<std::int64_t> rows;
  };
  std::vector<Pending> pending(static_cast<std::size_t>(options.count));
  for (std::uint64_t first = 0; first < train.count; first += block) {
    const std::uint64_t rows = std::min(block, train.count - first);
    source.read_images(kTrain, first, rows, images.data());
    for (std::uint64_t i = 0; i < rows; ++i) {
      const std::uint64_t row = first + i;
      Pending& to = pending[static_cast<std::size_t>(shard_of[row])];
      to.images.insert(to.images.end(), images.begin() + static_cast<std::ptrdiff_t>(i * pixels),
                       images.begin() + static_cast<std::ptrdiff_t>((i + 1) * pixels));
      to.labels.push_back(labels[row]);
      to.rows.push_back(static_cast<std::int64_t>(row));
      if (coarse) to.coarse.push_back(coarse_labels[row]);
    }
    for (std::size_t shard = 0; shard < pending.size(); ++shard) {
      Pending& to = pending[shard];
      if (to.labels.empty()) continue;
      writers[shard]->append(to.images, to.labels, to.rows, to.coarse);
      to.images.clear();
      to.labels.clear();
      to.rows.clear();
      to.coarse.clear();
    }
  }

  // Every shard carries the whole test split, so any shard can be evaluated on its own.
  for (auto& writer : writers) writer->begin_split(kTest, test.count, test.shape, false, coarse);
  std::vector<std::int32_t> test_labels(block);
  const auto all_test_coarse =
      coarse ? source.read_coarse_labels(kTest) : std::vector<std::int32_t>{};
  for (std::uint64_t first = 0; first < test.count; first += block) {
    const std::uint64_t rows = std::min(block, test.count - first);
    source.read_images(kTest, first, rows, images.data());
    source.read_labels(kTest, first, rows, test_labels.data());
    const std::span<const std::uint8_t> image_span(images.data(), rows * pixels);
    const std::span<const std::int32_t> label_span(test_labels.data(), rows);
    std::span<const std::int32_t> coarse_span;
    if (coarse) coarse_span = std::span<const std::int32_t>(all_test_coarse).subspan(first, rows);
    for (auto& writer : writers) writer->append(image_span, label_span, {}, coarse_span);
  }

  for (auto& writer : writers) writer->finish();
  std::vector<std::string> paths;
  for (auto& output : outputs) {
    output.commit();
    paths.push_back(output.final_path());
  }
  return paths;
}

}  // namespace mbkit::data
