// The message model's calibration (comm_model.hpp): the least-squares fit of alpha + beta *
// bytes, when pairs differ, the file mb-bench-bandwidth --fit writes and the trainers' reader
// with its refusals, and what a per-pair model, a fitted allreduce and a fitted stream charge
// on the virtual clock.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

using test::TempDir;

TEST(CommModelFit, RecoversAnExactLine) {
  const std::vector<double> sizes = {8, 1024, 65536, 1 << 20, 16 << 20};
  std::vector<double> seconds;
  for (const double x : sizes) seconds.push_back(25e-6 + 1e-10 * x);
  const CommModelFit fit = fit_comm_model(sizes, seconds);
  EXPECT_NEAR(fit.alpha, 25e-6, 1e-15);
  EXPECT_NEAR(fit.beta, 1e-10, 1e-20);
  EXPECT_NEAR(fit.r_squared, 1.0, 1e-12);
  EXPECT_NEAR(fit.alpha_stderr, 0.0, 1e-15);
  EXPECT_EQ(comm_fit_problem(fit), "");
}

TEST(CommModelFit, MatchesTheNormalEquationsOnNoisyPoints) {
  // By hand: x = 1,2,3,4 and y = 1.1, 1.8, 3.3, 3.6 have means 2.5 and 2.45, sum dx dy = 4.5 and
  // sum dx^2 = 5, so beta = 0.9 and alpha = 2.45 - 0.9 * 2.5 = 0.2. Residuals 0, 0.2, -0.4,
  // 0.2: SS_res = 0.24, SS_tot = 4.29; the variance 0.24 / (4 - 2) = 0.12 gives the standard
  // errors sqrt(0.12 / 5) of beta and sqrt(0.12 (1/4 + 2.5^2 / 5)) of alpha.
  const std::vector<double> sizes = {1, 2, 3, 4};
  const std::vector<double> seconds = {1.1, 1.8, 3.3, 3.6};
  const CommModelFit fit = fit_comm_model(sizes, seconds);
  EXPECT_NEAR(fit.beta, 0.9, 1e-12);
  EXPECT_NEAR(fit.alpha, 0.2, 1e-12);
  EXPECT_NEAR(fit.r_squared, 1 - 0.24 / 4.29, 1e-12);
  EXPECT_NEAR(fit.beta_stderr, std::sqrt(0.12 / 5), 1e-12);
  EXPECT_NEAR(fit.alpha_stderr, std::sqrt(0.12 * (0.25 + 6.25 / 5)), 1e-12);
}

TEST(CommModelFit, ANegativeLatencyGivesTheLineThroughTheOrigin) {
  // The free line: beta = 2.5 / 2 = 1.25, alpha = 11/6 - 2.5 < 0. Through the origin:
  // beta = sum xy / sum x^2 = (0.5 + 4 + 9) / 14.
  const std::vector<double> sizes = {1, 2, 3};
  const std::vector<double> seconds = {0.5, 2.0, 3.0};
  const CommModelFit fit = fit_comm_model(sizes, seconds);
  EXPECT_EQ(fit.alpha, 0.0);
  EXPECT_NEAR(fit.beta, 13.5 / 14, 1e-12);
  EXPECT_EQ(fit.alpha_stderr, 0.0);
}

TEST(CommModelFit, RefusesWhatCannotDefineALine) {
  const std::vector<double> one = {64}, one_time = {0.1};
  EXPECT_MBKIT_ERROR(fit_comm_model(one, one_time), ExitCode::kUsage, "two different sizes");
  const std::vector<double> sizes = {32, 64}, nan = {0.1, std::nan("")};
  EXPECT_MBKIT_ERROR(fit_comm_model(sizes, nan), ExitCode::kUsage, "not a positive number");
  const std::vector<double> three = {0.1, 0.2, 0.3};
  EXPECT_MBKIT_ERROR(fit_comm_model(sizes, three), ExitCode::kUsage, "2 sizes for 3 times");
}

TEST(CommModelFit, UnusableFitsAreNamed) {
  EXPECT_NE(comm_fit_problem({-1e-6, 1e-10, 1, 0, 0}).find("alpha = -1e-06 s is negative"),
            std::string::npos);
  EXPECT_NE(comm_fit_problem({1e-6, -1e-10, 1, 0, 0}).find("beta"), std::string::npos);
  EXPECT_NE(comm_fit_problem({0, 0, 1, 0, 0}).find("both 0"), std::string::npos);
  EXPECT_NE(comm_fit_problem({1e-6, 1e-10, 0.5, 0, 0}).find("r^2 = 0.5000 is below 0.9"),
            std::string::npos);
  EXPECT_NE(comm_fit_problem({std::nan(""), 1e-10, 1, 0, 0}).find("not finite"), std::string::npos);
}

