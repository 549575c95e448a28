// Local SGD (mbkit/train/local_sgd.hpp): the period's virtual time, computed by hand, and the
// emulated workers' own models, whose average must be the mean of the models the workers reach
// on their own.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/local_sgd.hpp"
#include "mbkit/train/worker_round.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(LocalSgdPeriods, EndEveryTauStepsOfTheRun) {
  EXPECT_FALSE(ends_period(1, 3));
  EXPECT_FALSE(ends_period(2, 3));
  EXPECT_TRUE(ends_period(3, 3));
  EXPECT_TRUE(ends_period(6, 3));
  EXPECT_TRUE(ends_period(1, 1));
}

// Two workers, three local steps, messages of 1 ms + 1 ns per byte. Worker 0's rounds: 1 s of
// compute each, an induced delay of 2 s in the second (its totals 1, 4, 5 s); worker 1's:
// 1.5 s each (1.5, 3, 4.5 s). The steps take what they add to the slowest worker's total.
TEST(LocalSgdClock, PeriodIsTheSlowestWorkersRoundsPlusOneExchange) {
  const CommModel comm{1e-3, 1e-9, false};
  const std::uint64_t bytes = 2'000'000;
  const std::vector<std::vector<SyncWorkerTime>> rounds = {
      {{0, 1.0}, {0, 1.5}}, {{2.0, 1.0}, {0, 1.5}}, {{0, 1.0}, {0, 1.5}}};
  for (const bool parameter_server : {false, true}) {
    SCOPED_TRACE(parameter_server ? "ps" : "allreduce");
    LocalSgdClock clock;
    EXPECT_DOUBLE_EQ(clock.local_step(rounds[0]), 1.5);
    EXPECT_DOUBLE_EQ(clock.local_step(rounds[1]), 4.0 - 1.5);
    // allreduce: a ring of 2 messages of 1 MB; ps: 2 MB up to the master and back.
    const double exchange = parameter_server ? 2 * (1e-3 + 2e-3) : 2 * (1e-3 + 1e-3);
    const SyncStepTime last = clock.averaging_step(rounds[2], parameter_server, comm, bytes);
    EXPECT_DOUBLE_EQ(last.end, 5.0 + exchange - 4.0);
    EXPECT_DOUBLE_EQ(1.5 + 2.5 + last.end, 5.0 + exchange);
    ASSERT_EQ(last.wait.size(), 2u);
    // Worker 1 is idle for the 0.5 s it finished before worker 0.
    EXPECT_NEAR(last.wait[0], parameter_server ? 0.0 : 0.0, 1e-12);
    EXPECT_NEAR(last.wait[1], 0.5, 1e-12);
    // The next period starts afresh.
    EXPECT_TRUE(clock.period().empty());
    EXPECT_DOUBLE_EQ(clock.local_step(rounds[0]), 1.5);
  }
}

constexpr int kWorkers = 3;
constexpr int kTau = 3;
constexpr double kLr = 0.05;

class LocalModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::ToySynthOptions toy;
    toy.train = 96;
    toy.test = 8;
    data::write_synth_toy(dir_.file("toy.h5"), toy, 0);
    backend_ = backend::make_backend("cpu", 1);
    optimizer_.name = "momentum";
    optimizer_.momentum = 0.9;
  }

  std::unique_ptr<data::DataLoader> loader(int w) const {
    data::LoaderOptions options;
    options.path = dir_.file("toy.h5");
    options.split = "train";
    options.batch_size = 8;
    options.seed = 3;
    options.prefetch = 0;
    options.slice_index = w;
    options.slice_count = kWorkers;
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

  std::unique_ptr<WorkerRound> round(nn::Network& net, data::DataLoader& data, int w) {
    return std::make_unique<WorkerRound>(WorkerRound::Parts{
        net, data, clock_, slowdown_, ComputeModel{0.01, 0.1}, std::nullopt, w, w, 11, {}});
  }

  test::TempDir dir_;
  std::unique_ptr<nn::Backend> backend_;
  optim::OptimizerConfig optimizer_;
  RunClock clock_{true, SteadyClock::now()};
  emulation::Slowdown slowdown_;
};

// Each worker's tau steps on its own network and optimizer, then the mean of their models
// (in worker order, times 1/W); against one network whose workers take turns through
// LocalModels and are averaged by the in-process exchange, as --emulate does.
TEST_F(LocalModelsTest, AverageIsTheMeanOfTheWorkersOwnTrajectories) {
  std::vector<std::vector<float>> own;
  for (int w = 0; w < kWorkers; ++w) {
    auto data = loader(w);
    auto net = network(*data);
    auto optimizer = optim::make_optimizer(optimizer_, net->parameter_count(), *backend_);
    auto worker = round(*net, *data, w);
    for (int step = 0; step < kTau; ++step) {
      worker->run(step, 1.0 / 8);
      optimizer->step(net->parameter_buffer(), net->gradient_buffer(), kLr);
    }
    own.emplace_back(model_floats(*net, *optimizer));
    read_model(*net, *optimizer, own.back());
  }
  ASSERT_NE(own[0], own[1]);  // the workers' data differ, and so do their models
  std::vector<float> mean(own[0].size());
  const float third = 1.0f / static_cast<float>(kWorkers);
  for (std::size_t i = 0; i < mean.size(); ++i)
    mean[i] = (own[0][i] + own[1][i] + own[2][i]) * third;

  // One network for all workers, each worker's model kept apart between its turns.
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  for (int w = 0; w < kWorkers; ++w) loaders.push_back(loader(w));
  auto net = network(*loaders[0]);
  auto optimizer = optim::make_optimizer(optimizer_, net->parameter_count(), *backend_);
  std::vector<std::unique_ptr<WorkerRound>> rounds;
  for (int w = 0; w < kWorkers; ++w) rounds.push_back(round(*net, *loaders[w], w));
  const std::size_t model = model_floats(*net, *optimizer);
  EXPECT_EQ(model, 2 * net->parameter_count());  // the parameters and their momentum
  LocalModels hosted(kWorkers, model, net->state_count());
  hosted.set_all(*net, *optimizer);
  for (int step = 0; step < kTau; ++step) {
    for (int w = 0; w < kWorkers; ++w) {
      hosted.load(w, *net, *optimizer);
      optimizer->set_steps(step);
      rounds[w]->run(step, 1.0 / 8);
      optimizer->step(net->parameter_buffer(), net->gradient_buffer(), kLr);
      hosted.store(w, *net, *optimizer);
    }
  }
  for (int w = 0; w < kWorkers; ++w) {
    const auto kept = hosted.model(w);
    EXPECT_EQ(std::vector<float>(kept.begin(), kept.end()), own[w]) << "worker " << w;
  }
  comm::World world;
  SyncExchange exchange(world, false);
  exchange.set_in_process(kWorkers, false);
  std::vector<float> sum(model + exchange.tail_floats(net->state_count()));
  for (int w = 0; w < kWorkers; ++w) {
    add_worker_to_sum(sum, hosted.model(w), hosted.state(w), WorkerReport{}, w, false);
  }
  const std::span<float> averaged = std::span(sum).first(model);
  exchange.combine(averaged, net->state(), WorkerReport{}, 0, 0, std::span(sum).subspan(model));
  finish_average(averaged, kWorkers);
  EXPECT_EQ(std::vector<float>(averaged.begin(), averaged.end()), mean);
  write_model(averaged, *net, *optimizer);
  hosted.set_all(*net, *optimizer);
  const auto after = hosted.model(2);
  EXPECT_EQ(std::vector<float>(after.begin(), after.end()), mean);
}

}  // namespace
}  // namespace mbkit::train
