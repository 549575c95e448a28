// --allreduce nccl without a GPU: the option, auto's choice by device, and the exchange driving
// a device sum (a recording fake of comm::DeviceAllreduce) in the MPI sum's buckets. The NCCL
// sums themselves run in tests/e2e/test_cuda_nccl.py on a GPU.
#include <gtest/gtest.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/nn/buffer.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(AllreduceNccl, ParsesAndPrintsTheOption) {
  EXPECT_EQ(parse_allreduce_via("nccl"), AllreduceVia::kNccl);
  EXPECT_STREQ(to_string(AllreduceVia::kNccl), "nccl");
  EXPECT_MBKIT_ERROR(parse_allreduce_via("NCCL"), ExitCode::kUsage,
                     "is not auto, shm, mpi or nccl");
}

TrainOptions allreduce_on(const std::string& device, AllreduceVia via) {
  TrainOptions o;
  o.comm = CommMode::kAllreduce;
  o.device = device;
  o.allreduce = via;
  return o;
}

TEST(AllreduceNccl, NcclOnTheCpuIsAUsageError) {
  EXPECT_MBKIT_ERROR(allreduce_with_nccl(allreduce_on("cpu", AllreduceVia::kNccl), true),
                     ExitCode::kUsage,
                     "--allreduce nccl sums gradients in GPU memory; --device is cpu");
  TrainOptions compressed = allreduce_on("cuda", AllreduceVia::kNccl);
  compressed.compression = comm::parse_compression("2bit:0.5");
  EXPECT_MBKIT_ERROR(allreduce_with_nccl(compressed, true), ExitCode::kUsage,
                     "--compress: encoded gradients are gathered through MPI");
}

TEST(AllreduceNccl, AutoChoosesNcclOnGpusWithSeveralRanks) {
  EXPECT_TRUE(allreduce_with_nccl(allreduce_on("cuda", AllreduceVia::kAuto), true));
  EXPECT_TRUE(allreduce_with_nccl(allreduce_on("cuda:1", AllreduceVia::kAuto), true));
  EXPECT_FALSE(allreduce_with_nccl(allreduce_on("cpu", AllreduceVia::kAuto), true));
  EXPECT_FALSE(allreduce_with_nccl(allreduce_on("cuda", AllreduceVia::kAuto), false));  // alone
  EXPECT_FALSE(allreduce_with_nccl(allreduce_on("cuda", AllreduceVia::kMpi), true));
  EXPECT_FALSE(allreduce_with_nccl(allreduce_on("cuda", AllreduceVia::kSharedMemory), true));
  TrainOptions ps = allreduce_on("cuda", AllreduceVia::kAuto);
  ps.comm = CommMode::kPs;
  EXPECT_FALSE(allreduce_with_nccl(ps, true));
  TrainOptions compressed = allreduce_on("cuda", AllreduceVia::kAuto);
  compressed.compression = comm::parse_compression("2bit:0.5");
  EXPECT_FALSE(allreduce_with_nccl(compressed, true));
  // Asked for explicitly it runs with one rank too (a one-rank communicator).
  EXPECT_TRUE(allreduce_with_nccl(allreduce_on("cuda", AllreduceVia::kNccl), false));
}

/// Records the sums it is asked to start; poll() fails once `fail` is set.
class RecordingSum final : public comm::DeviceAllreduce {
 public:
  std::string description() const override { return "fake 1.0"; }
  bool ready() override {
    if (fail_ready) throw Error("ncclCommInitRankConfig failed: x", ExitCode::kCommunication);
    return true;
  }
  void start(nn::Buffer& buffer, std::size_t offset, std::size_t count) override {
    EXPECT_LE(offset + count, buffer.size());
    started.emplace_back(offset, count);
  }
  bool poll() override {
    if (fail) throw Error("ncclAllReduce failed: remote process exited", ExitCode::kCommunication);
    return true;
  }
  void abort() noexcept override { ++aborts; }

