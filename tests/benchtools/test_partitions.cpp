// mb-bench-partitions' library: lists, the grid and the original's sweep, the spread over steps,
// the table's columns, the HDF5 file read back, and the tool in-process on a small synthetic
// dataset (every step really runs P micro-batches: StepTimer checks the round's count), with the
// errors for bad lists, models and batch sizes.
#include <gtest/gtest.h>

#include <cmath>

#include <sstream>
#include <string>
#include <vector>

#include "mbkit/bench/partitions.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/tools/mb_bench_partitions.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::bench {
namespace {

using test::code_of;

TEST(Splits, ListsAndTheirErrors) {
  EXPECT_EQ(parse_int_list("16,32, 64", "--batch-sizes"), (std::vector<int>{16, 32, 64}));
  for (const char* bad : {"", "16,,32", "0", "-4", "8x", "1.5"}) {
    EXPECT_EQ(code_of([&] { parse_int_list(bad, "--batch-sizes"); }), ExitCode::kUsage) << bad;
  }
  EXPECT_EQ(grid_splits({8, 16}, {1, 4}), (std::vector<Split>{{8, 1}, {8, 4}, {16, 1}, {16, 4}}));
  EXPECT_EQ(code_of([] { grid_splits({12}, {8}); }), ExitCode::kUsage);
  EXPECT_EQ(code_of([] { grid_splits({4}, {8}); }), ExitCode::kUsage);
}

TEST(Splits, SweepIsTheOriginals) {
  // B = 2^i, i = 2..4; P = 2^j, j = 0..i-1.
  EXPECT_EQ(sweep_splits(16),
            (std::vector<Split>{
                {4, 1}, {4, 2}, {8, 1}, {8, 2}, {8, 4}, {16, 1}, {16, 2}, {16, 4}, {16, 8}}));
  EXPECT_EQ(sweep_splits(31).size(), 9u);
  EXPECT_EQ(code_of([] { sweep_splits(2); }), ExitCode::kUsage);
}

TEST(Spread, MinMedianMax) {
  const results::Spread odd = results::spread_of({3, 1, 2});
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.median, 2);
  EXPECT_EQ(odd.max, 3);
  EXPECT_EQ(results::spread_of({4, 1, 3, 2}).median, 2.5);
}

PartitionsRun sample_run() {
  PartitionsRun run;
  run.model = "mlp";
  run.data = "d.h5";
  run.device = "cpu";
  run.backend = "cpu: test";
  run.cpu_model = "a CPU";
  run.threads = 2;
  run.ranks = 2;
  run.steps = 3;
  run.warmup_steps = 1;
  run.seed = 7;
  run.rows.push_back({0, {64, 2}, {0.01, 0.02, 0.03}, 0.09, 0.0});
  run.rows.push_back({1, {64, 2}, {0.04, 0.05, 0.06}, 0.08, 0.0004});
  return run;
}

TEST(PartitionsFile, ReadsBackWhatWasWritten) {
  test::TempDir dir;
  const auto path = dir.file("p.h5");
  results::write_partitions_file(path, sample_run());
  const PartitionsRun back = results::read_partitions_file(path);
  EXPECT_EQ(back.model, "mlp");
  EXPECT_EQ(back.cpu_model, "a CPU");
  EXPECT_EQ(back.threads, 2);
  EXPECT_EQ(back.seed, 7u);
  ASSERT_EQ(back.rows.size(), 2u);
  EXPECT_EQ(back.rows[1].rank, 1);
  EXPECT_EQ(back.rows[1].split, (Split{64, 2}));
  EXPECT_EQ(back.rows[1].seconds, (std::vector<double>{0.04, 0.05, 0.06}));
  EXPECT_EQ(back.rows[1].first_seconds, 0.08);
  EXPECT_EQ(back.rows[1].load_seconds, 0.0004);
  EXPECT_EQ(back.rows[0].load_seconds, 0.0);
  const io::File file = io::File::open(path);
  EXPECT_EQ(file.open_dataset("micro_batch").read<std::int64_t>(),
            (std::vector<std::int64_t>{32, 32}));
  EXPECT_FALSE(file.string_array_attribute("libraries").empty());
  EXPECT_EQ(code_of([&] { results::read_partitions_file(dir.file("missing.h5")); }),
            ExitCode::kBadData);
}