TEST(CommModelFit, PairsDifferBeyondTheirSpreadAndTenPercent) {
  const CommModelFit a{10e-6, 1e-10, 1, 1e-6, 1e-12};
  EXPECT_FALSE(fits_differ(a, {10.5e-6, 1e-10, 1, 1e-6, 1e-12}));  // within the spread
  EXPECT_TRUE(fits_differ(a, {2e-3, 1e-10, 1, 1e-6, 1e-12}));      // a 2 ms link
  EXPECT_TRUE(fits_differ(a, {10e-6, 8e-9, 1, 1e-6, 1e-12}));      // a slower link
  // Far beyond tiny standard errors, but by less than 10%: the same link.
  EXPECT_FALSE(fits_differ({10e-6, 1e-10, 1, 1e-12, 1e-20}, {10.5e-6, 1e-10, 1, 1e-12, 1e-20}));
}

// Three ranks: the pairs with rank 2 have a 2 ms latency (as another host behind netem).
CommModelRecords three_ranks() {
  CommModelRecords records;
  records.ranks = 3;
  records.hosts = {"h1", "h1", "h2"};
  records.cpu_models = {"cpu", "cpu", "cpu"};
  records.created = "2026-12-05T00:00:00Z";
  for (int a = 0; a < 3; ++a) {
    for (int b = a + 1; b < 3; ++b) {
      CommPairRecord pair;
      pair.rank_a = a;
      pair.rank_b = b;
      const double alpha = b == 2 ? 2e-3 : 5e-6;
      for (const double x : {8.0, 4096.0, 65536.0, 1048576.0}) {
        pair.bytes.push_back(x);
        // Alternating noise so that the fits have a spread.
        pair.seconds.push_back((alpha + 1e-9 * x) * (pair.bytes.size() % 2 ? 1.01 : 0.99));
      }
      records.pairs.push_back(pair);
    }
  }
  fit_pairs(records);
  return records;
}

