// A worker's round on its own, with the virtual clock and a compute model standing in for the
// machine: how many micro-batches a round computes, its samples, compute and delay times follow
// from the model, the time limit, the slowdown and the induced delay, computed by hand here.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "fake_device.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/worker_round.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

// Each micro-batch of 4 samples costs 0.01 * 4 + 0.1 = 0.14 s under this model.
constexpr ComputeModel kModel{0.01, 0.1};

class WorkerRoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::ToySynthOptions toy;
    toy.train = 64;
    toy.test = 8;
    data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
    backend_ = backend::make_backend("cpu", 1);
  }

  std::unique_ptr<data::DataLoader> loader() const {
    data::LoaderOptions options;
    options.path = dir_.file("toy.h5");
    options.split = "train";
    options.batch_size = 16;
    options.seed = 3;
    options.prefetch = 0;
    return std::make_unique<data::DataLoader>(options);
  }

  std::unique_ptr<nn::Network> network(data::DataLoader& data) const {
    models::ModelConfig config;
    config.name = "mlp";
    config.hidden = {8};
    const auto shape = data.shape();
    auto net = std::make_unique<nn::Network>(
        models::build_model(config, {shape.channels, shape.height, shape.width},
                            data.info().num_classes),
        *backend_);
    net->initialize(7);
    return net;
  }

  // One round of rank `rank` (worker rank - 1) under `rule`.
  WorkerReport round(const RoundRule& rule, const emulation::Slowdown& slowdown = {},
                     std::optional<emulation::StragglerProfile> stragglers = std::nullopt,
                     int rank = 1) {
    auto data = loader();
    auto net = network(*data);
    WorkerRound worker(
        {*net, *data, clock_, slowdown, kModel, std::move(stragglers), rank, rank - 1, 11, rule});
    return worker.run(0, 0);
  }

  test::TempDir dir_;
  std::unique_ptr<nn::Backend> backend_;
  RunClock clock_{true, SteadyClock::now()};
  emulation::Slowdown none_;
};

TEST_F(WorkerRoundTest, TheModelsWarmUpIsInTheFirstRoundOnlyAndNotAfterAResume) {
  ComputeModel warming = kModel;
  warming.warmup = 0.5;  // a step is 0.26 s, the first 0.76 s
  auto data = loader();
  auto net = network(*data);
  WorkerRound worker({*net, *data, clock_, none_, warming, std::nullopt, 1, 0, 11, RoundRule{}});
  EXPECT_DOUBLE_EQ(*worker.predict_ready(), 0.76);
  EXPECT_DOUBLE_EQ(worker.run(0, 0).compute_time, 0.76);
  EXPECT_DOUBLE_EQ(*worker.predict_ready(), 0.26);
  EXPECT_DOUBLE_EQ(worker.run(1, 0).compute_time, 0.26);
  // A resumed run's worker is past its first round.
  WorkerRound resumed({*net, *data, clock_, none_, warming, std::nullopt, 1, 0, 11, RoundRule{}});
  resumed.skip_warmup();
  EXPECT_DOUBLE_EQ(resumed.run(5, 0).compute_time, 0.26);
  // AMB: the warm-up is compute within the time limit. Micro-batches of 4 cost 0.14 s; a
  // limit of 0.3 s takes 3 of them, but the first round only its first (0.64 s).
  const RoundRule anytime{true, 4, 0.3};
  WorkerRound amb({*net, *data, clock_, none_, warming, std::nullopt, 1, 0, 11, anytime});
  EXPECT_DOUBLE_EQ(*amb.predict_ready(), 0.64);
  const WorkerReport first = amb.run(0, 0);
  EXPECT_EQ(first.micro_batches, 1);
  EXPECT_DOUBLE_EQ(first.compute_time, 0.64);
  EXPECT_EQ(amb.run(1, 0).micro_batches, 3);
}

TEST_F(WorkerRoundTest, FixedBatchIsOneMicroBatchOfTheWholeBatch) {
  const WorkerReport report = round(RoundRule{});
  EXPECT_EQ(report.micro_batches, 1);
  EXPECT_EQ(report.samples, 16);
  EXPECT_DOUBLE_EQ(report.compute_time, 0.01 * 16 + 0.1);
  EXPECT_EQ(report.sleep_time, 0);
  EXPECT_FALSE(report.finished_early);
  EXPECT_EQ(report.rank, 1);
}

