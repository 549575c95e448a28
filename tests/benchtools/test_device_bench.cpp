// measure_device_collective's side of mb-bench-bandwidth --device cuda, without a GPU: a fake
// DeviceBench keeps its "device" buffers in host memory and runs each collective as one rank
// does, so the core's part is checked here on every machine: which buffer is copied which way
// and when, the in-place bcast, the check on the copied-back result, the time from the events
// around the queued loop, waits for calls that NCCL is still queuing, and a call that never
// completes (a dead peer) ending in exit code 4 with the communicator aborted. The real
// buffers, streams and NCCL are tests/backend/test_cuda_bench.cpp's (on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "mbkit/bench/device_bench.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::bench {
namespace {

class FakeDeviceBench final : public DeviceBench {
 public:
  /// Each call is "queued" for `busy_polls` polls of ready() and of poll(); `stuck`: forever.
  explicit FakeDeviceBench(int busy_polls = 0, bool stuck = false)
      : busy_polls_(busy_polls), stuck_(stuck) {}

  std::string nccl_description() const override { return "NCCL 0.0.0"; }
  void resize(std::size_t send_bytes, std::size_t receive_bytes) override {
    device_send_.assign(send_bytes, 0xAB);  // not the values: a missing copy shows
    device_receive_.assign(receive_bytes, 0xAB);
    host_send_.assign(send_bytes, 0xCD);
    host_receive_.assign(receive_bytes, 0xCD);
  }
  std::span<std::uint8_t> host_send() override { return host_send_; }
  std::span<std::uint8_t> host_receive() override { return host_receive_; }
  void copy(DeviceCopy what) override {
    ++copies;
    switch (what) {
      case DeviceCopy::kSendToDevice:
        device_send_ = host_send_;
        break;
      case DeviceCopy::kReceiveToDevice:
        device_receive_ = host_receive_;
        break;
      case DeviceCopy::kSendToHost:
        host_send_ = device_send_;
        break;
      case DeviceCopy::kReceiveToHost:
        host_receive_ = device_receive_;
        break;
    }
  }
  void synchronize() override {}
  void record_start() override { calls_at_start_ = calls; }
  void record_stop() override { calls_at_stop_ = calls; }
  /// 1 ms per call queued between the two events.
  double recorded_seconds() override { return 1e-3 * (calls_at_stop_ - calls_at_start_); }

  bool ready() override { return !busy(); }
  void start(Op op, Dtype dtype, std::size_t count) override {
    EXPECT_FALSE(aborted) << "a call on an aborted communicator";
    EXPECT_EQ(pending_, 0) << "a call before the last one was queued";
    ++calls;
    pending_ = stuck_ ? -1 : busy_polls_;
    // One rank: every collective but the in-place bcast is the copy of the send buffer.
    if (op == Op::kBcast) return;
    const std::size_t bytes = count * type_size(dtype);
    EXPECT_LE(bytes, device_send_.size());
    EXPECT_LE(bytes, device_receive_.size());
    std::memcpy(device_receive_.data(), device_send_.data(), bytes);
  }
  bool poll() override { return !busy(); }
  void abort() noexcept override { aborted = true; }

  int calls = 0;
  int copies = 0;
  bool aborted = false;

 private:
  bool busy() {
    if (pending_ < 0) return true;
    if (pending_ == 0) return false;
    --pending_;
    return true;
  }

  int busy_polls_;
  bool stuck_;
  int pending_ = 0;
  int calls_at_start_ = 0, calls_at_stop_ = 0;
  std::vector<std::uint8_t> device_send_, device_receive_, host_send_, host_receive_;
};

MeasureOptions options(Dtype dtype = Dtype::kFloat) {
  MeasureOptions o;
  o.dtype = dtype;
  o.iters = 4;
  o.warmup_iters = 2;
  return o;
}

const std::vector<Op> kNcclOps = {Op::kAllreduce, Op::kReduce, Op::kBcast, Op::kAllgather,
                                  Op::kReduceScatter};

TEST(DeviceBench, NcclHasTheFiveCollectivesAndTransportsParse) {
  for (const auto& name : op_names()) {
    const Op op = parse_op(name);
    const bool listed = std::find(kNcclOps.begin(), kNcclOps.end(), op) != kNcclOps.end();
    EXPECT_EQ(nccl_has(op), listed) << name;
  }
  EXPECT_EQ(parse_transport("nccl"), Transport::kNccl);
  EXPECT_EQ(parse_transport("mpi"), Transport::kMpi);
  EXPECT_STREQ(transport_name(Transport::kNccl), "nccl");
  EXPECT_THROW(parse_transport("NCCL"), Error);
}

TEST(DeviceBench, NcclRowsAreRightAndTimedByTheEvents) {
  comm::World world;
  for (const Dtype dtype : {Dtype::kFloat, Dtype::kDouble}) {
    for (const Op op : kNcclOps) {
      FakeDeviceBench bench(/*busy_polls=*/2);  // every call waited for before the next
      const auto rows = measure_device_collective(world, bench, Transport::kNccl, op,
                                                  {4, 4096, 100004}, options(dtype));
      ASSERT_EQ(rows.size(), 3u);
      for (const Row& row : rows) {
        EXPECT_EQ(row.wrong, 0) << op_name(op) << " " << row.bytes;
        EXPECT_DOUBLE_EQ(row.avg_us, 1000.0) << op_name(op);  // 1 ms per call, from the events
        EXPECT_EQ(row.type, dtype_name(dtype));
      }
      EXPECT_EQ(rows[2].count, 100004 / type_size(dtype));
      // Warm-up at the largest size, then per size: warm-up, timed loop, checked call.
      EXPECT_EQ(bench.calls, 2 + 3 * (2 + 4 + 1));
      EXPECT_FALSE(bench.aborted);
    }
  }
}

TEST(DeviceBench, MpiStagesEveryCollectiveThroughTheHost) {
  comm::World world;
  for (const auto& name : op_names()) {
    const Op op = parse_op(name);
    if (op == Op::kExchange) continue;
    FakeDeviceBench bench;
    const auto rows =
        measure_device_collective(world, bench, Transport::kMpi, op, {8, 4096}, options());
    ASSERT_EQ(rows.size(), 2u);
    for (const Row& row : rows) EXPECT_EQ(row.wrong, 0) << name << " " << row.bytes;
    EXPECT_EQ(bench.calls, 0) << "no NCCL call on the mpi transport";
    EXPECT_GT(bench.copies, 2 * 2 * (2 + 4 + 1)) << "each iteration copies in and out";
  }
}

TEST(DeviceBench, TheCheckFindsACorruptedElement) {
  comm::World world;
  auto o = options();
  o.corrupt = true;
  for (const Transport transport : {Transport::kNccl, Transport::kMpi}) {
    FakeDeviceBench bench;
    const auto rows = measure_device_collective(world, bench, transport, Op::kBcast, {64}, o);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].wrong, 1) << transport_name(transport);
  }
}

TEST(DeviceBench, ACallThatNeverCompletesEndsWithTheDeadlineAndAborts) {
  comm::World world;
  world.set_timeout(0.05);
  FakeDeviceBench bench(0, /*stuck=*/true);
  try {
    measure_device_collective(world, bench, Transport::kNccl, Op::kAllreduce, {64}, options());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kCommunication) << error.what();
    EXPECT_NE(std::string(error.what()).find("NCCL"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(bench.aborted);
  EXPECT_EQ(bench.calls, 1);  // the first warm-up call; the next waited for it
}

}  // namespace
}  // namespace mbkit::bench
