#include "mbkit/bench/partitions.hpp"

#include <algorithm>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::bench {

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> values;
  for (const auto& part : split(text, ',')) {
    const std::string item(trim(part));
    const bool digits =
        !item.empty() && item.size() <= 9 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(item) < 1) {
      usage_error(cat(flag, ": '", item, "' in '", text, "' is not a whole number of at least 1"));
    }
    values.push_back(std::stoi(item));
  }
  return values;
}

std::vector<Split> grid_splits(const std::vector<int>& batches,
                               const std::vector<int>& partitions) {
  std::vector<Split> splits;
  for (const int b : batches) {
    for (const int p : partitions) {
      if (p > b || b % p != 0) {
        usage_error(cat("--partitions ", p, " does not divide --batch-sizes ", b,
                        " into whole micro-batches"));
      }
      splits.push_back({b, p});
    }
  }
  return splits;
}

std::vector<Split> sweep_splits(int max_batch) {
  if (max_batch < 4)
    usage_error(cat("--sweep-max ", max_batch, " is below the sweep's first batch, 4"));
  std::vector<Split> splits;
  for (int b = 4; b <= max_batch && b > 0; b *= 2) {
    for (int p = 1; p < b; p *= 2) splits.push_back({b, p});
  }
  return splits;
}

}  // namespace mbkit::bench
