// The arithmetic of mb-plot's figures: smoothing, running sums, thinning, medians and
// quantiles, time units and --xmax durations, histogram bins and fractions, the straggler
// density (against a numerical integral and the profiles' own means), scaling, and the mean
// and range of several seeds' runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/plot/series.hpp"
#include "test_helpers.hpp"

namespace mbkit::plot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Smooth, MatchesTheAdjustedExponentialMean) {
  // pandas: Series([1, 2, 3, 4]).ewm(span=3).mean() == [1, 1.666667, 2.428571, 3.266667]
  const auto out = smooth({1, 2, 3, 4}, 3);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_DOUBLE_EQ(out[0], 1.0);
  EXPECT_NEAR(out[1], 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(out[2], 17.0 / 7.0, 1e-12);
  EXPECT_NEAR(out[3], 49.0 / 15.0, 1e-12);
}

TEST(Smooth, KeepsConstantsAndGaps) {
  EXPECT_EQ(smooth({2, 2, 2}, 10), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(smooth({1, 5, 3}, 1), (std::vector<double>{1, 5, 3}));  // span <= 1: off
  const auto out = smooth({1, kNaN, 1}, 5);
  EXPECT_DOUBLE_EQ(out[0], 1.0);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_DOUBLE_EQ(out[2], 1.0);
}

TEST(Series, CumulativeSumMedianQuantileMean) {
  EXPECT_EQ(cumulative_sum({64, 64, 32}), (std::vector<double>{64, 128, 160}));
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({kNaN, 2, 4}), 3.0);
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_DOUBLE_EQ(quantile({0, 10, 20, 30, 40}, 0.25), 10.0);
  EXPECT_DOUBLE_EQ(quantile({0, 10}, 0.75), 7.5);
  EXPECT_DOUBLE_EQ(mean({1, 2, kNaN, 3}), 2.0);
}

TEST(Series, ThinningKeepsTheEndsAndTheLimit) {
  EXPECT_EQ(thin_indices(4, 10), (std::vector<std::size_t>{0, 1, 2, 3}));
  const auto kept = thin_indices(100000, 1000);
  EXPECT_LE(kept.size(), 1000u);
  EXPECT_GE(kept.size(), 990u);
  EXPECT_EQ(kept.front(), 0u);
  EXPECT_EQ(kept.back(), 99999u);
  for (std::size_t i = 1; i < kept.size(); ++i) EXPECT_LT(kept[i - 1], kept[i]);
  EXPECT_TRUE(thin_indices(0, 10).empty());
}

TEST(CountScale, LargeCountsReadInThousandsOrMillions) {
  EXPECT_EQ(choose_count_scale(9999).prefix, "");
  EXPECT_EQ(choose_count_scale(25000).prefix, "k");
  EXPECT_DOUBLE_EQ(choose_count_scale(25000).divisor, 1e3);
  EXPECT_EQ(choose_count_scale(6e6).prefix, "M");
}

TEST(TimeUnits, DurationsOfXmax) {
  EXPECT_DOUBLE_EQ(parse_duration("90", "--xmax"), 90.0);
  EXPECT_DOUBLE_EQ(parse_duration("90s", "--xmax"), 90.0);
  EXPECT_DOUBLE_EQ(parse_duration("30min", "--xmax"), 1800.0);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h", "--xmax"), 5400.0);
  EXPECT_DOUBLE_EQ(parse_duration("250ms", "--xmax"), 0.25);
  for (const char* bad : {"", "min", "3 days", "1e", "x5"}) {
    EXPECT_MBKIT_ERROR(parse_duration(bad, "--xmax"), ExitCode::kUsage, "--xmax");
  }
}

TEST(Histogram, CountsGetABinPerWholeNumber) {
  BinRequest request;
  request.integer_valued = true;
  const Bins bins = choose_bins({{62, 64, 64}, {63}}, request);
  EXPECT_DOUBLE_EQ(bins.first_edge, 61.5);
  EXPECT_DOUBLE_EQ(bins.width, 1.0);
  EXPECT_EQ(bins.count, 3u);
  EXPECT_DOUBLE_EQ(bins.centre(0), 62.0);
  EXPECT_EQ(bin_fractions({62, 64, 64, 64}, bins), (std::vector<double>{0.25, 0, 0.75}));
}

TEST(Histogram, WideCountsShareBins) {
  BinRequest request;
  request.integer_valued = true;
  std::vector<double> values;
  for (int v = 0; v < 600; ++v) values.push_back(v);
  const Bins bins = choose_bins({values}, request);
  EXPECT_LE(bins.count, kMaxIntegerBins);
  EXPECT_DOUBLE_EQ(bins.width, 10.0);
  const auto fractions = bin_fractions(values, bins);
  for (const double f : fractions) EXPECT_NEAR(f, 10.0 / 600.0, 1e-12);
}

TEST(Histogram, DurationsStartAtZeroOnRoundEdges) {
  BinRequest request;
  request.from_zero = true;
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(0.100 + 0.001 * (i % 50));
  const Bins bins = choose_bins({values}, request);
  EXPECT_DOUBLE_EQ(bins.first_edge, 0.0);
  // A width of 1, 2 or 5 times a power of ten.
  const double mantissa = bins.width / std::pow(10.0, std::floor(std::log10(bins.width)));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
              std::abs(mantissa - 5) < 1e-9)
      << bins.width;
  EXPECT_GE(bins.first_edge + static_cast<double>(bins.count) * bins.width, 0.149);
  EXPECT_LE(bins.count, 100u);
  double total = 0;
  for (const double f : bin_fractions(values, bins)) total += f;
  EXPECT_NEAR(total, 1.0, 1e-12);
}