TEST_F(WorkerRoundTest, AnytimeComputesMicroBatchesUntilTheLimit) {
  // 0.14, 0.28, 0.42 < 0.5, then 0.56: four micro-batches, the whole batch, at 0.56 s.
  WorkerReport report = round(RoundRule{true, 4, 0.5});
  EXPECT_EQ(report.micro_batches, 4);
  EXPECT_EQ(report.samples, 16);
  EXPECT_NEAR(report.compute_time, 0.56, 1e-12);
  EXPECT_FALSE(report.finished_early);  // it ended past the limit
  report = round(RoundRule{true, 4, 0.6});
  EXPECT_TRUE(report.finished_early);
  // A limit below one micro-batch still gets one.
  report = round(RoundRule{true, 4, 1e-9});
  EXPECT_EQ(report.micro_batches, 1);
  EXPECT_EQ(report.samples, 4);
}

TEST_F(WorkerRoundTest, SlowdownAndInducedDelayCountAgainstTheLimit) {
  // --slowdown 1=2: each micro-batch is followed by as long again: 0.28 then 0.56 >= 0.5.
  emulation::Slowdown slower;
  slower.factors[1] = 2;
  WorkerReport report = round(RoundRule{true, 4, 0.5}, slower);
  EXPECT_EQ(report.micro_batches, 2);
  EXPECT_EQ(report.samples, 8);
  EXPECT_NEAR(report.compute_time, 0.28, 1e-12);
  EXPECT_NEAR(report.sleep_time, 0.28, 1e-12);
  // Another rank is not slowed.
  EXPECT_EQ(round(RoundRule{true, 4, 0.5}, slower, std::nullopt, 2).micro_batches, 4);
  // An induced delay of exactly 0.3 s (a component of deviation 0) starts the round at 0.3:
  // 0.44, then 0.58 >= 0.5.
  emulation::StragglerProfile fixed{"custom", {{0.3, 0.0, 1.0}}};
  report = round(RoundRule{true, 4, 0.5}, {}, fixed);
  EXPECT_EQ(report.micro_batches, 2);
  EXPECT_NEAR(report.sleep_time, 0.3, 1e-12);
  EXPECT_NEAR(report.compute_time, 0.28, 1e-12);
}

// --cpu-quota 1=0.1/0.2: 0.1 s of CPU in each period of 0.2 s of the virtual timeline; compute
// spends it and stops when it is spent, until the next period; the stopped time is the round's
// delay. A worker that sleeps at once in its waits spends none there; one that spins does.
TEST_F(WorkerRoundTest, ACpuQuotaStopsTheComputeWhenItsBudgetIsSpent) {
  const emulation::QuotaWindow window{0.1, 0.2};
  auto data = loader();
  auto net = network(*data);
  for (const double busy_wait : {0.0, emulation::kWaitsOnCpu}) {
    const bool spins = busy_wait > 0;
    SCOPED_TRACE(spins ? "spin" : "sleep");
    auto rows = loader();
    WorkerRound worker({*net, *rows, clock_, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                        nullptr, -1, emulation::QuotaBudget{window, busy_wait}});
    // From 0 the batch's 0.26 s: 0.1 in [0, 0.1), 0.1 in [0.2, 0.3), 0.06 from 0.4: ready at
    // 0.46, with 0.04 of period 2's budget left.
    std::optional<double> predicted = worker.predict_ready();
    WorkerReport report = worker.run(0, 0);
    EXPECT_NEAR(report.compute_time, 0.26, 1e-12);
    EXPECT_NEAR(report.sleep_time, 0.2, 1e-12);
    ASSERT_TRUE(predicted.has_value());
    EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
    ASSERT_TRUE(worker.quota_budget());
    EXPECT_NEAR(worker.quota_budget()->spent, 0.06, 1e-12);
    // The next round starts at 0.5 (set_round_start: the asynchronous master's). Sleeping,
    // the worker still has 0.04 of period 2: [0.5, 0.54), [0.6, 0.7), [0.8, 0.9), 0.02 from
    // 1.0: ready at 1.02, 0.52 s on. Spinning, its wait spent the rest by 0.5: [0.6, 0.7),
    // [0.8, 0.9), 0.06 from 1.0: 1.06, 0.56 s on.
    worker.set_round_start(0.5);
    predicted = worker.predict_ready();
    report = worker.run(1, 0);
    EXPECT_NEAR(report.sleep_time + report.compute_time, spins ? 0.56 : 0.52, 1e-12);
    EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
  }
  // Else the round starts at the run clock's time (a synchronous step's start): from 0.35.
  // Asleep since the run's start, the worker has period 1's whole budget: [0.35, 0.4), then
  // [0.4, 0.5), [0.6, 0.7), 0.01 from 0.8: 0.81, 0.46 s on. Spinning, it spent it by 0.3 and
  // starts at 0.4: [0.4, 0.5), [0.6, 0.7), 0.06 from 0.8: 0.86, 0.51 s on.
  RunClock later{true, SteadyClock::now()};
  later.advance(0.35);
  for (const double busy_wait : {0.0, emulation::kWaitsOnCpu}) {
    const bool spins = busy_wait > 0;
    SCOPED_TRACE(spins ? "spin" : "sleep");
    auto again = loader();
    WorkerRound late({*net, *again, later, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                      nullptr, -1, emulation::QuotaBudget{window, busy_wait}});
    const std::optional<double> predicted = late.predict_ready();
    const WorkerReport report = late.run(0, 0);
    EXPECT_NEAR(report.sleep_time + report.compute_time, spins ? 0.51 : 0.46, 1e-12);
    EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
  }
}