TEST(CommModelFile, APerPairModelIsWrittenReadAndCharged) {
  TempDir dir;
  const CommModelRecords records = three_ranks();
  ASSERT_TRUE(records.per_pair);
  write_comm_model(dir.file("m.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.ranks, 3);
  EXPECT_EQ(back.hosts, records.hosts);
  EXPECT_EQ(back.created, records.created);
  ASSERT_EQ(back.pairs.size(), 3u);
  EXPECT_EQ(back.pairs[2].rank_a, 1);
  EXPECT_EQ(back.pairs[2].seconds, records.pairs[2].seconds);
  EXPECT_EQ(back.all.alpha, records.all.alpha);
  const CommModel model = comm_model_of(back, dir.file("m.h5"));
  EXPECT_EQ(model.pair_ranks, 3);
  // Each pair's own line prices its messages (the ping-pong's points do not: comm_model.hpp).
  const auto line = [](const CommPairRecord& pair, double bytes) {
    return pair.fit.alpha + pair.fit.beta * bytes;
  };
  const CommPairRecord& slow = back.pairs[1];  // 0-2
  EXPECT_DOUBLE_EQ(model.message(1000, 2, 0), line(slow, 1000));
  EXPECT_DOUBLE_EQ(model.message(1000, 0, 1), line(back.pairs[0], 1000));
  EXPECT_NE(model.message(1000, 2, 0), model.message(1000, 0, 1));
  // A ring of the three: every step as long as its slowest link (1-2 or 2-0).
  double slowest = 0;
  for (const auto& pair : {back.pairs[2], back.pairs[1]}) {
    slowest = std::max(slowest, line(pair, 3000.0 / 3));
  }
  EXPECT_DOUBLE_EQ(model.allreduce(3000, 3), 4 * slowest);
  EXPECT_NE(model.spec().find(" 0-2="), std::string::npos);
  EXPECT_EQ(model.spec().find("points"), std::string::npos) << model.spec();
  EXPECT_NE(model.describe().find("per pair of ranks"), std::string::npos);
  EXPECT_EQ(model.describe().find("interpolating"), std::string::npos);
  check_comm_model_for_run(model, 3, false);
  EXPECT_MBKIT_ERROR(check_comm_model_for_run(model, 4, false), ExitCode::kBadData,
                     "a model per pair of 3 ranks, for a run of 4 ranks");
  EXPECT_MBKIT_ERROR(check_comm_model_for_run(model, 3, true), ExitCode::kUsage,
                     "synchronous ps and allreduce only");
}

TEST(CommModelFile, PairsThatAgreeGiveOneModelForAnyWorld) {
  TempDir dir;
  CommModelRecords records = three_ranks();
  for (auto& pair : records.pairs) pair.seconds = records.pairs[0].seconds;
  fit_pairs(records);
  ASSERT_FALSE(records.per_pair);
  write_comm_model(dir.file("m.h5"), records);
  // The trainers' spelling: a text without a comma is a file.
  const auto model = parse_comm_model(dir.file("m.h5"));
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->pair_ranks, 0);
  EXPECT_EQ(model->alpha, records.all.alpha);
  EXPECT_EQ(model->beta, records.all.beta);
  EXPECT_EQ(model->file, dir.file("m.h5"));
  check_comm_model_for_run(*model, 5, true);
}

TEST(CommModelFile, AnUnusableFitIsNotWritten) {
  TempDir dir;
  CommModelRecords records = three_ranks();
  records.pairs[2].fit.r_squared = 0.5;  // the pairs differ: each must be usable
  EXPECT_MBKIT_ERROR(write_comm_model(dir.file("m.h5"), records), ExitCode::kFailure,
                     "not writing the message model " + dir.file("m.h5") +
                         ": the fit of ranks 1-2: r^2 = 0.5000 is below 0.9");
  records.per_pair = false;  // then the fit of all together is the model
  records.all.beta = -1e-9;
  EXPECT_MBKIT_ERROR(write_comm_model(dir.file("m.h5"), records), ExitCode::kFailure,
                     "every pair together: beta = -1e-09 s per byte is negative");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(CommModelFile, ALowerBarOfRSquaredIsWrittenAndHeldToByTheReader) {
  TempDir dir;
  CommModelRecords records = three_ranks();
  records.per_pair = false;
  records.all.r_squared = 0.7;  // README's 10 Gbit/s tbf link: a 4 ms floor under the rate
  EXPECT_MBKIT_ERROR(write_comm_model(dir.file("m.h5"), records), ExitCode::kFailure,
                     "every pair together: r^2 = 0.7000 is below 0.9");
  EXPECT_EQ(comm_fit_problem(records.all, 0.6), "");
  records.min_r_squared = 0.6;
  write_comm_model(dir.file("m.h5"), records);
  EXPECT_EQ(read_comm_model(dir.file("m.h5")).min_r_squared, 0.6);
  EXPECT_EQ(parse_comm_model(dir.file("m.h5"))->alpha, records.all.alpha);
  // The file's own bar, not the default, is what its reader holds it to.
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.set_attribute("min_r_squared", 0.8);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "r^2 = 0.7000 is below 0.8");
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.set_attribute("min_r_squared", 1.5);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/: 'min_r_squared' 1.5 is not an r^2 above 0 and at most 1");
  for (const double bad : {0.0, -0.1, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_NE(min_r_squared_problem(bad), "") << bad;
  }
  EXPECT_EQ(min_r_squared_problem(1.0), "");
}

TEST(CommModelFile, BadFilesAreRefusedInOneLineNamingThem) {
  TempDir dir;
  const std::string path = dir.file("m.h5");
  EXPECT_MBKIT_ERROR(parse_comm_model(dir.file("missing.h5")), ExitCode::kUsage,
                     "is not ALPHA,BETA (seconds per message, seconds per byte) nor an existing");
  test::write_text(dir.file("text.h5"), "not hdf5\n");
  EXPECT_MBKIT_ERROR(parse_comm_model(dir.file("text.h5")), ExitCode::kBadData, "not an HDF5 file");
  const auto damaged = [&](const std::function<void(io::File&)>& change) {
    write_comm_model(path, three_ranks());
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    change(file);
    file.close();
  };
  damaged([](io::File& file) { file.set_attribute("alpha", std::nan("")); });
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData, "'alpha' is not finite");
  damaged([](io::File& file) { file.open_group("pairs/1").set_attribute("beta", -1e-9); });
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData,
                     "m.h5:/pairs/1 (ranks 0-2): beta = -1e-09 s per byte is negative");
  damaged([](io::File& file) { file.open_group("pairs").remove("2"); });
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData,
                     "/pairs holds 2 pairs, not the 3 of 3 ranks");
  damaged([](io::File& file) { file.remove("pairs"); });
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData, "m.h5");
  damaged([](io::File& file) { file.set_attribute("format", "mbkit-time-model"); });
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData, "m.h5");
  {  // A file with the format but nothing else: the first missing attribute is named.
    io::File file = io::File::create(path);
    file.set_attribute("format", "mbkit-comm-model");
    file.set_attribute("format_version", 1);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(path), ExitCode::kBadData, "ranks");
}

