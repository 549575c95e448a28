// DBSL in-process: a worker's round trains its samples in batches of its loader's size, the last
// one cut short, each followed by its update, and costs what the compute model says (times the
// slowdown); --plan runs without data or MPI, and a run without a server is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "mbkit/backend/factory.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/tools/mb_train.hpp"
#include "mbkit/train/dbsl_options.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/train/worker_round.hpp"
#include "mbkit/util/log.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

class DbslRoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::ToySynthOptions toy;
    toy.train = 40;
    toy.test = 10;
    toy.learnable = true;
    data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
  }
  test::TempDir dir_;
};

TEST_F(DbslRoundTest, TrainsItsSamplesInBatchesWithAnUpdateAfterEach) {
  data::LoaderOptions loader_options;
  loader_options.path = dir_.file("toy.h5");
  loader_options.batch_size = 5;
  loader_options.seed = 1;
  loader_options.prefetch = 0;
  data::DataLoader loader(loader_options);
  const auto backend = backend::make_backend("cpu", 1);
  models::ModelConfig model;
  model.name = "mlp";
  model.hidden = {8};
  const auto shape = loader.shape();
  nn::Network net(models::build_model(model, {shape.channels, shape.height, shape.width},
                                      loader.info().num_classes),
                  *backend);
  net.initialize(1);
  const RunClock clock(true, SteadyClock::now());
  const emulation::Slowdown slowdown = emulation::parse_slowdown("1=2");
  WorkerRound round({net, loader, clock, slowdown, ComputeModel{0.001, 0.01}, std::nullopt, 1, 0, 1,
                     RoundRule{}});
  const auto optimizer = optim::make_optimizer({}, net.parameter_count(), *backend);
  const std::vector<float> before(net.parameters().begin(), net.parameters().end());
  int updates = 0;
  // 24 samples at batch 5: 5, 5, 5, 5 and 4.
  const WorkerReport report = round.run_samples(0, 24, [&] {
    ++updates;
    optimizer->step(net.parameter_buffer(), net.gradient_buffer(), 0.1);
  });
  EXPECT_EQ(report.samples, 24);
  EXPECT_EQ(report.micro_batches, 5);
  EXPECT_EQ(updates, 5);
  EXPECT_EQ(round.last_drawn(), 24);
  // 24 x 1 ms + 5 x 10 ms, and as much again slept for --slowdown 1=2.
  EXPECT_NEAR(report.compute_time, 0.074, 1e-12);
  EXPECT_NEAR(report.sleep_time, 0.074, 1e-12);
  EXPECT_TRUE(std::isfinite(report.loss_sum));
  EXPECT_GE(report.correct, 0);
  EXPECT_LE(report.correct, 24);
  const std::vector<float> after(net.parameters().begin(), net.parameters().end());
  EXPECT_NE(before, after);
  // A round of more samples than the split continues into the next epoch's batches.
  EXPECT_EQ(round.run_samples(1, 45, [] {}).micro_batches, 9);
}

TEST_F(DbslRoundTest, PlanNeedsNoDataAndARunNeedsAServer) {
  TrainOptions options = tools::train::dbsl_defaults();
  EXPECT_EQ(options.optimizer.name, "momentum");
  EXPECT_EQ(options.schedule.milestones, (std::vector<double>{80, 120}));
  options.dbsl.plan_only = true;
  options.dbsl.workers = 4;
  options.dbsl.train_samples = 50000;
  options.dbsl.time_model_ab = "0.00056607,0.014041204";
  options.dbsl.base_batch = 500;
  options.dbsl.extra_time = 1.05;
  options.dbsl.small_workers = 1;
  testing::internal::CaptureStdout();
  EXPECT_EQ(tools::train::run_train_dbsl(options), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("small       83     10625"), std::string::npos) << out;
  options.dbsl.plan_only = false;
  options.dbsl.workers = 0;
  options.dbsl.train_samples = 0;
  options.data = dir_.file("toy.h5");
  options.epochs = 1;
  test::world_of_ranks();
  log::set_level(log::Level::kQuiet);
  EXPECT_MBKIT_ERROR(tools::train::run_train_dbsl(options), ExitCode::kUsage,
                     "needs a parameter server and workers");
  log::set_level(log::Level::kNormal);
}

TEST_F(DbslRoundTest, TimeModelFileGivesEachWorkerItsRecordTimesItsSlowdown) {
  std::vector<TimeModelRecord> records(3);
  for (std::size_t r = 0; r < records.size(); ++r) {
    records[r].rank = static_cast<std::int64_t>(r);
    records[r].batch_sizes = {8, 16};
    const double a = 0.001 * static_cast<double>(r + 1);
    records[r].seconds = {8 * a + 0.01, 16 * a + 0.01};
    records[r].fit = fit_time_model(records[r].batch_sizes, records[r].seconds);
  }
  write_time_model(dir_.file("tm.h5"), records);
  TrainOptions options;
  options.dbsl.time_model = dir_.file("tm.h5");
  options.slowdown = emulation::parse_slowdown("2=3");
  const auto models = time_models_from_options(options, 2);
  ASSERT_EQ(models.size(), 2u);  // rank 1's and rank 2's records, not rank 0's
  EXPECT_NEAR(models[0].a, 0.002, 1e-12);
  EXPECT_NEAR(models[0].b, 0.01, 1e-12);
  EXPECT_NEAR(models[1].a, 3 * 0.003, 1e-12);
  EXPECT_NEAR(models[1].b, 3 * 0.01, 1e-12);
  // Equal models collapse to one: Eq. 8 then.
  options.slowdown = {};
  options.dbsl.time_model.clear();
  options.dbsl.time_model_ab = "0.001,0.01";
  EXPECT_EQ(time_models_from_options(options, 4).size(), 1u);
}

}  // namespace
}  // namespace mbkit::train
