// --cpu-quota: the CFS quota's window arithmetic against values computed by hand (a worker under
// quota q per period P is runnable during [kP, kP + q) only), and the option's parsing and its
// messages.
#include <gtest/gtest.h>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

// Half a core in periods of 100 ms: runnable in [0, 0.05), [0.1, 0.15), [0.2, 0.25), ...
constexpr QuotaWindow kHalf{0.05, 0.1};
constexpr double kTight = 1e-12;

TEST(QuotaWindow, RunnableInTheFirstQuotaOfEachPeriod) {
  EXPECT_NEAR(kHalf.runnable_from(0.0), 0.0, kTight);
  EXPECT_NEAR(kHalf.runnable_from(0.03), 0.03, kTight);
  EXPECT_NEAR(kHalf.runnable_from(0.05), 0.1, kTight);  // the quota is spent at 0.05
  EXPECT_NEAR(kHalf.runnable_from(0.07), 0.1, kTight);
  EXPECT_NEAR(kHalf.runnable_from(0.15), 0.2, kTight);
  EXPECT_NEAR(kHalf.runnable_from(1.249), 1.249, kTight);
  EXPECT_NEAR(kHalf.runnable_from(1.26), 1.3, kTight);
}

TEST(QuotaWindow, ComputeCountsOnlyRunnableTime) {
  // 0.01 in [0.04, 0.05), stopped until 0.1, the other 0.02 in [0.1, 0.12).
  EXPECT_NEAR(kHalf.compute_end(0.04, 0.03), 0.12, kTight);
  // 0.05 + 0.05 in the first two periods, the last 0.02 from 0.2.
  EXPECT_NEAR(kHalf.compute_end(0.0, 0.12), 0.22, kTight);
  // Within one window: as on a core of its own.
  EXPECT_NEAR(kHalf.compute_end(0.1, 0.03), 0.13, kTight);
  // Exactly the quota: ends as the quota runs out.
  EXPECT_NEAR(kHalf.compute_end(0.0, 0.05), 0.05, kTight);
  // Starting while stopped: nothing happens until the next period.
  EXPECT_NEAR(kHalf.compute_end(0.07, 0.01), 0.11, kTight);
  EXPECT_NEAR(kHalf.compute_end(0.07, 0.0), 0.1, kTight);
  // A long compute from the middle of a window: 0.02 + 4 x 0.05 + 0.03 = 0.25 from 0.33.
  EXPECT_NEAR(kHalf.compute_end(0.33, 0.25), 0.83, kTight);
  // A tenth of a core in periods of 2 ms: 0.0005 of compute needs the windows of 5 periods.
  const QuotaWindow tenth{0.0002, 0.002};
  EXPECT_NEAR(tenth.compute_end(0.0, 0.001), 0.0082, kTight);
  // A tiny quota takes its periods in one go: 1 s of compute at 1 us per second.
  const QuotaWindow tiny{1e-6, 1.0};
  EXPECT_NEAR(tiny.compute_end(0.0, 1.0), 999999.0 + 1e-6, 1e-6);
  // A whole core: no stop.
  const QuotaWindow whole{0.1, 0.1};
  EXPECT_NEAR(whole.compute_end(0.37, 1.5), 1.87, 1e-9);
}

TEST(CpuQuota, ParsesRanksAndWindows) {
  EXPECT_TRUE(parse_cpu_quota("").empty());
  EXPECT_EQ(parse_cpu_quota("").describe(), "none");
  const auto quota = parse_cpu_quota("1=0.05/0.1,3=0.001/0.002");
  ASSERT_TRUE(quota.for_rank(1));
  EXPECT_EQ(quota.for_rank(1)->quota, 0.05);
  EXPECT_EQ(quota.for_rank(1)->period, 0.1);
  EXPECT_EQ(quota.for_rank(3)->quota, 0.001);
  EXPECT_FALSE(quota.for_rank(2));
  EXPECT_EQ(quota.describe(), "rank 1 0.05 s per 0.1 s, rank 3 0.001 s per 0.002 s");
  quota.check_ranks(4);
  EXPECT_MBKIT_ERROR(quota.check_ranks(3), ExitCode::kUsage,
                     "--cpu-quota: rank 3 does not exist (3 ranks)");
}

TEST(CpuQuota, BadValuesAreUsageErrors) {
  struct Case {
    const char* text;
    const char* detail;
  };
  for (const Case& c :
       {Case{"1=0.05", "'0.05' is not QUOTA/PERIOD"}, Case{"1=x/0.1", "'x' is not a number"},
        Case{"1=0.05/0", "the period of rank 1 is not positive"},
        Case{"1=0.2/0.1", "the quota of rank 1 is not above 0 and at most"},
        Case{"1=0/0.1", "the quota of rank 1 is not above 0"},
        Case{"a=0.05/0.1", "'a' is not a rank"}, Case{"1=0.05/0.1,", "item 2 is empty"},
        Case{"1=0.05/0.1,1=0.01/0.1", "rank 1 is given twice"}}) {
    SCOPED_TRACE(c.text);
    EXPECT_MBKIT_ERROR(
        parse_cpu_quota(c.text), ExitCode::kUsage,
        cat("--cpu-quota: '", c.text, "' is not RANK=QUOTA/PERIOD,... (seconds): ", c.detail));
  }
}

}  // namespace
}  // namespace mbkit::emulation
