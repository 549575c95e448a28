// Exponential straggler components (--induce exp:MEAN, or exp:MEAN:WEIGHT items in a mixture)
// and the expected largest of n workers' delays, what a synchronous step waits for: H_n x mean
// for exponential delays (the AMB paper's model), the profile's own mean for one worker, and a
// Monte-Carlo estimate of the same draws for a mixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mbkit/emulation/straggler.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

double harmonic(int n) {
  double h = 0;
  for (int k = 1; k <= n; ++k) h += 1.0 / k;
  return h;
}

TEST(ExponentialProfile, ParsesAloneAndInAMixtureAndReadsBack) {
  const auto alone = parse_straggler_profile("exp:0.5");
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->name, "exponential");
  ASSERT_EQ(alone->components.size(), 1u);
  EXPECT_TRUE(alone->components[0].exponential);
  EXPECT_EQ(alone->components[0].mean, 0.5);
  EXPECT_EQ(alone->components[0].weight, 1.0);
  EXPECT_EQ(alone->spec(), "exp:0.5:1");
  EXPECT_EQ(parse_straggler_profile(alone->spec())->components, alone->components);
  EXPECT_EQ(alone->cap(), 15.0);  // 30 means
  const auto mixture = parse_straggler_profile("exp:2:0.25,0:0:0.75");
  ASSERT_TRUE(mixture.has_value());
  EXPECT_EQ(mixture->name, "custom");
  EXPECT_TRUE(mixture->components[0].exponential);
  EXPECT_FALSE(mixture->components[1].exponential);
  EXPECT_EQ(parse_straggler_profile(mixture->spec())->components, mixture->components);
  EXPECT_NE(mixture->describe().find("exp:2:0.25"), std::string::npos);
}

TEST(ExponentialProfile, BadExponentialsAreUsageErrors) {
  for (const char* text : {"exp:0", "exp:-1", "exp:x", "exp:1:2:3", "exp:1,0:0:1", "exp:"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(test::code_of([&] { parse_straggler_profile(text); }), ExitCode::kUsage);
  }
}

TEST(ExponentialProfile, DrawsHaveTheMeanAndStayUnderTheCap) {
  const auto profile = *parse_straggler_profile("exp:0.5");
  StragglerSampler sampler(profile, 3, 1);
  double sum = 0, square = 0;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const double d = sampler.next();
    ASSERT_GE(d, 0.0);
    ASSERT_LE(d, profile.cap());
    sum += d;
    square += d * d;
  }
  const double mean = sum / kDraws;
  EXPECT_NEAR(mean, 0.5, 0.5 * 0.01);
  EXPECT_NEAR(std::sqrt(square / kDraws - mean * mean), 0.5, 0.5 * 0.02);  // std = mean
  EXPECT_NEAR(profile.expected_delay(), 0.5, 1e-12);
}

TEST(ExpectedMax, OfExponentialsIsTheHarmonicNumberTimesTheMean) {
  const auto profile = *parse_straggler_profile("exp:0.5");
  for (const int n : {1, 2, 10, 100, 1000, 10000}) {
    SCOPED_TRACE(n);
    EXPECT_NEAR(profile.expected_max(n), 0.5 * harmonic(n), 1e-6 * harmonic(n));
  }
}

TEST(ExpectedMax, OfOneWorkerIsTheMeanDelay) {
  for (const char* name : {"niagara", "cedar", "0.3:0.1:1", "exp:1:0.5,2:0.5:0.5"}) {
    SCOPED_TRACE(name);
    const auto profile = *parse_straggler_profile(name);
    EXPECT_NEAR(profile.expected_max(1), profile.expected_delay(), 1e-6);
  }
}

TEST(ExpectedMax, MatchesTheDrawsOfAMixture) {
  // The largest of 16 niagara delays, averaged over 40,000 simulated steps.
  const auto profile = *parse_straggler_profile("niagara");
  std::vector<StragglerSampler> workers;
  for (int w = 0; w < 16; ++w) workers.emplace_back(profile, 5, w);
  double total = 0;
  constexpr int kSteps = 40000;
  for (int step = 0; step < kSteps; ++step) {
    double longest = 0;
    for (auto& worker : workers) longest = std::max(longest, worker.next());
    total += longest;
  }
  EXPECT_NEAR(total / kSteps, profile.expected_max(16), 0.01 * profile.expected_max(16));
  // More workers wait longer, never past the cap.
  EXPECT_LT(profile.expected_max(16), profile.expected_max(1000));
  EXPECT_LT(profile.expected_max(100000), profile.cap());
}

TEST(ExpectedMax, TheDistributionFunctionIsTheMixtures) {
  const auto profile = *parse_straggler_profile("exp:1:0.5,2:0:0.5");
  EXPECT_EQ(profile.cdf(-1), 0.0);
  EXPECT_NEAR(profile.cdf(1.0), 0.5 * (1 - std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(profile.cdf(2.0), 0.5 * (1 - std::exp(-2.0)) + 0.5, 1e-12);
  EXPECT_EQ(profile.cdf(profile.cap()), 1.0);
}

}  // namespace
}  // namespace mbkit::emulation
