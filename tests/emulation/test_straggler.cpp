// Straggler induction: the named profiles and their caps, SPEC parsing and its round trip, the
// messages of bad --induce and --slowdown values, the closed-form expected delay against a
// numerical integral, and the sampler's determinism, range and statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/emulation/straggler.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

StragglerProfile profile_of(const std::string& text) {
  auto profile = parse_straggler_profile(text);
  if (!profile) throw std::runtime_error("no profile for '" + text + "'");
  return *profile;
}

// E[min(cap, |X|)] = integral over [0, cap] of P(|X| > t), by Simpson's rule: independent of
// the closed form the library uses.
double integrated_expected_delay(const StragglerProfile& profile) {
  const double cap = profile.cap();
  const auto survival = [&](double t) {
    double p = 0;
    for (const auto& c : profile.components) {
      if (c.std > 0) {
        const double above = 0.5 * std::erfc((t - c.mean) / (c.std * std::numbers::sqrt2));
        const double below = 0.5 * std::erfc((t + c.mean) / (c.std * std::numbers::sqrt2));
        p += c.weight * (above + below);
      }
    }
    return p;
  };
  const int intervals = 200000;  // even
  const double h = cap / intervals;
  double sum = survival(0) + survival(cap);
  for (int i = 1; i < intervals; ++i) sum += (i % 2 == 1 ? 4 : 2) * survival(i * h);
  // A component of std 0 is a step in the survival function, which Simpson's rule does badly.
  double steps = 0;
  for (const auto& c : profile.components) {
    if (c.std == 0) steps += c.weight * std::min(cap, c.mean);
  }
  return sum * h / 3 + steps;
}

std::vector<double> draws(const StragglerProfile& profile, std::uint64_t seed, int rank,
                          int count) {
  StragglerSampler sampler(profile, seed, rank);
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(sampler.next());
  return out;
}