// Two ranks whose MPI allreduce costs 3 ms + 20 ns/B (other points than a ring's messages).
CommModelRecords two_ranks_with_allreduce() {
  CommModelRecords records;
  records.ranks = 2;
  records.hosts = {"h1", "h2"};
  records.cpu_models = {"cpu", "cpu"};
  records.created = "2026-12-06T00:00:00Z";
  CommPairRecord pair;
  for (const double x : {8.0, 4096.0, 65536.0, 1048576.0}) {
    pair.bytes.push_back(x);
    pair.seconds.push_back(5e-3 + 8e-9 * x);
    records.allreduce.bytes.push_back(x);
    records.allreduce.seconds.push_back(3e-3 + 2e-8 * x);
  }
  records.pairs.push_back(pair);
  records.allreduce.ranks = 2;
  fit_pairs(records);
  return records;
}

TEST(CommModelFile, TheAllreduceFitIsWrittenReadAndTimesTheAllreduceOfItsRanks) {
  TempDir dir;
  const CommModelRecords records = two_ranks_with_allreduce();
  EXPECT_NEAR(records.allreduce.fit.alpha, 3e-3, 1e-12);
  EXPECT_NEAR(records.allreduce.fit.beta, 2e-8, 1e-18);
  EXPECT_NEAR(records.allreduce.fit.r_squared, 1.0, 1e-9);
  write_comm_model(dir.file("m.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.allreduce.ranks, 2);
  EXPECT_EQ(back.allreduce.bytes, records.allreduce.bytes);
  EXPECT_EQ(back.allreduce.seconds, records.allreduce.seconds);
  EXPECT_EQ(back.allreduce.fit.alpha, records.allreduce.fit.alpha);
  EXPECT_EQ(back.allreduce.fit.beta, records.allreduce.fit.beta);
  const CommModel model = *parse_comm_model(dir.file("m.h5"));
  EXPECT_EQ(model.allreduce_ranks, 2);
  // 800000 bytes between the measured 65536 and 1048576: their times interpolated.
  const std::vector<double>& at = back.allreduce.seconds;
  const double fitted = at[2] + (800000.0 - 65536) / (1048576 - 65536) * (at[3] - at[2]);
  EXPECT_EQ(model.allreduce(800000, 2), fitted);
  // Other world sizes: the ring of the message model's messages.
  EXPECT_DOUBLE_EQ(model.allreduce(800000, 4), 6 * model.message(200000));
  // The fit is part of the model's values (a resumed run compares them).
  EXPECT_NE(model.spec().find(
                strprintf(" allreduce 2=%.17g,%.17g", model.allreduce_alpha, model.allreduce_beta)),
            std::string::npos);
  // A synchronous allreduce step: the last worker ready, then the fitted allreduce.
  const auto time = sync_step_time({{0.0, 0.5}, {0.25, 0.5}}, false, model, 800000, 0.125);
  EXPECT_DOUBLE_EQ(time.gather, 0.75 + fitted);
  EXPECT_DOUBLE_EQ(time.end, 0.75 + fitted + 0.125);
  EXPECT_EQ(time.sends, (std::vector<double>{fitted, fitted}));
}

TEST(CommModelFile, FilesWithoutAnAllreduceFitTimeTheRingAndItsPointsOutliveABadLine) {
  TempDir dir;
  CommModelRecords records = two_ranks_with_allreduce();
  records.allreduce = {};  // as written before --fit timed the allreduce
  write_comm_model(dir.file("old.h5"), records);
  {
    const io::File file = io::File::open(dir.file("old.h5"));
    EXPECT_FALSE(file.has("allreduce"));
  }
  const CommModel old = *parse_comm_model(dir.file("old.h5"));
  EXPECT_EQ(old.allreduce_ranks, 0);
  EXPECT_DOUBLE_EQ(old.allreduce(800000, 2), 2 * old.message(400000));
  EXPECT_EQ(old.spec().find("allreduce"), std::string::npos);
  // Its points price the allreduce: a line off them (r^2 0.5, a negative intercept, as Open
  // MPI's change of algorithm between sizes gives) keeps them, as it is only shown.
  records = two_ranks_with_allreduce();
  records.allreduce.fit.r_squared = 0.5;
  records.allreduce.fit.alpha = -2e-3;
  write_comm_model(dir.file("curved.h5"), records);
  const CommModelRecords curved = read_comm_model(dir.file("curved.h5"));
  EXPECT_EQ(curved.allreduce.ranks, 2);
  EXPECT_EQ(curved.allreduce.seconds, records.allreduce.seconds);
  EXPECT_EQ(comm_model_of(curved, "curved.h5").allreduce(800000, 2),
            comm_model_of(two_ranks_with_allreduce(), "straight").allreduce(800000, 2));
  // Without points its line is the model: an unusable line is left out; the message model is
  // still written.
  records = two_ranks_with_allreduce();
  records.allreduce.bytes.clear();
  records.allreduce.seconds.clear();
  records.allreduce.fit.r_squared = 0.5;
  write_comm_model(dir.file("bad.h5"), records);
  EXPECT_EQ(read_comm_model(dir.file("bad.h5")).allreduce.ranks, 0);
  // A damaged one is refused naming it.
  write_comm_model(dir.file("m.h5"), two_ranks_with_allreduce());
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("allreduce")
        .set_attribute("seconds", std::vector<double>{1e-3, -1e-3, 2e-3, 3e-3});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/allreduce: the measured points:");
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("allreduce").set_attribute("ranks", 3);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "an allreduce of 3 ranks in a measurement of 2");
}

// The link (mbkit issue V): a small message takes 0.2 ms, the allreduce of 814 kB about
// 27 ms, and a line through 8 B .. 16 MB has an intercept of milliseconds and misses both.
CommModelRecords curved_link() {
  CommModelRecords records;
  records.ranks = 2;
  records.hosts = {"ns1", "ns2"};
  records.cpu_models = {"cpu", "cpu"};
  records.created = "2026-12-06T00:00:00Z";
  CommPairRecord pair;
  pair.bytes = {8, 4096, 65536, 524288, 1048576, 16777216};
  pair.seconds = {1e-4, 1.5e-4, 1e-3, 6e-3, 1.2e-2, 1.6e-1};
  records.pairs.push_back(pair);
  records.allreduce.ranks = 2;
  records.allreduce.bytes = pair.bytes;
  records.allreduce.seconds = {2e-4, 3e-4, 2e-3, 1.8e-2, 3.3e-2, 4e-1};
  fit_pairs(records);
  return records;
}

TEST(CommModelFile, AFileWithPointsPricesTheAllreduceByThemAndMessagesByTheLine) {
  TempDir dir;
  const CommModelRecords records = curved_link();
  write_comm_model(dir.file("m.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.pairs[0].bytes, records.pairs[0].bytes);
  EXPECT_EQ(back.pairs[0].seconds, records.pairs[0].seconds);
  const CommModel model = *parse_comm_model(dir.file("m.h5"));
  // A message: the fitted line, though the file has the ping-pong's points.
  EXPECT_EQ(model.alpha, records.all.alpha);
  EXPECT_TRUE(model.points.empty());
  EXPECT_EQ(model.message(814000), records.all.alpha + records.all.beta * 814000);
  EXPECT_NE(model.message(4096), records.pairs[0].seconds[1]);
  // The allreduce: its measured medians at exact sizes.
  for (std::size_t i = 0; i < records.allreduce.bytes.size(); ++i) {
    const auto bytes = static_cast<std::uint64_t>(records.allreduce.bytes[i]);
    EXPECT_EQ(model.allreduce(bytes, 2), records.allreduce.seconds[i]) << bytes;
  }
  // 814 kB: between 512 KiB and 1 MiB, linear in bytes.
  const double share = (814000.0 - 524288) / (1048576 - 524288);
  EXPECT_DOUBLE_EQ(model.allreduce(814000, 2), 1.8e-2 + share * 1.5e-2);
  // Below the smallest size its time; beyond the largest the last two points' slope.
  EXPECT_EQ(model.allreduce(1, 2), 2e-4);
  const double slope = (4e-1 - 3.3e-2) / (16777216.0 - 1048576);
  EXPECT_DOUBLE_EQ(model.allreduce(2 * 16777216ULL, 2), 4e-1 + slope * 16777216);
  // A ring of another world (3 ranks) is of the line's messages.
  EXPECT_DOUBLE_EQ(model.allreduce(3 * 4096, 3), 4 * (records.all.alpha + records.all.beta * 4096));
  // The allreduce's points are part of the model's values (a resumed run compares them).
  const std::string spec = model.spec();
  EXPECT_EQ(spec.substr(0, spec.find(" allreduce")).find("points"), std::string::npos) << spec;
  EXPECT_NE(spec.find(" allreduce 2="), std::string::npos);
  EXPECT_NE(spec.find(" points 8:0.00020000000000000001,"), std::string::npos) << spec;
  EXPECT_NE(model.describe().find("allreduce of 2 ranks interpolating 6 measured sizes"),
            std::string::npos)
      << model.describe();
}

TEST(CommModelFile, AFileWithoutPointsUsesTheLine) {
  TempDir dir;
  CommModelRecords records = curved_link();
  // As a file written without points: the fits alone.
  records.pairs[0].bytes.clear();
  records.pairs[0].seconds.clear();
  records.allreduce.bytes.clear();
  records.allreduce.seconds.clear();
  write_comm_model(dir.file("line.h5"), records);
  {
    const io::File file = io::File::open(dir.file("line.h5"));
    EXPECT_FALSE(file.open_group("pairs/0").has_attribute("bytes"));
    EXPECT_FALSE(file.open_group("allreduce").has_attribute("seconds"));
  }
  const CommModelRecords back = read_comm_model(dir.file("line.h5"));
  EXPECT_TRUE(back.pairs[0].bytes.empty());
  const CommModel model = *parse_comm_model(dir.file("line.h5"));
  EXPECT_TRUE(model.points.empty());
  EXPECT_EQ(model.message(814000), records.all.alpha + records.all.beta * 814000);
  EXPECT_EQ(model.allreduce(814000, 2),
            records.allreduce.fit.alpha + records.allreduce.fit.beta * 814000);
  EXPECT_EQ(model.spec().find("points"), std::string::npos);
  EXPECT_EQ(model.describe().find("interpolating"), std::string::npos);
  // Points that cannot price messages, or half of them, are refused naming the group.
  write_comm_model(dir.file("bad.h5"), curved_link());
  {
    io::File file = io::File::open(dir.file("bad.h5"), io::File::Mode::kReadWrite);
    file.open_group("pairs/0").set_attribute("seconds", std::vector<double>{1e-4, -1});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("bad.h5")), ExitCode::kBadData,
                     "bad.h5:/pairs/0: the measured points: 6 sizes for 2 times");
  write_comm_model(dir.file("half.h5"), records);
  {
    io::File file = io::File::open(dir.file("half.h5"), io::File::Mode::kReadWrite);
    file.open_group("allreduce").set_attribute("bytes", std::vector<double>{8, 16});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("half.h5")), ExitCode::kBadData,
                     "half.h5:/allreduce: 'bytes' without 'seconds'");
}

// The README's setting 2 as a stream sees it: isolated round trips floor at 4 ms and their line
// has an intercept of 5.5 ms, while back-to-back messages cost 50 us + 2 ns/B each.
CommModelRecords streaming_link() {
  CommModelRecords records = two_ranks_with_allreduce();
  records.stream.window = kStreamMaxWindow;
  for (const double x : {8.0, 4096.0, 65536.0, 1048576.0, 16777216.0}) {
    records.stream.bytes.push_back(x);
    records.stream.seconds.push_back(5e-5 + 2e-9 * x);
  }
  fit_pairs(records);
  return records;
}

TEST(CommModelStream, TheWindowHoldsUpTo16MiBOf4To64Messages) {
  EXPECT_EQ(stream_window(8), 64);
  EXPECT_EQ(stream_window(262144), 64);
  EXPECT_EQ(stream_window(524288), 32);
  EXPECT_EQ(stream_window(4194304), 4);
  EXPECT_EQ(stream_window(16777216), 4);
  EXPECT_EQ(stream_window(0), 64);
}

TEST(CommModelStream, KnownPointsGiveTheirLineWrittenAndReadBack) {
  TempDir dir;
  const CommModelRecords records = streaming_link();
  EXPECT_NEAR(records.stream.fit.alpha, 5e-5, 1e-15);
  EXPECT_NEAR(records.stream.fit.beta, 2e-9, 1e-21);
  EXPECT_NEAR(records.stream.fit.r_squared, 1.0, 1e-12);
  // The ping-pong's line is fitted apart: its own 5 ms + 8 ns/B.
  EXPECT_NEAR(records.all.alpha, 5e-3, 1e-12);
  write_comm_model(dir.file("m.h5"), records);
  {
    const io::File file = io::File::open(dir.file("m.h5"));
    const io::Group stream = file.open_group("stream");
    EXPECT_EQ(stream.int_attribute("window"), kStreamMaxWindow);
    for (const char* name : {"alpha", "beta", "r_squared", "alpha_stderr", "beta_stderr"}) {
      EXPECT_TRUE(stream.has_attribute(name)) << name;
    }
  }
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.stream.window, kStreamMaxWindow);
  EXPECT_EQ(back.stream.bytes, records.stream.bytes);
  EXPECT_EQ(back.stream.seconds, records.stream.seconds);
  EXPECT_EQ(back.stream.fit.alpha, records.stream.fit.alpha);
  EXPECT_EQ(back.stream.fit.beta, records.stream.fit.beta);
  const CommModel model = *parse_comm_model(dir.file("m.h5"));
  ASSERT_TRUE(model.streams);
  // A streamed message by the stream's points (here on its line); an isolated one by the
  // ping-pong's line.
  EXPECT_DOUBLE_EQ(model.streamed(814000), 5e-5 + 2e-9 * 814000);
  EXPECT_EQ(model.streamed(65536), records.stream.seconds[2]);
  EXPECT_EQ(model.message(814000), records.all.alpha + records.all.beta * 814000);
  EXPECT_LT(model.streamed(814000), 0.3 * model.message(814000));
  // Points off the line price by themselves: linear in bytes between the sizes around.
  CommModelRecords curved = streaming_link();
  curved.stream.seconds[3] = 4e-3;  // 1 MiB
  fit_pairs(curved);
  const CommModel bent = comm_model_of(curved, "bent.h5");
  const double share = (814000.0 - 65536) / (1048576 - 65536);
  EXPECT_DOUBLE_EQ(bent.streamed(814000),
                   curved.stream.seconds[2] + share * (4e-3 - curved.stream.seconds[2]));
  EXPECT_NE(bent.streamed(814000), curved.stream.fit.alpha + curved.stream.fit.beta * 814000);
  // The allreduce keeps its own points.
  EXPECT_EQ(model.allreduce(65536, 2), 3e-3 + 2e-8 * 65536);
  EXPECT_NE(model.spec().find(strprintf(" stream=%.17g,%.17g", records.stream.fit.alpha,
                                        records.stream.fit.beta)),
            std::string::npos)
      << model.spec();
  EXPECT_NE(model.spec().find(" points 8:5.0016"), std::string::npos) << model.spec();
  EXPECT_NE(model.describe().find("; streamed messages interpolating 5 measured sizes"),
            std::string::npos)
      << model.describe();
}

