// The step's selection of gradients (--backup-workers, --k-sync): the first K ready times, ties
// to the lower worker; the emulated step time of a selection is the last used worker's.
#include <gtest/gtest.h>

#include <vector>

#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/step_selection.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::train {
namespace {

TEST(StepSelection, TakesTheFirstKReadyTimes) {
  const auto selection = StepSelection::first_arrivals(3, 5);
  EXPECT_TRUE(selection.drops());
  EXPECT_EQ(selection.describe(), "first 3 of 5");
  const std::vector<double> ready{0.9, 0.2, 0.5, 0.1, 0.7};
  EXPECT_EQ(selection.select(ready), (std::vector<bool>{false, true, true, true, false}));
}

TEST(StepSelection, EqualTimesGoToTheLowerWorker) {
  const auto selection = StepSelection::first_arrivals(2, 4);
  const std::vector<double> ready{0.5, 0.5, 0.5, 0.1};
  EXPECT_EQ(selection.select(ready), (std::vector<bool>{true, false, false, true}));
}

// The wall clock takes gradients one by one as they arrive: the same choice as select() over
// ready times in that order.
std::vector<bool> take_in_order(const StepSelection& selection, const std::vector<int>& order) {
  std::vector<bool> taken(static_cast<std::size_t>(selection.workers()), false);
  for (const int w : order) {
    if (selection.takes(taken, w)) taken[static_cast<std::size_t>(w)] = true;
  }
  EXPECT_TRUE(selection.complete(taken));
  return taken;
}

TEST(StepSelection, ArrivalsTakenOneByOneMakeTheReadyTimesChoice) {
  const auto first3 = StepSelection::first_arrivals(3, 5);
  EXPECT_EQ(take_in_order(first3, {3, 1, 2, 4, 0}),
            first3.select(std::vector<double>{0.9, 0.2, 0.5, 0.1, 0.7}));
  std::vector<bool> taken(5, false);
  taken[3] = taken[1] = true;
  EXPECT_FALSE(first3.complete(taken));
  EXPECT_FALSE(first3.takes(taken, 3));  // already in
  const auto coded = StepSelection::first_of_groups(3, 6);
  EXPECT_EQ(take_in_order(coded, {2, 1, 4, 0, 3, 5}),
            (std::vector<bool>{false, false, true, false, true, false}));
  EXPECT_EQ(take_in_order(coded, {2, 1, 4, 0, 3, 5}),
            coded.select(std::vector<double>{0.4, 0.2, 0.1, 0.5, 0.3, 0.6}));
  std::vector<bool> one_group(6, false);
  one_group[0] = true;
  EXPECT_FALSE(coded.takes(one_group, 2));  // its group has its gradient
  EXPECT_TRUE(coded.takes(one_group, 5));
  EXPECT_FALSE(coded.complete(one_group));
  const auto all = StepSelection::first_arrivals(4, 4);
  EXPECT_EQ(take_in_order(all, {3, 2, 1, 0}), std::vector<bool>(4, true));
}

TEST(StepSelection, AllOfThemDropsNothing) {
  const auto selection = StepSelection::first_arrivals(4, 4);
  EXPECT_FALSE(selection.drops());
  EXPECT_EQ(selection.describe(), "all");
  EXPECT_EQ(selection.select(std::vector<double>{3, 2, 1, 0}), std::vector<bool>(4, true));
}

TEST(StepSelection, OptionsGiveTheSameRuleBothWays) {
  TrainOptions options;
  options.backup_workers = 2;
  const auto backup = StepSelection::from_options(options, 8);
  options.backup_workers = 0;
  options.k_sync = 6;
  const auto k_sync = StepSelection::from_options(options, 8);
  EXPECT_EQ(backup.used_per_step(), 6);
  EXPECT_EQ(k_sync.used_per_step(), 6);
  options.k_sync = 0;
  EXPECT_FALSE(StepSelection::from_options(options, 8).drops());
}

TEST(StepSelection, CountsThatDoNotFitTheWorkersAreUsageErrors) {
  TrainOptions options;
  options.backup_workers = 4;
  EXPECT_THROW(StepSelection::from_options(options, 4), Error);
  options.backup_workers = 0;
  options.k_sync = 5;
  EXPECT_THROW(StepSelection::from_options(options, 4), Error);
}

TEST(StepSelection, GradientCodingTakesTheFirstOfEachGroup) {
  // s = 2: groups {0,1,2} and {3,4,5}, each on its own slice of the data.
  const auto selection = StepSelection::first_of_groups(3, 6);
  EXPECT_TRUE(selection.drops());
  EXPECT_EQ(selection.used_per_step(), 2);
  EXPECT_EQ(selection.data_slices(), 2);
  EXPECT_EQ(selection.data_slice(2), 0);
  EXPECT_EQ(selection.data_slice(3), 1);
  const std::vector<double> ready{0.4, 0.1, 0.9, 0.3, 0.3, 0.2};
  EXPECT_EQ(selection.select(ready), (std::vector<bool>{false, true, false, false, false, true}));
  // Equal times: the group's lower worker.
  EXPECT_EQ(selection.select(std::vector<double>{0.5, 0.5, 0.5, 0.1, 0.7, 0.1}),
            (std::vector<bool>{true, false, false, true, false, false}));
}

TEST(StepSelection, GradientCodingNeedsWholeGroups) {
  TrainOptions options;
  options.gradient_coding = 1;
  EXPECT_EQ(StepSelection::from_options(options, 6).used_per_step(), 3);
  EXPECT_THROW(StepSelection::from_options(options, 5), Error);  // 5 is not groups of 2
  EXPECT_THROW(StepSelection::from_options(options, 2), Error);  // one group: nothing to code
}

TEST(StepSelection, WithoutCodingEveryWorkerReadsItsOwnSlice) {
  const auto selection = StepSelection::first_arrivals(3, 5);
  EXPECT_EQ(selection.data_slices(), 5);
  EXPECT_EQ(selection.data_slice(4), 4);
}

TEST(StepSelection, ADroppedWorkerSendsZerosAndItsTimes) {
  WorkerReport report;
  report.samples = 16;
  report.loss_sum = 3.5;
  report.correct = 7;
  report.compute_time = 0.25;
  report.sleep_time = 1.5;
  report.stop = kSignalled;
  std::vector<float> gradients{1, -2, 3}, state{4, 5};
  drop_contribution(report, gradients, state);
  EXPECT_EQ(gradients, (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(state, (std::vector<float>{0, 0}));
  EXPECT_EQ(report.samples, 0);
  EXPECT_EQ(report.loss_sum, 0);
  EXPECT_EQ(report.correct, 0);
  EXPECT_EQ(report.compute_time, 0.25);
  EXPECT_EQ(report.sleep_time, 1.5);
  EXPECT_EQ(report.stop, kSignalled);
}

TEST(StepSelection, TheEmulatedStepWaitsForTheLastUsedWorkerOnly) {
  // ps, messages of 1 ms + 1 ns per byte, 1 MB: 2 ms each way, a free update.
  const CommModel comm{0.001, 1e-9};
  std::vector<SyncWorkerTime> workers{{0.1, 0.2, true}, {3.0, 0.2, false}, {0.0, 0.4, true}};
  const auto time = sync_step_time(workers, true, comm, 1000000, 0.0);
  // Ready: 0.3, (3.2 dropped), 0.4; the master has the last used gradient at 0.4 + 2 ms.
  EXPECT_DOUBLE_EQ(time.gather, 0.4 + 0.002);
  EXPECT_DOUBLE_EQ(time.end, 0.4 + 0.002 + 0.002);
  ASSERT_EQ(time.wait.size(), 3u);
  EXPECT_DOUBLE_EQ(time.wait[0], 0.404 - 0.3 - 0.004);
  EXPECT_EQ(time.wait[1], 0.0);           // cancelled at the end: no wait of its own
  EXPECT_NEAR(time.wait[2], 0.0, 1e-15);  // the last used: no wait but rounding
}

}  // namespace
}  // namespace mbkit::train
