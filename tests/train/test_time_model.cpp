// The DBSL time model t(x) = a*x + b: the least-squares fit on timings with known a and b, and
// the time-model file written and read back.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(TimeModel, FitRecoversAnExactLine) {
  // The paper's ResNet-18 device (algorithms.md §3): a = 0.00056607, b = 0.014041204.
  const std::vector<double> sizes = {16, 32, 64, 128, 256, 512};
  std::vector<double> seconds;
  for (double x : sizes) seconds.push_back(0.00056607 * x + 0.014041204);
  const TimeModelFit fit = fit_time_model(sizes, seconds);
  EXPECT_NEAR(fit.model.a, 0.00056607, 1e-15);
  EXPECT_NEAR(fit.model.b, 0.014041204, 1e-13);
  EXPECT_NEAR(fit.r_squared, 1.0, 1e-12);
  EXPECT_LT(fit.max_relative_residual, 1e-12);
}

TEST(TimeModel, FitMatchesTheNormalEquationsOnNoisyPoints) {
  // By hand: x = 1,2,3,4 and y = 1.1, 1.8, 3.3, 3.6 have means 2.5 and 2.45, sum dx dy = 4.5 and
  // sum dx^2 = 5, so a = 0.9 and b = 2.45 - 0.9 * 2.5 = 0.2. The line gives 1.1, 2.0, 2.9, 3.8:
  // residuals 0, 0.2, -0.4, 0.2, SS_res = 0.24, SS_tot = 4.29.
  const std::vector<double> sizes = {1, 2, 3, 4};
  const std::vector<double> seconds = {1.1, 1.8, 3.3, 3.6};
  const TimeModelFit fit = fit_time_model(sizes, seconds);
  EXPECT_NEAR(fit.model.a, 0.9, 1e-12);
  EXPECT_NEAR(fit.model.b, 0.2, 1e-12);
  EXPECT_NEAR(fit.r_squared, 1 - 0.24 / 4.29, 1e-12);
  // Largest |t(x) - y| / y: 0.4 / 3.3 at x = 3 (0.2 / 1.8 at x = 2 is smaller).
  EXPECT_NEAR(fit.max_relative_residual, 0.4 / 3.3, 1e-12);
}

TEST(TimeModel, FitRefusesWhatCannotDefineALine) {
  const std::vector<double> one = {64}, one_time = {0.1};
  EXPECT_THROW(fit_time_model(one, one_time), Error);
  const std::vector<double> same = {64, 64}, times = {0.1, 0.2};
  EXPECT_THROW(fit_time_model(same, times), Error);
  const std::vector<double> sizes = {32, 64}, bad = {0.1, std::nan("")};
  EXPECT_THROW(fit_time_model(sizes, bad), Error);
  const std::vector<double> negative = {0.1, -0.2};
  EXPECT_THROW(fit_time_model(sizes, negative), Error);
  const std::vector<double> three = {0.1, 0.2, 0.3};
  EXPECT_THROW(fit_time_model(sizes, three), Error);
}

TimeModelRecord record_of(std::int64_t rank, double a, double b) {
  TimeModelRecord record;
  record.rank = rank;
  record.host = "node" + std::to_string(rank);
  record.model = "mlp";
  record.threads = 2;
  record.device = "cpu";
  record.cpu_model = "test CPU";
  record.library_versions = {{"oneDNN", "3.0"}, {"HDF5", "1.10.8"}};
  record.batch_sizes = {32, 64, 128};
  for (double x : record.batch_sizes) record.seconds.push_back(a * x + b);
  record.fit = fit_time_model(record.batch_sizes, record.seconds);
  return record;
}