TEST(Histogram, RequestedBinsAndUpperEnd) {
  BinRequest request;
  request.bins = 4;
  request.upper = 4.0;
  const Bins bins = choose_bins({{0, 1, 2, 3, 4, 100}}, request);
  EXPECT_EQ(bins.count, 4u);
  EXPECT_DOUBLE_EQ(bins.width, 1.0);
  // 100 is past the end: counted in the total, in no bin.
  const auto fractions = bin_fractions({0, 1, 2, 3, 4, 100}, bins);
  EXPECT_NEAR(fractions[0], 1.0 / 6, 1e-12);
  EXPECT_NEAR(fractions[3], 2.0 / 6, 1e-12);  // 3 and the last edge, 4
  double total = 0;
  for (const double f : fractions) total += f;
  EXPECT_NEAR(total, 5.0 / 6, 1e-12);
}

TEST(Histogram, DegenerateInputsGiveOneBin) {
  EXPECT_EQ(choose_bins({}, {}).count, 1u);
  EXPECT_EQ(choose_bins({{kNaN}}, {}).count, 1u);
  const Bins one = choose_bins({{0.5, 0.5}}, {});
  EXPECT_EQ(one.count, 1u);
  EXPECT_EQ(bin_fractions({0.5, 0.5}, one), (std::vector<double>{1.0}));
  EXPECT_EQ(bin_fractions({}, one), (std::vector<double>{0.0}));
}

emulation::StragglerProfile profile_of(const std::string& text) {
  return *emulation::parse_straggler_profile(text);
}

// Integral of the density over [0, cap] by Simpson's rule, and of x times it.
std::pair<double, double> integrate(const emulation::StragglerProfile& profile) {
  const int n = 20000;
  const double cap = profile.cap();
  const double h = cap / n;
  double mass = 0;
  double first_moment = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = i * h;
    const double w = (i == 0 || i == n) ? 1 : (i % 2 == 1 ? 4 : 2);
    const double d = straggler_density(profile, x);
    mass += w * d;
    first_moment += w * x * d;
  }
  return {mass * h / 3, first_moment * h / 3};
}

TEST(Stragglers, DensityOfTheNamedProfiles) {
  for (const char* name : {"niagara", "cedar"}) {
    const auto profile = profile_of(name);
    const auto [mass, first_moment] = integrate(profile);
    const auto curve = straggler_curve(profile);
    double impulses = 0;
    for (const auto& impulse : curve.impulses) impulses += impulse.weight;
    // The continuous part and the point masses make a distribution whose mean is the one the
    // sampler draws (the cap cuts off less than 1e-6).
    EXPECT_NEAR(mass + impulses, 1.0, 1e-6) << name;
    EXPECT_NEAR(first_moment, profile.expected_delay(), 1e-5) << name;
    ASSERT_EQ(curve.impulses.size(), 1u) << name;
    EXPECT_DOUBLE_EQ(curve.impulses[0].x, 0.0);
    EXPECT_DOUBLE_EQ(curve.impulses[0].weight, 0.4);
    EXPECT_DOUBLE_EQ(curve.cap, profile.cap());
    EXPECT_DOUBLE_EQ(curve.x.front(), 0.0);
    EXPECT_DOUBLE_EQ(curve.x.back(), profile.cap());
  }
}

