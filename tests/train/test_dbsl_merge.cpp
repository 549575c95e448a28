// The DBSL server's merge rule on known vectors: a push moves the server's model f/2 of the way
// to the worker's; the sync merge is the factor-weighted mean; the factors per kind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "mbkit/train/dbsl_merge.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(DbslMerge, LargeWorkerPushIsTheMean) {
  std::vector<float> server = {1, 2, -4, 0.5f};
  const std::vector<float> worker = {3, 2, 0, -0.5f};
  merge_push(server, worker, 1.0);
  EXPECT_EQ(server, (std::vector<float>{2, 2, -2, 0}));
}

TEST(DbslMerge, SmallWorkerPushMovesTheServerLess) {
  // f = 0.25: w = (1.75 w + 0.25 w_k) / 2.
  std::vector<float> server = {8, 0, -2};
  const std::vector<float> worker = {0, 8, 6};
  merge_push(server, worker, 0.25);
  EXPECT_EQ(server, (std::vector<float>{7, 1, -1}));
  // f = 0 leaves the server as it was.
  merge_push(server, worker, 0.0);
  EXPECT_EQ(server, (std::vector<float>{7, 1, -1}));
}

TEST(DbslMerge, SyncIsTheFactorWeightedMean) {
  std::vector<float> server = {100, 100};
  const std::vector<float> a = {1, 4}, b = {3, 0}, c = {5, 8};
  // (1 * a + 1 * b + 0.5 * c) / 2.5
  merge_sync(server, {a, b, c}, {1.0, 1.0, 0.5});
  EXPECT_FLOAT_EQ(server[0], (1 + 3 + 2.5f) / 2.5f);
  EXPECT_FLOAT_EQ(server[1], (4 + 0 + 4) / 2.5f);
  // Equal factors: the plain mean, whatever their size.
  merge_sync(server, {a, b}, {0.3, 0.3});
  EXPECT_FLOAT_EQ(server[0], 2);
  EXPECT_FLOAT_EQ(server[1], 2);
}

TEST(DbslMerge, SyncInPartsHasTheBitsOfTheWholeMerge) {
  // Ranks hosting shares of the workers pass the sums along in worker order: merge_sync's
  // additions, so its bits, however the workers are split (values of mixed magnitudes).
  constexpr std::size_t kFloats = 257;
  std::vector<std::vector<float>> models(7, std::vector<float>(kFloats));
  for (std::size_t k = 0; k < models.size(); ++k) {
    for (std::size_t i = 0; i < kFloats; ++i) {
      models[k][i] = static_cast<float>(std::sin(1.0 + 3.0 * k + 0.37 * i) *
                                        std::pow(10.0, static_cast<double>((i + k) % 9) - 4));
    }
  }
  const std::vector<double> factors = {1, 1, 0.625, 1, 0.3, 1, 0.625};
  std::vector<std::span<const float>> all(models.begin(), models.end());
  std::vector<float> whole(kFloats);
  merge_sync(whole, all, factors);
  const std::vector<std::vector<std::size_t>> splits = {{7}, {3, 7}, {1, 4, 7}, {2, 4, 6, 7}};
  for (const auto& ends : splits) {  // where each part ends
    std::vector<double> sums(kFloats, 0.0);
    std::size_t begin = 0;
    for (const std::size_t end : ends) {
      add_weighted(sums, {all.begin() + begin, all.begin() + end},
                   {factors.begin() + begin, factors.begin() + end});
      begin = end;
    }
    std::vector<float> parts(kFloats);
    divide_weighted(parts, sums, factors);
    EXPECT_EQ(std::memcmp(parts.data(), whole.data(), kFloats * sizeof(float)), 0);
  }
  // A push at a time, as --sync adds each as it is taken (none kept): the same bits.
  std::vector<double> sums(kFloats, 0.0);
  for (std::size_t k = 0; k < models.size(); ++k) add_weighted(sums, all[k], factors[k]);
  std::vector<float> pushes(kFloats);
  divide_weighted(pushes, sums, factors);
  EXPECT_EQ(std::memcmp(pushes.data(), whole.data(), kFloats * sizeof(float)), 0);
}

TEST(DbslMerge, FactorsOfEachKind) {
  const double ratio = 10625.0 / 13125.0;  // Table 2, k = 1.05, one small worker
  EXPECT_DOUBLE_EQ(update_factor(UpdateFactor::kLinear, ratio), ratio);
  EXPECT_DOUBLE_EQ(update_factor(UpdateFactor::kSqrt, ratio), std::sqrt(ratio));
  EXPECT_DOUBLE_EQ(update_factor(UpdateFactor::kNone, ratio), 1.0);
  EXPECT_DOUBLE_EQ(update_factor(UpdateFactor::kSqrt, 1.0), 1.0);  // a large worker
  EXPECT_EQ(parse_update_factor("sqrt"), UpdateFactor::kSqrt);
  EXPECT_STREQ(update_factor_name(parse_update_factor("none")), "none");
  EXPECT_MBKIT_ERROR(parse_update_factor("square"), ExitCode::kUsage,
                     "--update-factor: 'square' is not linear, sqrt or none");
}

}  // namespace
}  // namespace mbkit::train
