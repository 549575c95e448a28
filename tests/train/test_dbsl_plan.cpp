// The DBSL plan: Eq. 8 reproduces the paper's Table 2; the plan for unequal devices gives every
// worker the same predicted round time, adds up to N, and is Eq. 8's for equal devices;
// impossible plans are usage errors that say why.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mbkit/train/dbsl_plan.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

// The paper's device: GTX 1080, ResNet-18, CIFAR (algorithms.md §3.1).
constexpr TimeModel kGtx1080{0.00056607, 0.014041204};

DbslPlanInput table2(double k, int small) {
  DbslPlanInput in;
  in.samples = 50000;
  in.workers = 4;
  in.small_workers = small;
  in.base_batch = 500;
  in.extra_time = k;
  in.models = {kGtx1080};
  return in;
}

struct Row {
  double k;
  int small, b_small;
  std::int64_t d_small, d_large;
};

// Paper Table 2.
const std::vector<Row> kTable2 = {{1.05, 1, 83, 10625, 13125},  {1.05, 2, 154, 11875, 13125},
                                  {1.05, 3, 205, 12291, 13125}, {1.05, 4, 242, 12500, 13125},
                                  {1.1, 1, 38, 8750, 13750},    {1.1, 2, 87, 11250, 13750},
                                  {1.1, 3, 127, 12083, 13750},  {1.1, 4, 160, 12500, 13750}};

TEST(DbslPlan, Eq8ReproducesTable2) {
  for (const Row& row : kTable2) {
    SCOPED_TRACE(testing::Message() << "k=" << row.k << " small=" << row.small);
    const DbslPlan plan = eq8_plan(table2(row.k, row.small));
    ASSERT_EQ(plan.workers.size(), 4u);
    for (int w = 0; w < 4; ++w) {
      const auto& p = plan.workers[static_cast<std::size_t>(w)];
      const bool small = w >= 4 - row.small;
      EXPECT_EQ(p.small, small);
      EXPECT_EQ(p.batch, small ? row.b_small : 500);
      EXPECT_EQ(p.samples, small ? row.d_small : row.d_large);
      EXPECT_DOUBLE_EQ(p.factor, small ? static_cast<double>(row.d_small) / row.d_large : 1.0);
    }
    // Both kinds take about k times the all-large round (int() costs less than a batch).
    for (const auto& p : plan.workers) {
      EXPECT_NEAR(p.predicted_time, plan.target_time, kGtx1080.b + p.batch * kGtx1080.a);
    }
  }
}

TEST(DbslPlan, AllLargeIsTheBaseline) {
  const DbslPlan plan = eq8_plan(table2(1.0, 0));
  for (const auto& p : plan.workers) {
    EXPECT_EQ(p.batch, 500);
    EXPECT_EQ(p.samples, 12500);
  }
  EXPECT_EQ(plan.total_samples(), 50000);
  EXPECT_NEAR(plan.base_time, (kGtx1080.a + kGtx1080.b / 500) * 12500, 1e-12);
}

TEST(DbslPlan, EqualDevicesReduceToEq8) {
  std::vector<DbslPlanInput> inputs;
  for (const Row& row : kTable2) inputs.push_back(table2(row.k, row.small));
  for (double k : {1.0, 1.02, 1.07, 1.15}) {
    for (int small = 0; small <= 3; ++small) {
      auto in = table2(k, small);
      in.samples = 60000;
      in.workers = 4;
      in.models = std::vector<TimeModel>(4, TimeModel{0.0002, 0.01});
      inputs.push_back(in);
    }
  }
  for (auto in : inputs) {
    SCOPED_TRACE(testing::Message() << "k=" << in.extra_time << " small=" << in.small_workers);
    const DbslPlan expected = eq8_plan(in);
    in.models = std::vector<TimeModel>(4, in.models[0]);  // one model per worker
    const DbslPlan general = dbsl_plan(in);
    for (std::size_t w = 0; w < 4; ++w) {
      EXPECT_EQ(general.workers[w].batch, expected.workers[w].batch);
      EXPECT_EQ(general.workers[w].samples, expected.workers[w].samples);
      EXPECT_EQ(general.workers[w].small, expected.workers[w].small);
      EXPECT_NEAR(general.workers[w].factor, expected.workers[w].factor, 1e-12);
    }
    EXPECT_NEAR(general.target_time, expected.target_time, 1e-9 * expected.target_time);
  }
}

