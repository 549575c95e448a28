// mb-bench-partitions --fit: the tool's use of the time-model module (its fit is tested with
// it): the points a rank's record gets (median step time at P = 1 of each batch size), exact a
// and b from timings on a line, the checks of the splits, and the file the tool writes read
// back by the module's reader.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "mbkit/bench/partitions_fit.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/tools/mb_bench_partitions.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::bench {
namespace {

TEST(PartitionsFit, RecordsTheMedianAtOnePartitionPerRank) {
  // t(B) = 2e-5 B + 1e-3 exactly at the medians; outliers and P > 1 rows must not count.
  PartitionsRun run;
  run.model = "mlp";
  run.cpu_model = "cpu";
  run.steps = 3;
  for (const int rank : {0, 1}) {
    for (const int batch : {16, 64, 256}) {
      const double t = (2e-5 * batch + 1e-3) * (rank + 1);
      run.rows.push_back({rank, {batch, 1}, {t * 5, t, t * 0.5}});
      run.rows.push_back({rank, {batch, 4}, {1, 1, 1}});
    }
  }
  const auto records = fit_time_models(run, {{"h0", 2, "cpu: a"}, {"h1", 3, "cpu: b"}});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].rank, 1);
  EXPECT_EQ(records[1].host, "h1");
  EXPECT_EQ(records[1].threads, 3);
  EXPECT_EQ(records[0].batch_sizes, (std::vector<double>{16, 64, 256}));
  EXPECT_NEAR(records[0].fit.model.a, 2e-5, 1e-12);
  EXPECT_NEAR(records[0].fit.model.b, 1e-3, 1e-10);
  EXPECT_NEAR(records[1].fit.model.a, 4e-5, 1e-12);
  EXPECT_NEAR(records[0].fit.r_squared, 1, 1e-9);
  std::ostringstream out;
  write_fits(out, records);
  EXPECT_NE(out.str().find("# rank 1: a = 4e-05 s per sample, b = 0.002 s"), std::string::npos)
      << out.str();
}

TEST(PartitionsFit, NeedsTwoWholeBatchSizes) {
  EXPECT_THROW(check_fit_splits({{64, 1}, {64, 2}, {128, 2}}), Error);
  EXPECT_NO_THROW(check_fit_splits({{64, 1}, {128, 1}}));
}

TEST(PartitionsFit, ToolWritesATimeModelItsReaderReads) {
  test::TempDir dir;
  data::ImagesSynthOptions synth;
  // Batches 64 times apart, of images large enough that a batch's work, not a timing spike of
  // a loaded machine, sets the slope: --fit refuses a model whose a or b is negative. 9 steps,
  // so that the median stands four spikes: with 3 steps of 16, 128 and 512 the sanitizer stage
  // of a CI run (ASan, ctest -j2) fitted a = -6.2e-7 s per sample and the test failed.
  synth.shape = {1, 28, 28};
  synth.classes = 4;
  synth.train = 1024;
  synth.test = 4;
  data::write_synth_images(dir.file("d.h5"), synth, 0);
  tools::bench_partitions::PartitionsOptions options;
  options.data = dir.file("d.h5");
  options.batch_sizes = "16,128,1024";
  options.steps = 9;
  options.threads = 1;
  options.fit = true;
  options.time_model = dir.file("tm.h5");
  std::ostringstream out;
  EXPECT_EQ(tools::bench_partitions::run_bench_partitions(options, out), 0);
  EXPECT_NE(out.str().find("# rank 0: a = "), std::string::npos) << out.str();
  const auto records = train::read_time_model(options.time_model);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].model, "mlp");
  EXPECT_EQ(records[0].threads, 1);
  EXPECT_EQ(records[0].batch_sizes, (std::vector<double>{16, 128, 1024}));
  EXPECT_FALSE(records[0].cpu_model.empty());
  EXPECT_FALSE(records[0].library_versions.empty());
  // The model read back is the fit of the times read back.
  ASSERT_EQ(records[0].seconds.size(), 3u);
  for (const double t : records[0].seconds) EXPECT_GT(t, 0);
  const train::TimeModelFit refit =
      train::fit_time_model(records[0].batch_sizes, records[0].seconds);
  const train::TimeModel read = train::time_model_for_rank(records, 0, options.time_model);
  EXPECT_DOUBLE_EQ(read.a, refit.model.a);
  EXPECT_DOUBLE_EQ(read.b, refit.model.b);
  options.time_model.clear();
  options.fit = false;
  options.time_model = dir.file("x.h5");
  EXPECT_THROW(tools::bench_partitions::run_bench_partitions(options, out), Error);  // needs --fit
}

}  // namespace
}  // namespace mbkit::bench