double fraction(const std::vector<double>& values, double low, double high) {
  std::size_t inside = 0;
  for (double v : values) inside += (v >= low && v <= high) ? 1 : 0;
  return static_cast<double>(inside) / static_cast<double>(values.size());
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

TEST(StragglerProfile, NiagaraIsTheAmbMixture) {
  const auto profile = profile_of("niagara");
  EXPECT_EQ(profile.name, "niagara");
  const std::vector<StragglerComponent> expected = {
      {0, 0, 0.4}, {0, 0.4, 0.3}, {2, 0.3, 0.2}, {5, 0.3, 0.1}};
  EXPECT_EQ(profile.components, expected);
  EXPECT_DOUBLE_EQ(profile.cap(), 6.5);
  // The tail beyond the cap is 5 sigma away: the untruncated mixture mean to 1e-6.
  EXPECT_NEAR(profile.expected_delay(), 0.3 * 0.4 * std::sqrt(2 / std::numbers::pi) + 0.9, 1e-6);
  EXPECT_EQ(profile.describe(),
            "niagara: 0:0:0.4, 0:0.4:0.3, 2:0.3:0.2, 5:0.3:0.1 (cap 6.5 s, mean 0.996 s)");
  EXPECT_EQ(profile.spec(), "0:0:0.4,0:0.4:0.3,2:0.3:0.2,5:0.3:0.1");
}

TEST(StragglerProfile, CedarIsTheAmbMixture) {
  const auto profile = profile_of("cedar");
  EXPECT_EQ(profile.name, "cedar");
  const std::vector<StragglerComponent> expected = {
      {0, 0, 0.4}, {0.05, 0.04, 0.3}, {0.15, 0.03, 0.2}, {0.25, 0.03, 0.1}};
  EXPECT_EQ(profile.components, expected);
  EXPECT_DOUBLE_EQ(profile.cap(), 0.4);
  EXPECT_NEAR(profile.expected_delay(), integrated_expected_delay(profile), 1e-9);
  EXPECT_NEAR(profile.expected_delay(), 0.0712, 1e-4);
}

TEST(StragglerProfile, KnownNames) {
  EXPECT_EQ(known_straggler_profiles(), "niagara, cedar");
}

TEST(StragglerProfile, EmptyTextIsNoProfile) {
  EXPECT_FALSE(parse_straggler_profile("").has_value());
}

TEST(StragglerProfile, SpecIsParsedAndWeightsNormalised) {
  const auto profile = profile_of("0:0:0.5,1:0.1:0.5");
  EXPECT_EQ(profile.name, "custom");
  const std::vector<StragglerComponent> expected = {{0, 0, 0.5}, {1, 0.1, 0.5}};
  EXPECT_EQ(profile.components, expected);
  EXPECT_DOUBLE_EQ(profile.cap(), 1.5);

  const auto scaled = profile_of("1:0.5:1,3:0:3,2e-1:0:0");
  ASSERT_EQ(scaled.components.size(), 3u);
  EXPECT_DOUBLE_EQ(scaled.components[0].weight, 0.25);
  EXPECT_DOUBLE_EQ(scaled.components[1].weight, 0.75);
  EXPECT_EQ(scaled.components[2].weight, 0.0);
  EXPECT_EQ(scaled.components[2].mean, 0.2);
  // A component of weight 0 is never drawn but is part of the mixture as written.
  EXPECT_DOUBLE_EQ(scaled.cap(), 3.5);

  // "-0" is zero, and is written back as "0".
  const auto signed_zero = profile_of("-0:0:1");
  EXPECT_FALSE(std::signbit(signed_zero.components[0].mean));
  EXPECT_EQ(signed_zero.spec(), "0:0:1");
}

TEST(StragglerProfile, SpecReadsBackToTheSameProfile) {
  for (const std::string text :
       {"niagara", "cedar", "0:0:0.5,1:0.1:0.5", "1:0.5:1,3:0:2", "0.1:0.2:0.7,1e-3:0:3,7:1:0.1",
        "0:0:1,0:0:1,0:0:1", "0.3:0.7:0.11,2000:3:0.13"}) {
    SCOPED_TRACE(text);
    const auto profile = profile_of(text);
    const auto again = profile_of(profile.spec());
    EXPECT_EQ(again.components, profile.components);
    EXPECT_EQ(again.spec(), profile.spec());
    EXPECT_EQ(again.cap(), profile.cap());
  }
}

TEST(StragglerProfile, CapIsFiveSigmaOfTheWidestComponentAtMost1024) {
  EXPECT_DOUBLE_EQ(profile_of("0:1:1").cap(), 5);
  EXPECT_DOUBLE_EQ(profile_of("3:0:1,1:1:1").cap(), 6);
  EXPECT_DOUBLE_EQ(profile_of("0:0:1").cap(), 0);
  EXPECT_EQ(profile_of("1000:10:1").cap(), 1024);
  EXPECT_EQ(profile_of("2000:0:1").cap(), 1024);
}

TEST(StragglerProfile, ExpectedDelayMatchesTheIntegral) {
  for (const std::string text : {"niagara", "cedar", "0:1:1", "0.5:1:1", "1:2:1,10:3:2",
                                 "1000:10:1", "0.1:0.2:0.7,1e-3:0:3,7:1:0.1"}) {
    SCOPED_TRACE(text);
    const auto profile = profile_of(text);
    EXPECT_NEAR(profile.expected_delay(), integrated_expected_delay(profile),
                1e-9 * std::max(1.0, profile.cap()));
  }
  // Folded standard normal: sqrt(2 / pi), less the little beyond the cap at 5 sigma.
  EXPECT_NEAR(profile_of("0:1:1").expected_delay(), std::sqrt(2 / std::numbers::pi), 1e-5);
  EXPECT_DOUBLE_EQ(profile_of("2:0:1").expected_delay(), 2);
  EXPECT_DOUBLE_EQ(profile_of("2000:0:1").expected_delay(), 1024);
  // The cap at 2.4 sigma takes E[(X - cap)+] = std (phi(2.4) - 2.4 Q(2.4)) off the mean.
  const double z = 2.4;
  const double density = std::exp(-z * z / 2) / std::sqrt(2 * std::numbers::pi);
  const double tail = 0.5 * std::erfc(z / std::numbers::sqrt2);
  EXPECT_NEAR(profile_of("1000:10:1").expected_delay(), 1000 - 10 * (density - z * tail), 1e-9);
}

TEST(StragglerProfile, BadInduceValuesAreUsageErrors) {
  EXPECT_MBKIT_ERROR(
      parse_straggler_profile("x:1:1"), ExitCode::kUsage,
      "--induce: 'x:1:1' is not NAME (niagara, cedar) or MEAN:STD:WEIGHT,... or exp:MEAN: "
      "'x' is not a number");
  struct Case {
    const char* text;
    const char* detail;
  };
  const Case cases[] = {
      {"fast", "--induce: 'fast' is not NAME (niagara, cedar) or MEAN:STD:WEIGHT,..."},
      {"Niagara", "'Niagara' is not NAME"},
      {" niagara", "' niagara' is not NAME"},
      {"1:1", "'1:1' does not have 3 fields"},
      {"1:1:1:1", "'1:1:1:1' does not have 3 fields"},
      {"niagara,1:1:1", "'niagara' does not have 3 fields"},
      {"1:1:1,", "component 2 is empty"},
      {",1:1:1", "component 1 is empty"},
      {"1:1:", "'' is not a number"},
      {" 1:1:1", "' 1' is not a number"},
      {"1:1 :1", "'1 ' is not a number"},
      {"+1:1:1", "'+1' is not a number"},
      {"0x1:1:1", "'0x1' is not a number"},
      {"1:1:1abc", "'1abc' is not a number"},
      {"1:inf:1", "'inf' is not a number"},
      {"nan:1:1", "'nan' is not a number"},
      {"1:1:1e999", "'1e999' is not a number"},
      {"-1:0:1", "mean -1 is negative"},
      {"0:-0.5:1", "std -0.5 is negative"},
      {"0:0:-1", "weight -1 is negative"},
      {"0:0:0", "no weight is positive"},
      {"1:1:0,2:0:0", "no weight is positive"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_MBKIT_ERROR(parse_straggler_profile(c.text), ExitCode::kUsage, "--induce: ");
    EXPECT_MBKIT_ERROR(parse_straggler_profile(c.text), ExitCode::kUsage, c.detail);
  }
}

TEST(StragglerSampler, SameSeedAndRankGiveTheSameDelays) {
  const auto profile = profile_of("niagara");
  const auto first = draws(profile, 42, 3, 2000);
  EXPECT_EQ(draws(profile, 42, 3, 2000), first);

  const auto other_rank = draws(profile, 42, 4, 2000);
  const auto other_seed = draws(profile, 43, 3, 2000);
  int rank_differs = 0;
  int seed_differs = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    rank_differs += first[i] != other_rank[i] ? 1 : 0;
    seed_differs += first[i] != other_seed[i] ? 1 : 0;
  }
  // Two independent streams are both at exactly 0 about 16% of the time.
  EXPECT_GT(rank_differs, 1500);
  EXPECT_GT(seed_differs, 1500);
}

TEST(StragglerSampler, DelaysOfASeedAreFixed) {
  // The delays of --seed 42 are part of what a run records: they must not change with the
  // compiler, the standard library or a later version.
  const auto values = draws(profile_of("1:0.5:1,3:0:1"), 42, 1, 6);
  const std::vector<double> expected = {3, 0.91491607555863042, 3,
                                        3, 0.99320552537310736, 1.7407189486400756};
  ASSERT_EQ(values.size(), expected.size());
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(values[i], expected[i], 1e-12) << i;
}

TEST(MessageDelay, DrawsOfASeedAreFixedAndScaleWithTheStd) {
  // --async-delay-std's delays, std |N(0, 1)| per (seed, worker, round): the values were
  // computed by hand (a Python port of the xoshiro256** stream and the polar method, which
  // gives DelaysOfASeedAreFixed's values too); they must not change with the compiler.
  const std::vector<std::pair<std::pair<int, std::int64_t>, double>> expected = {
      {{0, 0}, 0.17459659188687143},
      {{0, 1}, 0.8417978518101406},
      {{1, 0}, 0.4401773187664818},
      {{1, 5}, 0.4875388531639286},
      {{3, 2}, 1.0533013022096567}};
  for (const auto& [where, value] : expected) {
    const auto [worker, round] = where;
    EXPECT_NEAR(message_delay(0.5, 42, worker, round), value, 1e-15) << worker << " " << round;
    EXPECT_NEAR(message_delay(1.0, 42, worker, round), 2 * value, 1e-15);
    EXPECT_EQ(message_delay(0.0, 42, worker, round), 0.0);
  }
  EXPECT_NE(message_delay(0.5, 43, 0, 0), message_delay(0.5, 42, 0, 0));
}

TEST(MessageDelay, IsAFoldedStandardNormalTimesTheStd) {
  // The mean of |N(0, 1)| is sqrt(2 / pi); its standard deviation sqrt(1 - 2 / pi).
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double d = message_delay(2.0, 7, i % 10, i / 10);
    ASSERT_GE(d, 0.0);
    sum += d;
  }
  const double mean = sum / n;
  const double expected = 2.0 * std::sqrt(2.0 / std::numbers::pi);
  EXPECT_NEAR(mean, expected, 4 * 2.0 * std::sqrt(1 - 2.0 / std::numbers::pi) / std::sqrt(n));
}

