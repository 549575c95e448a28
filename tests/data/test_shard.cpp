// Shard assignment (coverage, balance, determinism) and shard files (together they hold exactly
// the training set; each carries the whole test split and the source's normalisation).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/shard.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/util/digest.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

std::vector<std::int32_t> skewed_labels(std::size_t count) {
  std::vector<std::int32_t> labels(count);
  for (std::size_t i = 0; i < count; ++i)
    labels[i] = static_cast<std::int32_t>((i * i + i / 7) % 5);
  return labels;
}

void expect_partition(const std::vector<std::vector<std::int64_t>>& shards, std::size_t rows) {
  std::vector<std::int64_t> all;
  std::size_t smallest = rows, largest = 0;
  for (const auto& shard : shards) {
    EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
    all.insert(all.end(), shard.begin(), shard.end());
    smallest = std::min(smallest, shard.size());
    largest = std::max(largest, shard.size());
  }
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(rows);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected) << "shards must cover every row exactly once";
  EXPECT_LE(largest - smallest, 1u);
}

TEST(AssignShards, ContiguousAndStridedLayouts) {
  const auto labels = skewed_labels(10);
  const auto contiguous = assign_shards(labels, 3, ShardMethod::kContiguous, 0);
  EXPECT_EQ(contiguous[0], (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(contiguous[1], (std::vector<std::int64_t>{4, 5, 6}));
  EXPECT_EQ(contiguous[2], (std::vector<std::int64_t>{7, 8, 9}));
  const auto strided = assign_shards(labels, 3, ShardMethod::kStrided, 0);
  EXPECT_EQ(strided[0], (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(strided[2], (std::vector<std::int64_t>{2, 5, 8}));
}

TEST(AssignShards, EveryMethodPartitionsEvenly) {
  const auto labels = skewed_labels(1003);
  for (const auto method :
       {ShardMethod::kContiguous, ShardMethod::kStrided, ShardMethod::kRandom}) {
    for (const int count : {1, 2, 4, 7})
      expect_partition(assign_shards(labels, count, method, 3), labels.size());
  }
}

TEST(AssignShards, RandomKeepsEachClassBalancedAndIsSeeded) {
  const auto labels = skewed_labels(1003);
  const auto shards = assign_shards(labels, 4, ShardMethod::kRandom, 11);
  for (std::int32_t label = 0; label < 5; ++label) {
    std::vector<std::size_t> per_shard;
    for (const auto& shard : shards) {
      per_shard.push_back(
          static_cast<std::size_t>(std::count_if(shard.begin(), shard.end(), [&](std::int64_t row) {
            return labels[static_cast<std::size_t>(row)] == label;
          })));
    }
    const auto [low, high] = std::minmax_element(per_shard.begin(), per_shard.end());
    EXPECT_LE(*high - *low, 1u) << "class " << label;
  }
  EXPECT_EQ(shards, assign_shards(labels, 4, ShardMethod::kRandom, 11));
  EXPECT_NE(shards, assign_shards(labels, 4, ShardMethod::kRandom, 12));
}

TEST(ShardPath, FiveDigitNames) {
  EXPECT_EQ(shard_path("out/sh", 2, 4), "out/sh-00002-of-00004.h5");
  EXPECT_MBKIT_ERROR(parse_shard_method("modulo"), ExitCode::kUsage,
                     "unknown method 'modulo' (known: contiguous, strided, random)");
}

TEST(ShardDataset, ShardsTogetherHoldExactlyTheTrainingSet) {
  test::TempDir dir;
  ToySynthOptions toy;
  toy.train = 517;
  toy.test = 33;
  toy.learnable = true;
  write_synth_toy(dir.file("toy.h5"), toy, 1);
  const auto source = DatasetFile::open(dir.file("toy.h5"));
  const std::size_t pixels = source.info().shape().pixels();
  std::vector<std::uint8_t> source_images(toy.train * pixels), source_test(toy.test * pixels);
  source.read_images(kTrain, 0, toy.train, source_images.data());
  source.read_images(kTest, 0, toy.test, source_test.data());
  const auto source_labels = source.read_labels(kTrain);

  ShardOptions options;
  options.input = dir.file("toy.h5");
  options.prefix = dir.file("sh");
  options.count = 4;
  options.method = ShardMethod::kRandom;
  options.seed = 5;
  const auto paths = shard_dataset(options);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[3], dir.file("sh-00003-of-00004.h5"));

  std::set<std::int64_t> seen;
  for (int index = 0; index < 4; ++index) {
    const auto report = verify(paths[static_cast<std::size_t>(index)]);
    ASSERT_TRUE(report.ok()) << report.problems.front();
    const auto shard = DatasetFile::open(paths[static_cast<std::size_t>(index)]);
    const auto& info = shard.info();
    ASSERT_TRUE(info.shard.has_value());
    EXPECT_EQ(info.shard->index, index);
    EXPECT_EQ(info.shard->count, 4);
    EXPECT_EQ(info.shard->method, "random");
    EXPECT_EQ(info.shard->seed, 5u);
    EXPECT_EQ(info.shard->source_name, "toy.h5");
    EXPECT_EQ(info.shard->source_sha256, digest_file(dir.file("toy.h5")).sha256);
    EXPECT_EQ(info.mean, source.info().mean);  // the source's normalisation, not the shard's
    EXPECT_EQ(info.std, source.info().std);
    const auto rows = shard.read_source_index(kTrain);
    const auto labels = shard.read_labels(kTrain);
    std::vector<std::uint8_t> images(rows.size() * pixels);
    shard.read_images(kTrain, 0, rows.size(), images.data());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto row = static_cast<std::size_t>(rows[i]);
      EXPECT_TRUE(seen.insert(rows[i]).second) << "row " << row << " in two shards";
      EXPECT_EQ(labels[i], source_labels[row]);
      EXPECT_TRUE(std::equal(images.begin() + static_cast<std::ptrdiff_t>(i * pixels),
                             images.begin() + static_cast<std::ptrdiff_t>((i + 1) * pixels),
                             source_images.begin() + static_cast<std::ptrdiff_t>(row * pixels)));
    }
    std::vector<std::uint8_t> test_images(toy.test * pixels);
    shard.read_images(kTest, 0, toy.test, test_images.data());
    EXPECT_EQ(test_images, source_test);
  }
  EXPECT_EQ(seen.size(), toy.train);
  for (const auto& name : dir.entries()) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}

TEST(ShardDataset, BadCounts) {
  test::TempDir dir;
  ToySynthOptions toy;
  toy.train = 5;
  toy.test = 1;
  write_synth_toy(dir.file("toy.h5"), toy, 1);
  ShardOptions options;
  options.input = dir.file("toy.h5");
  options.prefix = dir.file("sh");
  options.count = 0;
  EXPECT_MBKIT_ERROR(shard_dataset(options), ExitCode::kUsage, "-n 0: need at least 1 shard");
  options.count = 6;
  EXPECT_MBKIT_ERROR(shard_dataset(options), ExitCode::kUsage, "has only 5 training images");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"toy.h5"});
}

}  // namespace
}  // namespace mbkit::data