TEST(DbslPlan, UnequalDevicesTakeTheSameTimeAndAddUpToN) {
  DbslPlanInput in = table2(1.1, 2);
  // Two fast devices, a slow one and one twice as slow: a small and a large of each speed.
  in.models = {{0.0004, 0.01}, {0.0008, 0.02}, {0.0004, 0.01}, {0.0008, 0.03}};
  const DbslPlan plan = dbsl_plan(in);
  EXPECT_FALSE(plan.workers[0].small);
  EXPECT_TRUE(plan.workers[3].small);
  // Faster devices take more samples.
  EXPECT_GT(plan.workers[0].samples, plan.workers[1].samples);
  EXPECT_GT(plan.workers[2].samples, plan.workers[3].samples);
  EXPECT_LT(plan.workers[2].batch, 500);
  for (std::size_t w = 0; w < 4; ++w) {
    const auto& p = plan.workers[w];
    // int() of the samples and of the batch: within a batch's time, far below the round's.
    EXPECT_NEAR(p.predicted_time, plan.target_time, in.models[w].seconds(p.batch))
        << "worker " << w;
    EXPECT_LT(std::fabs(p.predicted_time - plan.target_time), 0.01 * plan.target_time);
  }
  // int() loses at most a sample per worker.
  EXPECT_LE(plan.total_samples(), in.samples);
  EXPECT_GE(plan.total_samples(), in.samples - 4);
  // The all-large time is the one at which the four together take N samples at B_L.
  double taken = 0;
  for (const auto& m : in.models) taken += plan.base_time / round_time(m, 1, 500);
  EXPECT_NEAR(taken, 50000, 1e-6);
}

TEST(DbslPlan, ImpossiblePlansSayWhy) {
  EXPECT_MBKIT_ERROR(eq8_plan(table2(0.9, 1)), ExitCode::kUsage, "--extra-time 0.9 must be at");
  EXPECT_MBKIT_ERROR(eq8_plan(table2(1.05, 5)), ExitCode::kUsage, "at most 4 can be small");
  EXPECT_MBKIT_ERROR(dbsl_plan(table2(1.05, -1)), ExitCode::kUsage, "--small-workers -1");
  // k = 1.32: the three large workers take 49500 samples; the small one's 500 would need a
  // batch below 1.
  EXPECT_MBKIT_ERROR(eq8_plan(table2(1.32, 1)), ExitCode::kUsage,
                     "impossible plan: small worker 4");
  EXPECT_MBKIT_ERROR(dbsl_plan(table2(1.32, 1)), ExitCode::kUsage,
                     "impossible plan: small worker 4");
  EXPECT_MBKIT_ERROR(eq8_plan(table2(1.4, 1)), ExitCode::kUsage, "none is left for the small");
  auto two_models = table2(1.05, 1);
  two_models.models.push_back(kGtx1080);
  EXPECT_MBKIT_ERROR(dbsl_plan(two_models), ExitCode::kUsage, "one per worker (4), not 2");
}

TEST(DbslPlan, ParsesTimeModels) {
  const auto m = parse_time_model_ab("0.00056607, 0.014041204", "--time-model-ab");
  EXPECT_DOUBLE_EQ(m.a, 0.00056607);
  EXPECT_DOUBLE_EQ(m.b, 0.014041204);
  EXPECT_MBKIT_ERROR(parse_time_model_ab("0.1", "--time-model-ab"), ExitCode::kUsage,
                     "--time-model-ab: '0.1' is not A,B");
  EXPECT_MBKIT_ERROR(parse_time_model_ab("-1,2", "--time-model-ab"), ExitCode::kUsage,
                     "needs A >= 0 and B >= 0");
  EXPECT_MBKIT_ERROR(parse_time_model_ab("0,0", "--time-model-ab"), ExitCode::kUsage, "not both 0");
}

TEST(DbslPlan, TableAndJsonNameEveryWorker) {
  const auto in = table2(1.05, 1);
  const DbslPlan plan = eq8_plan(in);
  const std::string table = plan_table(plan, in);
  EXPECT_NE(table.find("4       small       83     10625"), std::string::npos) << table;
  EXPECT_NE(table.find("1       large      500     13125"), std::string::npos) << table;
  const std::string json = plan_json(plan, in);
  EXPECT_NE(json.find("\"batch\": 83"), std::string::npos) << json;
  EXPECT_NE(json.find("\"samples\": 10625"), std::string::npos) << json;
}

}  // namespace
}  // namespace mbkit::train