TEST(StragglerSampler, DelaysStayWithinZeroAndTheCap) {
  for (const std::string text : {"niagara", "cedar", "0:1:1", "1000:100:1"}) {
    SCOPED_TRACE(text);
    const auto profile = profile_of(text);
    const auto values = draws(profile, 7, 0, 20000);
    const auto [low, high] = std::minmax_element(values.begin(), values.end());
    EXPECT_GE(*low, 0.0);
    EXPECT_LE(*high, profile.cap());
  }
  // Where the cap is inside the distribution, draws beyond it are the cap exactly.
  const auto capped = draws(profile_of("1000:100:1"), 7, 0, 20000);
  EXPECT_NEAR(fraction(capped, 1024, 1024), 0.5 * std::erfc(0.24 / std::numbers::sqrt2), 0.01);
}

TEST(StragglerSampler, NiagaraStatistics) {
  const auto profile = profile_of("niagara");
  const auto values = draws(profile, 2024, 0, 200000);
  EXPECT_NEAR(mean_of(values), profile.expected_delay(), 0.01 * profile.expected_delay());
  // The 0:0 component gives exact zeros; the 5:0.3 one all the delays above 3.5 s.
  EXPECT_NEAR(fraction(values, 0, 0), 0.4, 0.005);
  EXPECT_NEAR(fraction(values, 3.5, 6.5), 0.1, 0.004);
  EXPECT_NEAR(fraction(values, 1e-300, 3.5), 0.5, 0.005);
}