// The loader's CPU (the model's L) is beside the compute: under a quota it spends the budget as
// the round takes its batch; without one it changes nothing.
TEST_F(WorkerRoundTest, TheLoadersCpuSpendsTheQuotaButNoTimeOfItsOwn) {
  const emulation::QuotaWindow window{0.1, 0.2};
  ComputeModel loading = kModel;
  loading.loader = 0.005;  // 0.08 s for the batch of 16
  auto data = loader();
  auto net = network(*data);
  auto rows = loader();
  WorkerRound worker({*net, *rows, clock_, none_, loading, std::nullopt, 1, 0, 11, RoundRule{},
                      nullptr, -1, emulation::QuotaBudget{window, 0.0}});
  EXPECT_DOUBLE_EQ(worker.loader_cpu(), 0.08);
  // The batch's 0.26 s with 0.02 of period 0 left: [0, 0.02), [0.2, 0.3), [0.4, 0.5), 0.04
  // from 0.6: ready at 0.64 (0.46 without the loader, above).
  const std::optional<double> predicted = worker.predict_ready();
  const WorkerReport report = worker.run(0, 0);
  EXPECT_NEAR(report.compute_time, 0.26, 1e-12);
  EXPECT_NEAR(report.sleep_time + report.compute_time, 0.64, 1e-12);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
  EXPECT_NEAR(worker.quota_budget()->charged, 0.34, 1e-12);
  // No quota: the round is its compute.
  auto free_rows = loader();
  WorkerRound free({*net, *free_rows, clock_, none_, loading, std::nullopt, 1, 0, 11, RoundRule{}});
  const WorkerReport unlimited = free.run(0, 0);
  EXPECT_NEAR(unlimited.sleep_time + unlimited.compute_time, 0.26, 1e-12);
}

// --cpu-quota-tick: under the kernel's model a ps worker's copy of the parameters it receives
// (QuotaBudget::receive) is CPU run as its wait ends. Half a core in periods of 0.2 s, a tick of
// 10 s (none falls in these rounds: only the waits check the budget), a copy of 0.05 s.
TEST_F(WorkerRoundTest, UnderTheKernelsModelTheParametersCopyRunsAfterAStop) {
  const emulation::QuotaWindow window{0.1, 0.2};
  auto data = loader();
  auto net = network(*data);
  for (const double receive : {0.05, 0.0}) {
    SCOPED_TRACE(receive > 0 ? "with the copy" : "without");
    auto rows = loader();
    emulation::QuotaBudget budget{window, 0.0, 10.0, receive};
    budget.pool = window.quota;
    WorkerRound worker({*net, *rows, clock_, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                        nullptr, -1, budget});
    // From 0 the batch's 0.26 s runs unchecked (no tick): ready at 0.26, no delay.
    WorkerReport report = worker.run(0, 0);
    EXPECT_NEAR(report.sleep_time, 0.0, 1e-12);
    // The parameters arrive at 0.5. The wait's first check at 0.26 takes the pool's 0.1 s (the
    // refill of 0.2): 0.16 s owed, repaid by the refills of 0.4 and 0.6, where it runs again.
    // Then the copy (0.05 s: to 0.65), then the batch: ready at 0.91, 0.41 s after 0.5; without
    // the copy at 0.86, 0.36 s after.
    worker.set_round_start(0.5);
    const std::optional<double> predicted = worker.predict_ready();
    report = worker.run(1, 0);
    EXPECT_NEAR(report.compute_time, 0.26, 1e-12);
    EXPECT_NEAR(report.sleep_time + report.compute_time, receive > 0 ? 0.41 : 0.36, 1e-9);
    ASSERT_TRUE(predicted.has_value());
    EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
  }
}