TEST(TimeModel, FileReadsBackWhatWasWritten) {
  test::TempDir dir;
  const std::string path = dir.file("tm.h5");
  const std::vector<TimeModelRecord> written = {record_of(0, 1e-3, 0.01), record_of(1, 2e-3, 0.02)};
  write_time_model(path, written);
  const auto read = read_time_model(path);
  ASSERT_EQ(read.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(read[i].rank, written[i].rank);
    EXPECT_EQ(read[i].host, written[i].host);
    EXPECT_EQ(read[i].model, "mlp");
    EXPECT_EQ(read[i].threads, 2);
    EXPECT_EQ(read[i].cpu_model, "test CPU");
    EXPECT_EQ(read[i].library_versions, written[i].library_versions);
    EXPECT_EQ(read[i].batch_sizes, written[i].batch_sizes);
    EXPECT_EQ(read[i].seconds, written[i].seconds);
    EXPECT_EQ(read[i].fit.model.a, written[i].fit.model.a);
    EXPECT_EQ(read[i].fit.model.b, written[i].fit.model.b);
    EXPECT_EQ(read[i].fit.r_squared, written[i].fit.r_squared);
  }
  EXPECT_NEAR(time_model_for_rank(read, 1, path).a, 2e-3, 1e-15);
  EXPECT_THROW(time_model_for_rank(read, 2, path), Error);
  // One record serves every rank.
  write_time_model(path, {record_of(0, 1e-3, 0.01)});
  EXPECT_NEAR(time_model_for_rank(read_time_model(path), 5, path).b, 0.01, 1e-15);
}

TEST(TimeModel, FitKeepsTheFixedCostAtZeroOrMore) {
  // The free line is t = 1.25 x - 0.5: noise around a small fixed cost, not a negative one.
  const std::vector<double> sizes = {1, 2, 3};
  const std::vector<double> seconds = {0.5, 2.5, 3.0};
  const TimeModelFit fit = fit_time_model(sizes, seconds);
  EXPECT_EQ(fit.model.b, 0.0);
  EXPECT_DOUBLE_EQ(fit.model.a, 14.5 / 14.0);  // sum(x y) / sum(x x): through the origin
  EXPECT_EQ(time_model_problem(fit.model), "");
}

TEST(TimeModel, UnusableModelsAreNamedWhereverTheyComeFrom) {
  EXPECT_EQ(time_model_problem({1e-3, 0.01}), "");
  EXPECT_EQ(time_model_problem({0, 0.01}), "");
  EXPECT_NE(time_model_problem({-1e-3, 0.01}).find("a = -0.001 s per sample is negative"),
            std::string::npos);
  EXPECT_NE(time_model_problem({1e-3, -17}).find("b = -17 s per batch is negative"),
            std::string::npos);
  EXPECT_EQ(time_model_problem({0, 0}), "a and b are both 0");
  EXPECT_NE(time_model_problem({std::nan(""), 1}), "");
  // --time-model-ab says why, naming the flag.
  EXPECT_MBKIT_ERROR(parse_time_model_ab("-1,2", "--time-model-ab"), ExitCode::kUsage,
                     "--time-model-ab: '-1,2' needs A >= 0 and B >= 0");

  // A fit whose time falls with the batch (a < 0, mb-bench-partitions --fit on a noisy
  // machine) is not written: the file would plan rounds of negative length.
  test::TempDir dir;
  TimeModelRecord falling = record_of(0, 1e-3, 0.01);
  falling.seconds = {0.05, 0.04, 0.03};
  falling.fit = fit_time_model(falling.batch_sizes, falling.seconds);
  ASSERT_LT(falling.fit.model.a, 0);
  EXPECT_MBKIT_ERROR(write_time_model(dir.file("tm.h5"), {record_of(1, 1e-3, 0.01), falling}),
                     ExitCode::kFailure, "not writing the time model");
  EXPECT_TRUE(dir.entries().empty());

  // A file that holds one anyway (written by hand, or by an older mbkit) is a data error
  // naming the file, not a plan of negative rounds.
  const std::string path = dir.file("negative.h5");
  write_time_model(path, {record_of(0, 1e-3, 0.01)});
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    file.open_group("devices").open_group("0").set_attribute("b", -17.0);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_time_model(path), ExitCode::kBadData, "b = -17 s per batch is negative");
}

TEST(TimeModel, OtherFilesAreDataErrors) {
  test::TempDir dir;
  const std::string path = dir.file("other.h5");
  {
    io::File file = io::File::create(path);
    file.set_attribute("format", "mbkit-dataset");
    file.set_attribute("format_version", 1);
    file.close();
  }
  try {
    read_time_model(path);
    FAIL() << "a dataset file was read as a time model";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kBadData);
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
  try {
    read_time_model(dir.file("missing.h5"));
    FAIL() << "a missing file was read";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kBadData);
  }
}

}  // namespace
}  // namespace mbkit::train