TEST(CommModelStream, OlderFilesAndUnusableStreamsPriceStreamedMessagesByTheLine) {
  TempDir dir;
  CommModelRecords records = streaming_link();
  records.stream = {};  // as written before --fit streamed messages
  write_comm_model(dir.file("old.h5"), records);
  {
    const io::File file = io::File::open(dir.file("old.h5"));
    EXPECT_FALSE(file.has("stream"));
  }
  const CommModel old = *parse_comm_model(dir.file("old.h5"));
  EXPECT_FALSE(old.streams);
  EXPECT_EQ(old.streamed(814000), old.message(814000));
  EXPECT_EQ(old.spec().find("stream"), std::string::npos);
  // Without points, a stream whose times do not follow a line is left out (the rest of the
  // model is written); with them, its points price and the line is only shown.
  records = streaming_link();
  records.stream.fit.r_squared = 0.5;
  write_comm_model(dir.file("curved.h5"), records);
  EXPECT_TRUE(parse_comm_model(dir.file("curved.h5"))->streams);
  records.stream.bytes.clear();
  records.stream.seconds.clear();
  write_comm_model(dir.file("noisy.h5"), records);
  EXPECT_EQ(read_comm_model(dir.file("noisy.h5")).stream.window, 0);
  EXPECT_FALSE(parse_comm_model(dir.file("noisy.h5"))->streams);
  EXPECT_EQ(parse_comm_model(dir.file("noisy.h5"))->streamed(814000),
            parse_comm_model(dir.file("noisy.h5"))->message(814000));
  // A damaged one is refused naming it.
  write_comm_model(dir.file("m.h5"), streaming_link());
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("stream").set_attribute("window", 0);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/stream: 'window' is 0, not a number of messages of 1 or more");
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("stream").set_attribute("window", 64);
    file.open_group("stream").set_attribute("seconds", std::vector<double>{1e-4, -1e-4});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/stream: the measured points: 5 sizes for 2 times");
}