// A resumed run's worker restores its budget: its next round is the straight run's, to the bit.
TEST_F(WorkerRoundTest, ARestoredQuotaBudgetGivesTheStraightRunsRound) {
  const emulation::QuotaBudget budget{emulation::QuotaWindow{0.1, 0.2}, false};
  auto data = loader();
  auto net = network(*data);
  WorkerRound straight({*net, *data, clock_, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                        nullptr, -1, budget});
  straight.run(0, 0);
  const std::vector<double> saved = straight.quota_budget()->saved();
  straight.set_round_start(0.5);
  const WorkerReport expected = straight.run(1, 0);
  auto again = loader();
  WorkerRound resumed({*net, *again, clock_, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                       nullptr, -1, budget});
  resumed.restore_quota_budget(saved, "the test's");
  resumed.set_round_start(0.5);
  const WorkerReport report = resumed.run(1, 0);
  EXPECT_EQ(report.sleep_time, expected.sleep_time);
  EXPECT_EQ(resumed.quota_budget()->saved(), straight.quota_budget()->saved());
  // Without it the round finds period 2's budget unspent: [0.5, 0.6), [0.6, 0.7) and 0.06
  // from 0.8: 0.36 s on, not 0.52.
  auto fresh_data = loader();
  WorkerRound fresh({*net, *fresh_data, clock_, none_, kModel, std::nullopt, 1, 0, 11, RoundRule{},
                     nullptr, -1, budget});
  fresh.set_round_start(0.5);
  const WorkerReport unrestored = fresh.run(1, 0);
  EXPECT_NEAR(unrestored.sleep_time + unrestored.compute_time, 0.36, 1e-12);
  EXPECT_NEAR(report.sleep_time + report.compute_time, 0.52, 1e-12);
}

TEST_F(WorkerRoundTest, AnAnytimeRoundUnderACpuQuotaCountsOnlyRunnableTimeAsProgress) {
  // Micro-batches of 0.14 s under the limit 0.5 from 0: 0.1 + 0.04 ends at 0.24; 0.06 + 0.08
  // at 0.48 < 0.5; 0.02 + 0.1 + 0.02 at 0.82: three micro-batches where a core of its own
  // does all four by 0.56.
  const emulation::QuotaBudget budget{emulation::QuotaWindow{0.1, 0.2}, false};
  auto data = loader();
  auto net = network(*data);
  WorkerRound worker({*net, *data, clock_, none_, kModel, std::nullopt, 1, 0, 11,
                      RoundRule{true, 4, 0.5}, nullptr, -1, budget});
  const std::optional<double> predicted = worker.predict_ready();
  const WorkerReport report = worker.run(0, 0);
  EXPECT_EQ(report.micro_batches, 3);
  EXPECT_EQ(report.samples, 12);
  EXPECT_NEAR(report.compute_time, 0.42, 1e-12);
  EXPECT_NEAR(report.sleep_time, 0.4, 1e-12);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
}