  std::vector<std::pair<std::size_t, std::size_t>> started;
  bool fail = false;
  bool fail_ready = false;
  int aborts = 0;
};

using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;

TEST(AllreduceNccl, DeviceSumsFollowTheBucketPlanOfTheMpiSum) {
  comm::World world;  // one process: the device sum runs all the same
  SyncExchange exchange(world, false, AllreduceVia::kNccl);
  RecordingSum sum;
  nn::HostBuffer gradients(100);
  exchange.set_device_allreduce(sum, gradients, 100);
  exchange.set_bucket_floats(30);
  ASSERT_TRUE(exchange.buckets());
  // Final from the end backwards, as Network::backward reports them: a bucket starts once at
  // least 30 floats not yet started are final.
  exchange.gradients_ready({}, 80);
  EXPECT_TRUE(sum.started.empty());
  exchange.gradients_ready({}, 60);
  exchange.gradients_ready({}, 20);
  exchange.gradients_ready({}, 0 + 5);  // 15 floats: under a bucket, left for combine()
  EXPECT_EQ(sum.started, (Ranges{{60, 40}, {20, 40}}));
  EXPECT_EQ(exchange.started_sums(), 2u);
  WorkerReport report;
  report.samples = 8;
  report.loss_sum = 4;
  std::vector<float> state;
  const CombinedStep step = exchange.combine({}, state, report, 0, 8);
  EXPECT_EQ(sum.started, (Ranges{{60, 40}, {20, 40}, {0, 20}}));  // the rest, in one sum
  EXPECT_EQ(exchange.started_sums(), 0u);
  EXPECT_EQ(step.samples, 8);
  EXPECT_DOUBLE_EQ(step.loss_sum, 4);
  // The next step starts over from the end.
  sum.started.clear();
  exchange.gradients_ready({}, 50);
  exchange.combine({}, state, report, 1, 8);
  EXPECT_EQ(sum.started, (Ranges{{50, 50}, {0, 50}}));
}

TEST(AllreduceNccl, WithoutBucketsOneSumOfTheWholeBuffer) {
  comm::World world;
  SyncExchange exchange(world, false, AllreduceVia::kNccl);
  RecordingSum sum;
  nn::HostBuffer gradients(110);  // room for a tail beyond the 100 gradients: not summed
  exchange.set_device_allreduce(sum, gradients, 100);
  exchange.set_bucket_floats(0);
  EXPECT_FALSE(exchange.buckets());
  WorkerReport report;
  report.samples = 4;
  std::vector<float> state;
  exchange.combine({}, state, report, 0, 4);
  EXPECT_EQ(sum.started, (Ranges{{0, 100}}));
}

TEST(AllreduceNccl, AFailedSumAbortsTheCommunicatorAndNamesTheCall) {
  comm::World world;
  SyncExchange exchange(world, false, AllreduceVia::kNccl);
  RecordingSum sum;
  nn::HostBuffer gradients(10);
  exchange.set_device_allreduce(sum, gradients, 10);
  sum.fail = true;
  WorkerReport report;
  report.samples = 1;
  std::vector<float> state;
  EXPECT_MBKIT_ERROR(exchange.combine({}, state, report, 0, 1), ExitCode::kCommunication,
                     "ncclAllReduce failed");
  EXPECT_EQ(sum.aborts, 1);
}

TEST(AllreduceNccl, ACallNcclCannotQueueAbortsTheCommunicator) {
  comm::World world;
  SyncExchange exchange(world, false, AllreduceVia::kNccl);
  RecordingSum sum;
  nn::HostBuffer gradients(100);
  exchange.set_device_allreduce(sum, gradients, 100);
  exchange.set_bucket_floats(10);
  sum.fail_ready = true;
  EXPECT_MBKIT_ERROR(exchange.gradients_ready({}, 50), ExitCode::kCommunication,
                     "ncclCommInitRankConfig failed");
  EXPECT_EQ(sum.aborts, 1);
  EXPECT_TRUE(sum.started.empty());
}

}  // namespace
}  // namespace mbkit::train
