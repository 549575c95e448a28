// The real engine on a backend whose memory the host cannot read (the fake device of
// tests/common, registered as --device fake-device): FMB, AMB (micro-batch sums and the
// gradient rescale) and a resume across devices give the CPU's bits, parameters, state and
// optimizer state alike. The network refuses host spans on such a backend, so a run that
// completes has reached its buffers only through HostViews and counted copies.
#include <gtest/gtest.h>

#include "fake_device.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/tools/mb_train.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "train_fixture.hpp"

namespace mbkit::train {
namespace {

class TrainingOnDevice : public test::TrainFixture {
 protected:
  void SetUp() override {
    test::TrainFixture::SetUp();
    backend::register_backend("fake-device", test::make_fake_device_backend);
    backend::register_backend("recording-device", test::make_recording_fake_device_backend);
  }

  TrainOptions options(const std::string& checkpoint, const std::string& device) const {
    TrainOptions o = short_run(checkpoint);
    o.device = device;
    o.optimizer.name = "adam";
    o.schedule.lr = 0.01;
    o.optimizer.weight_decay = 0.001;
    o.steps = 6;
    return o;
  }

  /// Every array of a checkpoint that training changes, in order, after the six steps.
  std::vector<std::vector<float>> arrays(const std::string& checkpoint) const {
    EXPECT_EQ(read_checkpoint(dir_.file(checkpoint)).optimizer_steps, 6);
    return test::TrainFixture::arrays(checkpoint);
  }
};

TEST_F(TrainingOnDevice, FixedMiniBatchGivesTheCpuBits) {
  ASSERT_EQ(tools::train::run_train_fmb(options("cpu.h5", "cpu")), 0);
  ASSERT_EQ(tools::train::run_train_fmb(options("device.h5", "fake-device")), 0);
  EXPECT_EQ(arrays("device.h5"), arrays("cpu.h5"));
}

TEST_F(TrainingOnDevice, AnytimeMicroBatchesGiveTheCpuBits) {
  // A deadline that allows one micro-batch of four: the gradient is rescaled every step.
  for (const std::string device : {"cpu", "fake-device"}) {
    TrainOptions amb = options(device + ".h5", device);
    amb.amb.partitions = 4;
    amb.amb.time_limit = 1e-9;
    ASSERT_EQ(tools::train::run_train_amb(amb), 0) << device;
  }
  EXPECT_EQ(arrays("fake-device.h5"), arrays("cpu.h5"));
}

TEST_F(TrainingOnDevice, ARunResumesAcrossDevices) {
  ASSERT_EQ(tools::train::run_train_fmb(options("straight.h5", "cpu")), 0);
  TrainOptions first = options("moved.h5", "fake-device");
  first.steps = 3;
  ASSERT_EQ(tools::train::run_train_fmb(first), 0);
  TrainOptions rest = options("moved.h5", "cpu");
  rest.resume = "auto";
  ASSERT_EQ(tools::train::run_train_fmb(rest), 0);
  EXPECT_EQ(arrays("moved.h5"), arrays("straight.h5"));
}

// Step graphs (--cuda-graphs, on by default where the backend records them) through the engine's
// rounds: FMB with a short last batch of each epoch, AMB's micro-batches summed into one gradient.
TEST_F(TrainingOnDevice, StepGraphsGiveTheCpuBits) {
  TrainOptions fmb = options("cpu.h5", "cpu");
  fmb.batch_size = 20;  // 96 samples: four batches of 20 and one of 16 an epoch
  fmb.steps = 8;
  ASSERT_EQ(tools::train::run_train_fmb(fmb), 0);
  // Only a backend that records graphs says whether it did.
  EXPECT_EQ(read_checkpoint(dir_.file("cpu.h5")).config_json.find("cuda_graphs"),
            std::string::npos);
  for (const std::string graphs : {"", "off"}) {
    SCOPED_TRACE("--cuda-graphs " + graphs);
    const std::int64_t replays = test::fake_device_replays();
    TrainOptions recorded = fmb;
    recorded.checkpoint = dir_.file("recorded.h5");
    recorded.device = "recording-device";
    recorded.cuda_graphs = graphs;
    recorded.force = true;
    ASSERT_EQ(tools::train::run_train_fmb(recorded), 0);
    EXPECT_EQ(test::TrainFixture::arrays("recorded.h5"), test::TrainFixture::arrays("cpu.h5"));
    const std::string recorded_as =
        graphs == "off" ? R"("cuda_graphs":"off")" : R"("cuda_graphs":"on")";
    EXPECT_NE(read_checkpoint(recorded.checkpoint).config_json.find(recorded_as),
              std::string::npos);
    if (graphs == "off") {
      EXPECT_EQ(test::fake_device_replays(), replays);
    } else {
      EXPECT_GT(test::fake_device_replays(), replays);
    }
  }
  for (const std::string device : {"cpu", "recording-device"}) {
    TrainOptions amb = options("amb-" + device + ".h5", device);
    amb.amb.partitions = 4;
    amb.amb.time_limit = 1e9;  // all four micro-batches every step
    ASSERT_EQ(tools::train::run_train_amb(amb), 0) << device;
  }
  EXPECT_EQ(arrays("amb-recording-device.h5"), arrays("amb-cpu.h5"));
}

}  // namespace
}  // namespace mbkit::train