TEST(Stragglers, DensityIsTheFoldedNormal) {
  // One component N(1, 0.5): density at x is N(x; 1, 0.5) + N(-x; 1, 0.5).
  const auto profile = profile_of("1:0.5:1");
  const auto normal = [](double x, double mu, double sigma) {
    const double z = (x - mu) / sigma;
    return std::exp(-0.5 * z * z) / (sigma * std::sqrt(2 * std::numbers::pi));
  };
  for (const double x : {0.0, 0.3, 1.0, 2.2}) {
    EXPECT_NEAR(straggler_density(profile, x), normal(x, 1, 0.5) + normal(-x, 1, 0.5), 1e-12);
  }
  EXPECT_EQ(straggler_density(profile, -1), 0.0);
  // The component's mean is on the grid: its peak is not missed.
  const auto curve = straggler_curve(profile, 7);
  EXPECT_NE(std::find(curve.x.begin(), curve.x.end(), 1.0), curve.x.end());
}

TEST(Stragglers, DensityOfAnExponentialMixture) {
  // Half exponential of mean 0.4 s, half a point mass at 0: the curve and the impulse make a
  // distribution of the mean the sampler draws.
  const auto profile = profile_of("exp:0.4:0.5,0:0:0.5");
  EXPECT_NEAR(straggler_density(profile, 0.2), 0.5 / 0.4 * std::exp(-0.5), 1e-12);
  const auto [mass, first_moment] = integrate(profile);
  const auto curve = straggler_curve(profile);
  ASSERT_EQ(curve.impulses.size(), 1u);
  EXPECT_NEAR(mass + curve.impulses[0].weight, 1.0, 1e-6);
  EXPECT_NEAR(first_moment, profile.expected_delay(), 1e-5);
  EXPECT_FALSE(curve.x.empty());
}

TEST(Stragglers, PointMassesOnly) {
  const auto curve = straggler_curve(profile_of("0.5:0:0.25,0.5:0:0.25,2:0:0.5"));
  EXPECT_TRUE(curve.x.empty());
  ASSERT_EQ(curve.impulses.size(), 2u);  // the two at 0.5 s merge
  EXPECT_DOUBLE_EQ(curve.impulses[0].x, 0.5);
  EXPECT_DOUBLE_EQ(curve.impulses[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(curve.impulses[1].x, 2.0);
}

TEST(Scaling, WarmupIsATenthAtLeastOne) {
  EXPECT_EQ(warmup_steps(0, -1), 0u);
  EXPECT_EQ(warmup_steps(1, -1), 0u);
  EXPECT_EQ(warmup_steps(5, -1), 1u);
  EXPECT_EQ(warmup_steps(200, -1), 20u);
  EXPECT_EQ(warmup_steps(200, 0), 0u);
  EXPECT_EQ(warmup_steps(200, 7), 7u);
}

TEST(Scaling, SpeedupAndEfficiencyAgainstTheFewestWorkers) {
  const auto rows = scaling_table({{4, 350}, {1, 100}, {2, 190}, {2, 210}, {2, 500}});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_DOUBLE_EQ(rows[0].workers, 1);
  EXPECT_DOUBLE_EQ(rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(rows[1].throughput, 210);  // the median of three runs
  EXPECT_DOUBLE_EQ(rows[1].speedup, 2.1);
  EXPECT_DOUBLE_EQ(rows[1].efficiency, 1.05);
  EXPECT_DOUBLE_EQ(rows[2].speedup, 3.5);
  EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.875);
  // No single-worker run: the smallest counts as perfectly scaled.
  const auto from_two = scaling_table({{2, 200}, {8, 600}});
  EXPECT_DOUBLE_EQ(from_two[0].speedup, 2.0);
  EXPECT_DOUBLE_EQ(from_two[1].speedup, 6.0);
  EXPECT_DOUBLE_EQ(from_two[1].efficiency, 0.75);
  EXPECT_TRUE(scaling_table({}).empty());
}

TEST(Scaling, SeedsOfOneSettingGiveTheirMeanAndRange) {
  // Three seeds at 10 workers, two at 30 (the third never reached: NaN), none finite at 100.
  const auto points = mean_by_x({30, 10, 10, 100, 30, 10, 30}, {8, 2, 6, kNaN, 12, 4, kNaN});
  ASSERT_EQ(points.size(), 2u);
  EXPECT_DOUBLE_EQ(points[0].x, 10);
  EXPECT_DOUBLE_EQ(points[0].mean, 4);
  EXPECT_DOUBLE_EQ(points[0].min, 2);
  EXPECT_DOUBLE_EQ(points[0].max, 6);
  EXPECT_EQ(points[0].count, 3u);
  EXPECT_DOUBLE_EQ(points[1].x, 30);
  EXPECT_DOUBLE_EQ(points[1].mean, 10);
  EXPECT_DOUBLE_EQ(points[1].min, 8);
  EXPECT_DOUBLE_EQ(points[1].max, 12);
  EXPECT_EQ(points[1].count, 2u);
  EXPECT_TRUE(mean_by_x({}, {}).empty());
}

}  // namespace
}  // namespace mbkit::plot
