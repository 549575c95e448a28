// Splitting a dataset's training split into N shard files, one per worker. Each shard is a
// complete dataset file: its part of the training split (with the source row of every image in
// /train/source_index), the whole test split, and the source's normalisation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mbkit::data {

enum class ShardMethod {
  kContiguous,  ///< shard i gets rows [i N / n, (i + 1) N / n)
  kStrided,     ///< shard i gets rows i, i + n, i + 2n, ... (tf.data's shard())
  kRandom,      ///< a seeded random partition that keeps every class evenly spread
};

ShardMethod parse_shard_method(const std::string& name);
std::string shard_method_name(ShardMethod method);

/// The rows of each shard, in increasing order. Shard sizes differ by at most one; with
/// kRandom each class's count also differs by at most one between shards.
std::vector<std::vector<std::int64_t>> assign_shards(std::span<const std::int32_t> labels,
                                                     int shard_count, ShardMethod method,
                                                     std::uint64_t seed);

/// "PREFIX-00002-of-00004.h5".
std::string shard_path(const std::string& prefix, int index, int count);

struct ShardOptions {
  std::string input;
  std::string prefix;
  int count = 0;
  ShardMethod method = ShardMethod::kRandom;
  std::uint64_t seed = 0;
  int deflate_level = 4;
};

/// Writes all shards (atomically: none appears unless all could be written) and returns their
/// paths.
std::vector<std::string> shard_dataset(const ShardOptions& options);

}  // namespace mbkit::data