TEST(StragglerSampler, CedarStatistics) {
  const auto profile = profile_of("cedar");
  const auto values = draws(profile, 2024, 5, 200000);
  EXPECT_NEAR(mean_of(values), profile.expected_delay(), 0.01 * profile.expected_delay());
  EXPECT_NEAR(fraction(values, 0, 0), 0.4, 0.005);
}

TEST(StragglerSampler, ComponentsAreDrawnInProportionToTheirWeights) {
  // Components far apart, so that each delay tells which one it came from.
  const auto profile = profile_of("0:0:1,10:0.5:2,20:0.5:1");
  const auto values = draws(profile, 99, 2, 200000);
  EXPECT_NEAR(fraction(values, 0, 0), 0.25, 0.004);
  EXPECT_NEAR(fraction(values, 5, 15), 0.5, 0.004);
  EXPECT_NEAR(fraction(values, 15, 22.5), 0.25, 0.004);
  EXPECT_NEAR(mean_of(values), profile.expected_delay(), 0.01 * profile.expected_delay());
  // A component of weight 0 is never drawn.
  const auto never = draws(profile_of("0:0:1,100:0:0"), 99, 2, 10000);
  EXPECT_EQ(fraction(never, 0, 0), 1.0);
}

TEST(StragglerSampler, NegativeRankIsRefused) {
  EXPECT_THROW(StragglerSampler(profile_of("niagara"), 1, -1), Error);
}

