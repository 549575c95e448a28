// K-batch-sync SGD (--k-batch-sync K): the step's end T*, each worker's batch count and the
// rounds that compute them, on the virtual clock with a compute model and fixed per-worker
// delays, computed by hand here.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/graph.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/k_batch_sync.hpp"
#include "mbkit/train/worker_round.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(KBatchStep, TakesTheFirstKCompletionsTiesToTheLowerWorker) {
  const std::vector<std::vector<double>> completions = {{1, 2, 3}, {1, 2, 3}, {0.5, 4, 5}};
  const auto first = plan_k_batch_step(1, completions);
  EXPECT_EQ(first.batches, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(first.end, 0.5);
  // Workers 0 and 1 both finish at 1 and at 2: the lower worker's batch counts first.
  const auto two = plan_k_batch_step(2, completions);
  EXPECT_EQ(two.batches, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(two.end, 1);
  const auto four = plan_k_batch_step(4, completions);
  EXPECT_EQ(four.batches, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(four.end, 2);
  const auto seven = plan_k_batch_step(7, completions);
  EXPECT_EQ(seven.batches, (std::vector<int>{3, 3, 1}));
  EXPECT_EQ(seven.end, 3);
}

// Each batch of 16 costs 16 / 128 = 0.125 s under this model (exact in binary).
TEST(KBatchArrivals, TakesTheStepsFirstKBatchesFromAnyWorkers) {
  KBatchArrivals arrivals(3, 3);
  arrivals.begin(0);
  // Worker 2 sends two batches before worker 0's first: a fast worker may send several.
  EXPECT_TRUE(arrivals.take(2, 0));
  EXPECT_TRUE(arrivals.take(2, 0));
  EXPECT_FALSE(arrivals.complete());
  EXPECT_EQ(arrivals.taken(), 2);
  EXPECT_TRUE(arrivals.take(0, 0));
  EXPECT_TRUE(arrivals.complete());
  EXPECT_EQ(arrivals.batches(), (std::vector<int>{1, 0, 2}));
  // One more of the step after the K-th is not taken.
  EXPECT_FALSE(arrivals.take(1, 0));
  EXPECT_EQ(arrivals.batches(), (std::vector<int>{1, 0, 2}));
}

TEST(KBatchArrivals, DiscardsTheBatchesOfEarlierSteps) {
  KBatchArrivals arrivals(2, 2);
  arrivals.begin(0);
  EXPECT_TRUE(arrivals.take(0, 0));
  EXPECT_TRUE(arrivals.take(0, 0));
  arrivals.begin(1);
  EXPECT_EQ(arrivals.batches(), (std::vector<int>{0, 0}));
  // Worker 1 was inside a batch of step 0 when step 1 began: that batch is late.
  EXPECT_FALSE(arrivals.take(1, 0));
  EXPECT_EQ(arrivals.taken(), 0);
  EXPECT_TRUE(arrivals.take(1, 1));
  EXPECT_TRUE(arrivals.take(0, 1));
  EXPECT_TRUE(arrivals.complete());
  EXPECT_EQ(arrivals.batches(), (std::vector<int>{1, 1}));
  // A batch of a step not begun yet is a protocol error.
  EXPECT_THROW(arrivals.take(0, 2), Error);
}

constexpr ComputeModel kModel{1.0 / 128, 0};

class KBatchSyncRounds : public ::testing::Test {
 protected:
  void SetUp() override {
    data::ToySynthOptions toy;
    toy.train = 64;
    toy.test = 8;
    data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
    backend_ = backend::make_backend("cpu", 1);
    // Workers 0, 1 and 2 (ranks 1 to 3) are delayed 0, 1/16 and 1/2 s in every step.
    auto trace = std::make_shared<emulation::DelayTrace>();
    trace->workers = 3;
    trace->steps = 1;
    trace->seconds = {0, 0.0625, 0.5};
    trace_ = trace;
    slowdown_.factors[2] = 2;  // rank 2 (worker 1) takes twice the compute
  }

  std::unique_ptr<data::DataLoader> loader(int batch) const {
    data::LoaderOptions options;
    options.path = dir_.file("toy.h5");
    options.split = "train";
    options.batch_size = batch;
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

  WorkerRound round(nn::Network& net, data::DataLoader& data, int worker) const {
    RoundRule rule;
    rule.whole_batches = true;
    return WorkerRound(
        {net, data, clock_, slowdown_, kModel, std::nullopt, worker + 1, worker, 11, rule, trace_});
  }

  test::TempDir dir_;
  std::unique_ptr<nn::Backend> backend_;
  RunClock clock_{true, SteadyClock::now()};
  emulation::Slowdown slowdown_;
  std::shared_ptr<const emulation::DelayTrace> trace_;
};

TEST_F(KBatchSyncRounds, StepEndBatchCountsAndRoundsByHand) {
  // Completions: worker 0 at 0.125, 0.25, 0.375, 0.5; worker 1 (delay 1/16, 0.25 s a batch
  // with its slowdown) at 0.3125, 0.5625, ...; worker 2 (delay 1/2) at 0.625, 0.75, ...
  const std::vector<std::vector<double>> expected = {
      {0.125, 0.25, 0.375, 0.5}, {0.3125, 0.5625, 0.8125, 1.0625}, {0.625, 0.75, 0.875, 1.0}};
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  std::vector<std::unique_ptr<nn::Network>> nets;
  std::vector<WorkerRound> rounds;
  std::vector<std::vector<double>> completions;
  for (int w = 0; w < 3; ++w) {
    loaders.push_back(loader(16));
    nets.push_back(network(*loaders.back()));
    rounds.push_back(round(*nets.back(), *loaders.back(), w));
    completions.push_back(rounds.back().predict_completions(4).value());
    EXPECT_EQ(completions.back(), expected[static_cast<std::size_t>(w)]) << "worker " << w;
  }
  // K = 4: 0.125 (w0), 0.25 (w0), 0.3125 (w1), 0.375 (w0): T* = 0.375, worker 2 computes none.
  const auto plan = plan_k_batch_step(4, completions);
  EXPECT_EQ(plan.end, 0.375);
  EXPECT_EQ(plan.batches, (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(plan_k_batch_step(6, completions).batches, (std::vector<int>{4, 2, 0}));
  EXPECT_EQ(plan_k_batch_step(8, completions).batches, (std::vector<int>{4, 2, 2}));
  // The rounds compute the planned batches back to back, timed as predicted; the step's time
  // (its slowest computing worker) is T*.
  const std::vector<double> ready = {0.375, 0.3125, 0.5};
  for (int w = 0; w < 3; ++w) {
    const auto i = static_cast<std::size_t>(w);
    rounds[i].set_batches(plan.batches[i]);
    const WorkerReport report = rounds[i].run(0, 1.0 / (4 * 16));
    EXPECT_EQ(report.micro_batches, plan.batches[i]) << "worker " << w;
    EXPECT_EQ(report.samples, 16 * plan.batches[i]) << "worker " << w;
    EXPECT_EQ(report.sleep_time + report.compute_time, ready[i]) << "worker " << w;
    EXPECT_EQ(report.compute_time, 0.125 * plan.batches[i]) << "worker " << w;
    // Each read its batches in order from its slice: the next is batch n_w of the epoch.
    EXPECT_EQ(loaders[i]->next().index, plan.batches[i]) << "worker " << w;
  }
}

TEST_F(KBatchSyncRounds, AContinuedRoundHasNoInducedDelayOfItsOwn) {
  // The wall clock's worker computes a step's batches one run() each: the round's induced
  // delay (worker 1's 1/16 s) comes before the first only; the slowdown (x2) before each.
  auto data = loader(16);
  auto net = network(*data);
  WorkerRound worker = round(*net, *data, 1);
  worker.set_batches(1);
  EXPECT_EQ(worker.run(0, 1.0 / 16).sleep_time, 0.0625 + 0.125);
  worker.continue_round();
  worker.set_batches(1);
  EXPECT_EQ(worker.run(0, 1.0 / 16).sleep_time, 0.125);
  // The next step's round draws its delay again.
  worker.set_batches(1);
  EXPECT_EQ(worker.run(1, 1.0 / 16).sleep_time, 0.0625 + 0.125);
}

TEST_F(KBatchSyncRounds, AContinuedRoundDrawsTheRoundsNextDropoutMasks) {
  // Two batches run one at a time (the wall clock's worker) give the gradients of one round
  // of two (the virtual clock's): the second draws the masks of the round's second batch.
  const auto dropout_net = [&](data::DataLoader& data) {
    const auto shape = data.shape();
    nn::GraphBuilder b("dropout-mlp", {shape.channels, shape.height, shape.width},
                       data.info().num_classes);
    const int x = b.relu(b.dense(b.flatten(b.input()), 16, "fc1"));
    auto net =
        std::make_unique<nn::Network>(b.finish(b.dense(b.dropout(x, 0.5), 10, "fc2")), *backend_);
    net->initialize(7);
    return net;
  };
  std::vector<float> rounds[2];
  for (const bool continued : {false, true}) {
    auto data = loader(16);
    auto net = dropout_net(*data);
    WorkerRound worker = round(*net, *data, 0);
    std::vector<float>& sum = rounds[continued ? 1 : 0];
    if (continued) {
      worker.set_batches(1);
      worker.run(0, 1.0 / 32);
      sum.assign(net->gradients().begin(), net->gradients().end());
      worker.continue_round();
      worker.set_batches(1);
      worker.run(0, 1.0 / 32);
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += net->gradients()[i];
    } else {
      worker.set_batches(2);
      worker.run(0, 1.0 / 32);
      sum.assign(net->gradients().begin(), net->gradients().end());
    }
  }
  ASSERT_EQ(rounds[0].size(), rounds[1].size());
  for (std::size_t i = 0; i < rounds[0].size(); ++i) {
    EXPECT_NEAR(rounds[1][i], rounds[0][i], 1e-6) << i;
  }
}

TEST_F(KBatchSyncRounds, SeveralBatchesSumTheirGradients) {
  // Two whole batches at loss scale 1/32 are the sum of the two batches' gradients at 1/32.
  auto data = loader(16);
  auto net = network(*data);
  WorkerRound two = round(*net, *data, 0);
  two.set_batches(2);
  two.run(0, 1.0 / 32);
  const std::vector<float> summed(net->gradients().begin(), net->gradients().end());
  auto data_b = loader(16);
  auto net_b = network(*data_b);
  std::vector<float> expected(summed.size(), 0.0f);
  for (int k = 0; k < 2; ++k) {
    const data::Batch& batch = data_b->next();
    net_b->train(batch.images.data(), batch.labels.data(), batch.size, 0, 1.0 / 32, false);
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += net_b->gradients()[i];
  }
  double largest = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(summed[i], expected[i], 1e-6) << i;
    largest = std::max(largest, static_cast<double>(std::abs(expected[i])));
  }
  EXPECT_GT(largest, 0);
}

TEST_F(KBatchSyncRounds, BatchSizesAheadFollowTheEpochShortLastBatch) {
  // 64 rows in batches of 24: 24, 24, 16, then the next epoch's 24, ...
  auto data = loader(24);
  EXPECT_EQ(data->batch_size_ahead(0), 24);
  EXPECT_EQ(data->batch_size_ahead(2), 16);
  EXPECT_EQ(data->batch_size_ahead(3), 24);
  data->next();
  EXPECT_EQ(data->batch_size_ahead(1), 16);
  data->seek(4, 2);
  EXPECT_EQ(data->batch_size_ahead(0), 16);
}

}  // namespace
}  // namespace mbkit::train