TEST(PartitionsTable, ColumnsAndUnits) {
  std::ostringstream out;
  results::write_partitions_table(out, sample_run());
  const auto lines = split(out.str(), '\n');
  ASSERT_GE(lines.size(), 6u);
  EXPECT_EQ(lines[3], results::partitions_columns());
  std::istringstream row(lines[5]);
  std::vector<double> fields;
  for (double v; row >> v;) fields.push_back(v);
  ASSERT_EQ(fields.size(), split(std::string(results::partitions_columns()).substr(2), ' ').size());
  EXPECT_EQ(fields[0], 1);                  // rank
  EXPECT_EQ(fields[3], 32);                 // micro-batch
  EXPECT_NEAR(fields[5], 50, 1e-9);         // median step, ms
  EXPECT_NEAR(fields[8], 50e3 / 64, 1e-3);  // median per sample, us
  EXPECT_NEAR(fields[10], 80, 1e-9);        // the first (warm-up) step, ms
  EXPECT_NEAR(fields[11], 0.4, 1e-9);       // the loader thread's CPU a batch, ms
}

class PartitionsTool : public ::testing::Test {
 protected:
  void SetUp() override {
    data::ImagesSynthOptions synth;
    synth.shape = {1, 8, 8};
    synth.classes = 4;
    synth.train = 40;
    synth.test = 4;
    data::write_synth_images(data_, synth, 0);
  }
  tools::bench_partitions::PartitionsOptions options() const {
    tools::bench_partitions::PartitionsOptions o;
    o.model = "mlp";
    o.data = data_;
    o.batch_sizes = "8,16";
    o.partitions = "1,2,8";
    o.steps = 2;
    o.warmup = 1;
    o.threads = 1;
    return o;
  }
  test::TempDir dir_;
  std::string data_ = dir_.file("data.h5");
};

TEST_F(PartitionsTool, TimesEverySplitAndWritesTheFile) {
  auto o = options();
  o.output = dir_.file("p.h5");
  std::ostringstream out;
  EXPECT_EQ(tools::bench_partitions::run_bench_partitions(o, out), 0);
  const PartitionsRun run = results::read_partitions_file(o.output);
  ASSERT_EQ(run.rows.size(), 6u);
  EXPECT_EQ(run.rows[5].split, (Split{16, 8}));
  for (const auto& row : run.rows) {
    ASSERT_EQ(row.seconds.size(), 2u);
    for (const double s : row.seconds) EXPECT_GT(s, 0);
  }
  EXPECT_EQ(run.threads, 1);
  EXPECT_NE(out.str().find(results::partitions_columns()), std::string::npos);
  // The loader prefetches on its own thread here (--prefetch auto, the process not pinned to
  // one core) or loads inline (pinned): its CPU a batch is measured either way, 0 inline.
  for (const auto& row : run.rows) {
    EXPECT_FALSE(std::isnan(row.load_seconds));
    EXPECT_GE(row.load_seconds, 0);
    EXPECT_LT(row.load_seconds, 1.0);
  }
}

TEST_F(PartitionsTool, BadInputIsAUsageError) {
  using Options = tools::bench_partitions::PartitionsOptions;
  const auto code = [&](const std::function<void(Options&)>& change) {
    auto o = options();
    change(o);
    std::ostringstream out;
    return code_of([&] { tools::bench_partitions::run_bench_partitions(o, out); });
  };
  EXPECT_EQ(code([](Options& o) { o.model = "lenet9"; }), ExitCode::kUsage);
  EXPECT_EQ(code([](Options& o) { o.batch_sizes = "64"; }), ExitCode::kUsage);  // > 40 rows
  EXPECT_EQ(code([](Options& o) { o.partitions = "3"; }), ExitCode::kUsage);
  EXPECT_EQ(code([](Options& o) { o.batch_sizes = ""; }), ExitCode::kUsage);
  EXPECT_EQ(code([](Options& o) { o.sweep = true; }), ExitCode::kUsage);  // and --batch-sizes
  EXPECT_EQ(code([](Options& o) { o.steps = 0; }), ExitCode::kUsage);
  EXPECT_EQ(code([&](Options& o) { o.data = dir_.file("none.h5"); }), ExitCode::kBadData);
}

}  // namespace
}  // namespace mbkit::bench