TEST(Slowdown, EmptyTextSlowsNobody) {
  const auto slowdown = parse_slowdown("");
  EXPECT_TRUE(slowdown.empty());
  EXPECT_EQ(slowdown.factor_for(0), 1.0);
  EXPECT_EQ(slowdown.extra_delay(0, 2.5), 0.0);
  EXPECT_EQ(slowdown.describe(), "none");
  slowdown.check_ranks(1);
}

TEST(Slowdown, FactorsByRank) {
  const auto slowdown = parse_slowdown("2=3,4=1.5,0=1");
  EXPECT_EQ(slowdown.factors.size(), 3u);
  EXPECT_EQ(slowdown.factor_for(2), 3.0);
  EXPECT_EQ(slowdown.factor_for(4), 1.5);
  EXPECT_EQ(slowdown.factor_for(0), 1.0);
  EXPECT_EQ(slowdown.factor_for(1), 1.0);
  EXPECT_EQ(slowdown.factor_for(5), 1.0);
  EXPECT_DOUBLE_EQ(slowdown.extra_delay(2, 0.25), 0.5);
  EXPECT_DOUBLE_EQ(slowdown.extra_delay(4, 0.25), 0.125);
  EXPECT_EQ(slowdown.extra_delay(1, 0.25), 0.0);
  EXPECT_EQ(slowdown.describe(), "rank 0 x1, rank 2 x3, rank 4 x1.5");
}

TEST(Slowdown, RanksMustExist) {
  const auto slowdown = parse_slowdown("2=3,4=1.5");
  slowdown.check_ranks(5);
  slowdown.check_ranks(100);
  EXPECT_MBKIT_ERROR(slowdown.check_ranks(4), ExitCode::kUsage,
                     "--slowdown: rank 4 does not exist (4 workers)");
  EXPECT_MBKIT_ERROR(slowdown.check_ranks(2), ExitCode::kUsage, "rank 2 does not exist");
  EXPECT_MBKIT_ERROR(parse_slowdown("1=2").check_ranks(1), ExitCode::kUsage,
                     "rank 1 does not exist (1 worker)");
}

TEST(Slowdown, BadSlowdownValuesAreUsageErrors) {
  EXPECT_MBKIT_ERROR(parse_slowdown("2=x"), ExitCode::kUsage,
                     "--slowdown: '2=x' is not RANK=FACTOR,...: 'x' is not a number");
  struct Case {
    const char* text;
    const char* detail;
  };
  const Case cases[] = {
      {"2", "'2' is not RANK=FACTOR"},
      {"2=3=4", "'2=3=4' is not RANK=FACTOR"},
      {"2=3,", "item 2 is empty"},
      {",2=3", "item 1 is empty"},
      {"2=", "'' is not a number"},
      {"=3", "'' is not a rank"},
      {"x=3", "'x' is not a rank"},
      {"-1=3", "'-1' is not a rank"},
      {"+1=3", "'+1' is not a rank"},
      {"2.5=3", "'2.5' is not a rank"},
      {" 2=3", "' 2' is not a rank"},
      {"99999999999=3", "'99999999999' is not a rank"},
      {"2=inf", "'inf' is not a number"},
      {"2=nan", "'nan' is not a number"},
      {"2= 3", "' 3' is not a number"},
      {"2=0.5", "factor 0.5 of rank 2 is below 1"},
      {"2=0", "factor 0 of rank 2 is below 1"},
      {"2=-3", "factor -3 of rank 2 is below 1"},
      {"2=3,1=2,2=3", "rank 2 is given twice"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_MBKIT_ERROR(parse_slowdown(c.text), ExitCode::kUsage, "--slowdown: ");
    EXPECT_MBKIT_ERROR(parse_slowdown(c.text), ExitCode::kUsage, c.detail);
  }
}

}  // namespace
}  // namespace mbkit::emulation