TEST_F(WorkerRoundTest, ADbslRoundsReadyTimeIsPredictedToTheBitBeforeItRuns) {
  // mb-train-dbsl --emulate's asynchronous server orders pushes by this prediction. 70 samples
  // of 64 rows at batch 16: 16, 16, 16, 16, then the next epoch's first batch cut to 6; each
  // batch slowed by half its cost again, after a drawn delay that the run must take over.
  auto data = loader();
  auto net = network(*data);
  emulation::Slowdown slower;
  slower.factors[1] = 1.5;
  const emulation::StragglerProfile drawn{"custom", {{0.3, 0.1, 1.0}}};
  WorkerRound worker({*net, *data, clock_, slower, kModel, drawn, 1, 0, 11, RoundRule{}});
  double expected_compute = 0;
  for (const int size : {16, 16, 16, 16, 6}) expected_compute += kModel.cost(size);
  for (int round = 0; round < 2; ++round) {
    const std::optional<double> predicted = worker.predict_samples_ready(70);
    ASSERT_TRUE(predicted.has_value());
    const WorkerReport report = worker.run_samples(round, 70, [] {});
    EXPECT_EQ(report.samples, 70);
    EXPECT_EQ(report.micro_batches, 5);
    EXPECT_DOUBLE_EQ(report.compute_time, expected_compute);
    EXPECT_EQ(report.sleep_time + report.compute_time, *predicted);
  }
  // The same rounds unpredicted draw the same delays: the prediction drew the run's, no other.
  auto again = loader();
  WorkerRound unpredicted({*net, *again, clock_, slower, kModel, drawn, 1, 0, 11, RoundRule{}});
  auto data_predicted = loader();
  WorkerRound predicted(
      {*net, *data_predicted, clock_, slower, kModel, drawn, 1, 0, 11, RoundRule{}});
  ASSERT_TRUE(predicted.predict_samples_ready(70).has_value());
  EXPECT_EQ(predicted.run_samples(0, 70, [] {}).sleep_time,
            unpredicted.run_samples(0, 70, [] {}).sleep_time);
  // Without a compute model nothing is predicted.
  WorkerRound measured({*net, *data, clock_, slower, std::nullopt, drawn, 1, 0, 11, RoundRule{}});
  EXPECT_FALSE(measured.predict_samples_ready(70).has_value());
}

TEST_F(WorkerRoundTest, AWholeBatchOfMicroBatchesHasTheFixedBatchsLoss) {
  // The same batch (same loader seed) and parameters: the per-sample losses are the same,
  // summed in another order.
  const WorkerReport fixed = round(RoundRule{});
  const WorkerReport anytime = round(RoundRule{true, 4, 100});
  ASSERT_EQ(anytime.samples, fixed.samples);
  EXPECT_NEAR(anytime.loss_sum, fixed.loss_sum, 1e-4 * fixed.loss_sum);
  EXPECT_EQ(anytime.correct, fixed.correct);
}

TEST_F(WorkerRoundTest, OnADeviceTheVirtualClockCountsTheDevicesTime) {
  // No compute model: the device's timer, not the host's CPU time, prices each micro-batch
  // (the fake device charges kFakeDeviceBatchSeconds a batch): 0.125, 0.25 < 0.3, then 0.375.
  backend_ = test::make_fake_device_backend(1);
  auto data = loader();
  auto net = network(*data);
  const emulation::Slowdown no_slowdown;  // the round keeps a reference: it must outlive it
  WorkerRound worker({*net, *data, clock_, no_slowdown, std::nullopt, std::nullopt, 1, 0, 11,
                      RoundRule{true, 4, 0.3}});
  const WorkerReport report = worker.run(0, 0);
  EXPECT_EQ(report.micro_batches, 3);
  EXPECT_DOUBLE_EQ(report.compute_time, 3 * test::kFakeDeviceBatchSeconds);
  EXPECT_FALSE(report.finished_early);  // stopped by the limit, one micro-batch short
}

TEST_F(WorkerRoundTest, WorkTimerCountsTheClocksSeconds) {
  // Wall clock: real seconds, whatever the backend. Virtual: the CPU's seconds of this
  // thread (a sleep is none) or, on a device, the device's.
  const RunClock wall{false, SteadyClock::now()};
  WorkTimer on_wall(wall, *backend_);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(on_wall.seconds(), 0.02);
  WorkTimer on_cpu(clock_, *backend_);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LT(on_cpu.seconds(), 0.015);
  const auto device = test::make_fake_device_backend(1);
  WorkTimer on_device(clock_, *device);
  EXPECT_EQ(on_device.seconds(), 0.0);
  WorkTimer device_on_wall(wall, *device);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(device_on_wall.seconds(), 0.02);
}

}  // namespace
}  // namespace mbkit::train
