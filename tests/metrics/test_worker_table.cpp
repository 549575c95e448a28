// --worker-table: the nearest-rank quantiles (values worked out by hand), the choice and its
// default, the workers sampled from the seed, and what a log keeps of the worker rows.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/util/error.hpp"
#include "metric_log_test_support.hpp"
#include "test_helpers.hpp"

namespace mbkit::metrics {
namespace {

using namespace log_test;

TEST(WorkerTable, NearestRankIsTheSmallestValueWithAtLeastTheFractionAtOrBelowIt) {
  // Ten values: p10 is the 1st (ceil(1.0)), p50 the 5th, p90 the 9th.
  const std::vector<double> ten{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(nearest_rank(ten, 0.0), 1);
  EXPECT_EQ(nearest_rank(ten, 0.1), 1);
  EXPECT_EQ(nearest_rank(ten, 0.5), 5);
  EXPECT_EQ(nearest_rank(ten, 0.9), 9);
  EXPECT_EQ(nearest_rank(ten, 1.0), 10);
  // Four values: ceil(0.4) = 1, ceil(2.0) = 2, ceil(3.6) = 4.
  const std::vector<double> four{0.5, 2.5, 4.0, 100.0};
  EXPECT_EQ(nearest_rank(four, 0.1), 0.5);
  EXPECT_EQ(nearest_rank(four, 0.5), 2.5);
  EXPECT_EQ(nearest_rank(four, 0.9), 100.0);
  // One value is every quantile.
  EXPECT_EQ(nearest_rank({7.0}, 0.1), 7.0);
  EXPECT_EQ(nearest_rank({7.0}, 0.9), 7.0);
  // Eleven values: ceil(1.1) = 2, ceil(5.5) = 6, ceil(9.9) = 10.
  std::vector<double> eleven;
  for (int i = 0; i <= 10; ++i) eleven.push_back(10.0 * i);
  EXPECT_EQ(nearest_rank(eleven, 0.1), 10);
  EXPECT_EQ(nearest_rank(eleven, 0.5), 50);
  EXPECT_EQ(nearest_rank(eleven, 0.9), 90);
}

TEST(WorkerTable, ChoiceParsesAndDefaultsToAllUpTo64Workers) {
  EXPECT_EQ(parse_worker_table("all").text(), "all");
  EXPECT_EQ(parse_worker_table("summary").text(), "summary");
  const auto sample = parse_worker_table("sample:12");
  EXPECT_EQ(sample.mode, WorkerTableChoice::Mode::kSample);
  EXPECT_EQ(sample.sample, 12);
  EXPECT_EQ(sample.text(), "sample:12");
  for (const char* bad : {"", "some", "sample:", "sample:0", "sample:-3", "sample:x", "All"}) {
    try {
      parse_worker_table(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kUsage) << bad;
      EXPECT_NE(std::string(error.what()).find("--worker-table"), std::string::npos);
    }
  }
  EXPECT_EQ(default_worker_table(1).text(), "all");
  EXPECT_EQ(default_worker_table(64).text(), "all");
  EXPECT_EQ(default_worker_table(65).text(), "summary");
  EXPECT_EQ(resolve_worker_table("", 10000).text(), "summary");
  EXPECT_EQ(resolve_worker_table("all", 10000).text(), "all");
}

TEST(WorkerTable, SampledWorkersAreKOfTheRanksAndTheSameForTheSameSeed) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t r = 1; r <= 100; ++r) ranks.push_back(r);
  const auto a = sample_workers(ranks, 7, 42);
  EXPECT_EQ(a.size(), 7u);
  for (const auto rank : a) EXPECT_TRUE(rank >= 1 && rank <= 100) << rank;
  EXPECT_EQ(sample_workers(ranks, 7, 42), a);
  std::vector<std::int64_t> reversed(ranks.rbegin(), ranks.rend());
  EXPECT_EQ(sample_workers(reversed, 7, 42), a);  // the ranks' order does not matter
  EXPECT_NE(sample_workers(ranks, 7, 43), a);
  EXPECT_EQ(sample_workers(ranks, 500, 42).size(), 100u);
}

TEST(WorkerTable, SummaryOfAStepByHand) {
  WorkerSummary summary;
  // Five workers' compute times 0.5, 0.1, 0.4, 0.2, 0.3 and samples 10..50; ceil(0.5) = 1,
  // ceil(2.5) = 3, ceil(4.5) = 5.
  const std::vector<double> compute{0.5, 0.1, 0.4, 0.2, 0.3};
  for (std::size_t i = 0; i < compute.size(); ++i) {
    WorkerRecord record = worker_record(3, static_cast<std::int64_t>(i));
    record.compute_time = compute[i];
    record.samples = 10 * static_cast<std::int64_t>(i + 1);
    record.staleness = i == 4 ? 2 : 0;
    summary.add(record);
  }
  const WorkerSummaryRecord row = summary.finish(3);
  EXPECT_EQ(row.step, 3);
  EXPECT_EQ(row.workers, 5);
  EXPECT_EQ(row.compute_time_min, 0.1);
  EXPECT_EQ(row.compute_time_p10, 0.1);
  EXPECT_EQ(row.compute_time_p50, 0.3);
  EXPECT_EQ(row.compute_time_p90, 0.5);
  EXPECT_EQ(row.compute_time_max, 0.5);
  EXPECT_DOUBLE_EQ(row.compute_time_mean, 0.3);
  EXPECT_EQ(row.samples_p50, 30);
  EXPECT_EQ(row.samples_mean, 30);
  EXPECT_EQ(row.staleness_p90, 2);
  EXPECT_EQ(row.staleness_p50, 0);
  EXPECT_TRUE(summary.empty());  // the next step starts afresh
}

// A log through each choice: /workers keeps every row, none, or the sampled workers' rows;
// /worker_summary a row per step beside the last two; a resumed log keeps both.
TEST(WorkerTable, LogKeepsTheRowsTheChoiceSays) {
  test::TempDir dir;
  std::vector<std::int64_t> ranks{1, 2, 3, 4, 5, 6};
  const auto write = [&](const std::string& path, const std::string& choice, std::int64_t first,
                         std::int64_t last, bool append) {
    MetricLog log =
        append ? MetricLog::append(path, first - 1) : MetricLog::create(path, sample_info(), false);
    log.use_worker_table(WorkerTable(parse_worker_table(choice), ranks, 5));
    for (std::int64_t step = first; step <= last; ++step) {
      for (const auto rank : ranks) log.add(worker_record(step, rank));
      log.end_worker_step(step);
      log.add(step_record(step));
    }
    log.close();
  };
  write(dir.file("all.h5"), "all", 1, 4, false);
  write(dir.file("summary.h5"), "summary", 1, 4, false);
  write(dir.file("sample.h5"), "sample:2", 1, 2, false);
  write(dir.file("sample.h5"), "sample:2", 3, 4, true);

  const auto all = read_workers(open_metric_log(dir.file("all.h5")));
  EXPECT_EQ(all.size(), 24u);
  const io::File all_log = open_metric_log(dir.file("all.h5"));
  EXPECT_EQ(all_log.open_dataset("worker_summary/step").dims(), std::vector<hsize_t>{0});
  EXPECT_EQ(read_workers(open_metric_log(dir.file("summary.h5"))).size(), 0u);

  const auto sampled = sample_workers(ranks, 2, 5);
  const io::File sample_log = open_metric_log(dir.file("sample.h5"));
  const auto rows = read_workers(sample_log);
  ASSERT_EQ(rows.size(), 8u);
  for (const auto& row : rows) {
    EXPECT_TRUE(sampled.contains(row.rank)) << row.rank;
    expect_same(row, worker_record(row.step, row.rank));
  }
  for (const char* name : {"summary.h5", "sample.h5"}) {
    const io::File log = open_metric_log(dir.file(name));
    EXPECT_EQ(log.open_dataset("worker_summary/step").read<std::int64_t>(),
              (std::vector<std::int64_t>{1, 2, 3, 4}))
        << name;
    EXPECT_EQ(log.open_dataset("worker_summary/workers").read<std::int64_t>(),
              std::vector<std::int64_t>(4, 6));
    // The maximum of each step's compute times is the largest of its rows in all.h5.
    const auto max = log.open_dataset("worker_summary/compute_time_max").read<double>();
    for (std::int64_t step = 1; step <= 4; ++step) {
      double largest = 0;
      for (const auto& row : all) {
        if (row.step == step) largest = std::max(largest, row.compute_time);
      }
      EXPECT_EQ(max[static_cast<std::size_t>(step - 1)], largest) << name << " step " << step;
    }
    EXPECT_EQ(readable_rows(log, "worker_summary", 4), 4u);
  }
}

}  // namespace
}  // namespace mbkit::metrics
