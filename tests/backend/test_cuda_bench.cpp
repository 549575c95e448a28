// mb-bench-bandwidth --device cuda on a GPU, one rank, without MPI: every collective NCCL has
// on the GPU buffers (float and double) and every MPI collective staged through pinned host
// memory give the exact expected values (column wrong 0) and a positive time; the check finds
// a corrupted element; an aborted communicator refuses calls; the tool's header names the GPU
// and NCCL's version. Skips, saying why, without a GPU (or NCCL); two ranks are
// tests/e2e/test_cuda_bandwidth.py's.
#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/tools/mb_bench_bandwidth.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::bench {
namespace {

class CudaBenchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!plugin::gpu_driver_present()) GTEST_SKIP() << "no NVIDIA driver (libcuda.so.1)";
    std::string why_not;
    plugin_ = plugin::cuda_plugin(&why_not);
    if (plugin_ == nullptr) GTEST_SKIP() << "CUDA backend not run: " << why_not;
    if (plugin_->device_count() == 0) GTEST_SKIP() << "no CUDA GPU is visible to this process";
    gpu_.reset(backend::cuda_backend_maker()(0, 0));
  }
  void TearDown() override { gpu_.reset(); }

  bool has_nccl() const { return !plugin_->nccl_version().empty(); }

  static MeasureOptions few_iterations(Dtype dtype) {
    MeasureOptions options;
    options.dtype = dtype;
    options.iters = 3;
    options.warmup_iters = 1;
    return options;
  }

  // Sizes whose element counts are not powers of two too: NCCL's chunks do not divide them.
  const std::vector<std::size_t> sizes_ = {4, 4096, 100004, 1 << 20};
  const plugin::CudaPluginApi* plugin_ = nullptr;
  std::unique_ptr<nn::Backend> gpu_;
  comm::World world_;
};

void expect_right(const std::vector<Row>& rows, std::size_t sizes, const std::string& what) {
  ASSERT_EQ(rows.size(), sizes) << what;
  for (const Row& row : rows) {
    EXPECT_EQ(row.wrong, 0) << what << " at " << row.bytes << " bytes";
    EXPECT_GT(row.avg_us, 0.0) << what << " at " << row.bytes << " bytes";
    EXPECT_EQ(row.bytes, row.count * (row.type == "float" ? 4u : 8u)) << what;
  }
}

TEST_F(CudaBenchGpu, EveryNcclCollectiveIsExactInFloatAndDouble) {
  if (!has_nccl()) GTEST_SKIP() << "libmbkit-cuda was built without NCCL";
  const auto bench = make_device_bench(world_, *gpu_, true);
  EXPECT_EQ(bench->nccl_description().rfind("NCCL ", 0), 0u) << bench->nccl_description();
  for (const Op op :
       {Op::kAllreduce, Op::kReduce, Op::kBcast, Op::kAllgather, Op::kReduceScatter}) {
    for (const Dtype dtype : {Dtype::kFloat, Dtype::kDouble}) {
      const auto rows = measure_device_collective(world_, *bench, Transport::kNccl, op, sizes_,
                                                  few_iterations(dtype));
      expect_right(rows, sizes_.size(), op_name(op) + " " + dtype_name(dtype));
    }
  }
}

TEST_F(CudaBenchGpu, EveryMpiCollectiveStagedThroughTheHostIsExact) {
  const auto bench = make_device_bench(world_, *gpu_, false);
  EXPECT_EQ(bench->nccl_description(), "");
  for (const Op op : {Op::kReduceBcast, Op::kAllreduce, Op::kReduce, Op::kBcast, Op::kGather,
                      Op::kAllgather, Op::kReduceScatter}) {
    const auto rows = measure_device_collective(world_, *bench, Transport::kMpi, op, sizes_,
                                                few_iterations(Dtype::kFloat));
    expect_right(rows, sizes_.size(), op_name(op));
  }
  EXPECT_THROW(bench->start(Op::kAllreduce, Dtype::kFloat, 4), Error);  // made without NCCL
}

TEST_F(CudaBenchGpu, TheCheckFindsACorruptedElement) {
  if (!has_nccl()) GTEST_SKIP() << "libmbkit-cuda was built without NCCL";
  const auto bench = make_device_bench(world_, *gpu_, true);
  auto options = few_iterations(Dtype::kFloat);
  options.corrupt = true;
  for (const Transport transport : {Transport::kNccl, Transport::kMpi}) {
    const auto rows =
        measure_device_collective(world_, *bench, transport, Op::kAllreduce, {4096}, options);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].wrong, 1) << transport_name(transport);
  }
}

TEST_F(CudaBenchGpu, AnAbortedCommunicatorRefusesCalls) {
  if (!has_nccl()) GTEST_SKIP() << "libmbkit-cuda was built without NCCL";
  const auto bench = make_device_bench(world_, *gpu_, true);
  bench->resize(64, 64);
  bench->abort();
  bench->abort();  // twice: harmless
  EXPECT_THROW(bench->start(Op::kAllreduce, Dtype::kFloat, 16), Error);
  EXPECT_THROW(bench->poll(), Error);
}

TEST_F(CudaBenchGpu, TheToolsHeaderNamesTheGpuAndNccl) {
  if (!has_nccl()) GTEST_SKIP() << "libmbkit-cuda was built without NCCL";
  gpu_.reset();  // the tool makes its own
  tools::bench_bandwidth::BandwidthOptions options;
  options.device = "cuda";
  options.ops = {"all"};  // on NCCL: the five it has
  options.min_bytes = "4K";
  options.max_bytes = "8K";
  options.iters = 2;
  options.warmup_iters = 1;
  std::ostringstream out;
  EXPECT_EQ(tools::bench_bandwidth::run_bench_bandwidth(options, out), 0) << out.str();
  const std::string table = out.str();
  EXPECT_TRUE(std::regex_search(table, std::regex("\n# device: cuda:0: [^\n]+GiB"))) << table;
  EXPECT_TRUE(std::regex_search(table, std::regex("\n# transport: NCCL \\d+\\.\\d+\\.\\d+ ")))
      << table;
  for (const char* op : {"allreduce-nccl ", "reduce-nccl ", "bcast-nccl ", "allgather-nccl ",
                         "reduce-scatter-nccl "}) {
    EXPECT_NE(table.find(cat("\n", op)), std::string::npos) << op << "\n" << table;
  }
  for (const char* refused : {"\ngather", "\nreduce-bcast", "\nexchange"}) {
    EXPECT_EQ(table.find(refused), std::string::npos) << refused << "\n" << table;
  }
  EXPECT_NE(table.find("# wrong elements: 0"), std::string::npos) << table;
}

}  // namespace
}  // namespace mbkit::bench