TEST(CommModelClock, ParameterServerChargesEachWorkersOwnLink) {
  // Ranks 0 (master), 1 and 2: the link to rank 2 costs 2 ms + 1 ns/B, the other 1 us.
  CommModel comm;
  comm.pair_ranks = 3;
  comm.pair_alpha.assign(9, 1e-6);
  comm.pair_beta.assign(9, 0.0);
  for (const int at : {2, 6}) {  // 0-2 and 2-0
    comm.pair_alpha[at] = 2e-3;
    comm.pair_beta[at] = 1e-9;
  }
  const std::uint64_t bytes = 1'000'000;  // rank 2's message: 3 ms
  const auto time = sync_step_time({{0.0, 1.0}, {0.0, 0.5}}, true, comm, bytes, 0.25, 1);
  EXPECT_DOUBLE_EQ(time.gather, std::max(1.0 + 1e-6, 0.5 + 3e-3));
  EXPECT_DOUBLE_EQ(time.end, time.gather + 0.25 + 3e-3);  // the slowest broadcast
  EXPECT_DOUBLE_EQ(time.sends[0], 2e-6);
  EXPECT_DOUBLE_EQ(time.sends[1], 6e-3);
  EXPECT_DOUBLE_EQ(time.receives[1], 3e-3);
  EXPECT_NEAR(time.wait[1], time.end - 0.5 - 6e-3, 1e-12);
}

