// The AMB original's settings that mbkit offers beside its own (issue N): each run in-process
// and compared with the original's value computed by hand on a tiny problem.
#include <gtest/gtest.h>

#include <cmath>

#include "mbkit/backend/factory.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/tools/mb_train.hpp"
#include "test_helpers.hpp"
#include "train_fixture.hpp"

namespace mbkit::train {
namespace {

class OriginalSettingsTest : public test::TrainFixture {
 protected:
  TrainOptions options(const std::string& checkpoint) const {
    TrainOptions o = short_run(checkpoint);
    o.optimizer.name = "sgd";
    o.schedule.lr = 0.1;
    o.steps = 1;
    return o;
  }

  // The parameters a run starts from (the engine initialises the same network the same way).
  std::vector<float> initial_parameters(const TrainOptions& o) const {
    const data::DatasetInfo info = data::DatasetFile::open(o.data).info();
    const data::ImageShape shape = info.shape();
    auto backend = backend::make_backend("cpu", 1);
    nn::Network net(
        models::build_model(o.model, {shape.channels, shape.height, shape.width}, info.num_classes),
        *backend);
    net.initialize(o.seed);
    return {net.parameters().begin(), net.parameters().end()};
  }
};

// --weight-decay-on sum: the original adds wd w to the gradient of the summed loss of each
// gradient evaluation (FMB: the batch; AMB: each micro-batch) and the master divides by the
// samples. One SGD step from w0: w1 = w0 - lr (sum of gradients + k wd w0) / (k p).
TEST_F(OriginalSettingsTest, WeightDecayOnSumIsTheOriginals) {
  const double wd = 0.5, lr = 0.1;
  TrainOptions plain = options("plain.h5");
  ASSERT_EQ(tools::train::run_train_fmb(plain), 0);
  TrainOptions sum = options("sum.h5");
  sum.optimizer.weight_decay = wd;
  sum.weight_decay_on = "sum";
  ASSERT_EQ(tools::train::run_train_fmb(sum), 0);
  // Bit for bit the update of wd / B on the mean (0.5 / 16 is exact in binary).
  TrainOptions mean = options("mean.h5");
  mean.optimizer.weight_decay = wd / 16;
  ASSERT_EQ(tools::train::run_train_fmb(mean), 0);
  EXPECT_EQ(parameters("sum.h5"), parameters("mean.h5"));

  const std::vector<float> w0 = initial_parameters(plain), without = parameters("plain.h5"),
                           with = parameters("sum.h5");
  ASSERT_EQ(w0.size(), with.size());
  std::size_t moved = 0;
  for (std::size_t i = 0; i < w0.size(); ++i) {
    // k = 1 evaluation of B = 16 samples.
    const double by_hand = without[i] - lr * (1 * wd * w0[i]) / (1 * 16);
    EXPECT_NEAR(with[i], by_hand, 1e-6) << "parameter " << i;
    moved += with[i] != without[i] ? 1 : 0;
  }
  EXPECT_GT(moved, w0.size() / 2);  // the decay did something

  // AMB, 4 micro-batches of p = 4, all done: k = 4 evaluations, wd / p per sample.
  TrainOptions amb_plain = options("amb-plain.h5");
  amb_plain.amb.partitions = 4;
  amb_plain.amb.time_limit = 1000;
  ASSERT_EQ(tools::train::run_train_amb(amb_plain), 0);
  TrainOptions amb_sum = amb_plain;
  amb_sum.checkpoint = dir_.file("amb-sum.h5");
  amb_sum.optimizer.weight_decay = wd;
  amb_sum.weight_decay_on = "sum";
  ASSERT_EQ(tools::train::run_train_amb(amb_sum), 0);
  const std::vector<float> amb_without = parameters("amb-plain.h5"),
                           amb_with = parameters("amb-sum.h5");
  for (std::size_t i = 0; i < w0.size(); ++i) {
    const double by_hand = amb_without[i] - lr * (4 * wd * w0[i]) / (4 * 4);
    EXPECT_NEAR(amb_with[i], by_hand, 1e-6) << "parameter " << i;
  }

  TrainOptions bad = options("never.h5");
  bad.weight_decay_on = "batch";
  EXPECT_MBKIT_ERROR(tools::train::run_train_fmb(bad), ExitCode::kUsage,
                     "--weight-decay-on: 'batch' is not mean or sum");
}

}  // namespace
}  // namespace mbkit::train