// The README's setting 2 as the async cycle sees it at 1 Gbit/s: 814 kB gradients cycle in
// 12.5 ms with the worker idle and 13 ms with it busy as long (0.5 ms of its CPU).
CommModelRecords async_link() {
  CommModelRecords records = streaming_link();
  records.async_cycle.window = 16;
  for (const double x : {65536.0, 262144.0, 1048576.0}) {
    records.async_cycle.bytes.push_back(x);
    records.async_cycle.seconds.push_back(1e-4 + 1.5e-8 * x);
    records.async_cycle.busy_seconds.push_back(1e-4 + 1.5e-8 * x + (x > 100000 ? 5e-4 : 2e-4));
  }
  fit_pairs(records);
  return records;
}

TEST(CommModelAsyncCycle, KnownPointsPriceTheCycleAndTheSendersCpu) {
  TempDir dir;
  const CommModelRecords records = async_link();
  EXPECT_EQ(async_cycle_problem(records.async_cycle), "");
  EXPECT_NEAR(records.async_cycle.fit.beta, 1.5e-8, 1e-18);
  write_comm_model(dir.file("m.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.async_cycle.window, 16);
  EXPECT_EQ(back.async_cycle.bytes, records.async_cycle.bytes);
  EXPECT_EQ(back.async_cycle.seconds, records.async_cycle.seconds);
  EXPECT_EQ(back.async_cycle.busy_seconds, records.async_cycle.busy_seconds);
  const CommModel model = *parse_comm_model(dir.file("m.h5"));
  ASSERT_TRUE(model.async_cycles);
  // Between 256 KiB and 1 MiB: linear in bytes, on the line here.
  EXPECT_NEAR(model.async_cycle(814000), 1e-4 + 1.5e-8 * 814000, 1e-15);
  EXPECT_NEAR(model.async_sender(814000), 5e-4, 1e-15);
  EXPECT_NEAR(model.async_sender(65536), 2e-4, 1e-15);
  // Not the stream's price: the cycle is a gradient out and the parameters back.
  EXPECT_NE(model.async_cycle(814000), model.streamed(814000));
  EXPECT_NE(model.spec().find(" async points 65536:"), std::string::npos) << model.spec();
  EXPECT_NE(model.spec().find(" busy points 65536:"), std::string::npos) << model.spec();
  EXPECT_NE(model.describe().find("; async cycle interpolating 3 measured sizes"),
            std::string::npos)
      << model.describe();
  // A busy cycle faster than the idle one (noise) costs the sender nothing, not a negative.
  CommModelRecords noisy = async_link();
  noisy.async_cycle.busy_seconds[2] = 0.5 * noisy.async_cycle.seconds[2];
  EXPECT_EQ(comm_model_of(noisy, "noisy.h5").async_sender(1048576), 0.0);
}

TEST(CommModelAsyncCycle, OlderFilesPriceAsyncByTheStreamAndDamagedOnesAreRefused) {
  TempDir dir;
  CommModelRecords records = async_link();
  records.async_cycle = {};  // as written before --fit timed the async cycle
  write_comm_model(dir.file("old.h5"), records);
  {
    const io::File file = io::File::open(dir.file("old.h5"));
    EXPECT_FALSE(file.has("async"));
  }
  const CommModel old = *parse_comm_model(dir.file("old.h5"));
  EXPECT_FALSE(old.async_cycles);
  EXPECT_EQ(old.async_cycle(814000), old.streamed(814000));
  EXPECT_EQ(old.async_sender(814000), 0.0);
  EXPECT_EQ(old.spec().find("async"), std::string::npos);
  // Unusable cycles are left out of the file (the rest is written).
  records = async_link();
  records.async_cycle.busy_seconds.pop_back();
  EXPECT_EQ(async_cycle_problem(records.async_cycle), "2 busy times for 3 sizes");
  write_comm_model(dir.file("short.h5"), records);
  EXPECT_EQ(read_comm_model(dir.file("short.h5")).async_cycle.window, 0);
  records = async_link();
  records.async_cycle.bytes.clear();
  records.async_cycle.seconds.clear();
  EXPECT_EQ(async_cycle_problem(records.async_cycle), "no measured points");
  // Damaged ones are refused naming the file and the group.
  write_comm_model(dir.file("m.h5"), async_link());
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("async").set_attribute("busy_seconds", std::vector<double>{1e-3, -1, 1e-3});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/async (the async cycle): a busy time of -1 s");
  write_comm_model(dir.file("w.h5"), async_link());
  {
    io::File file = io::File::open(dir.file("w.h5"), io::File::Mode::kReadWrite);
    file.open_group("async").set_attribute("window", 0);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("w.h5")), ExitCode::kBadData,
                     "w.h5:/async: 'window' is 0, not a number of gradients of 1 or more");
}

}  // namespace
}  // namespace mbkit::train
