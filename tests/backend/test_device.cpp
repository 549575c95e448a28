// --device and the GPU each rank takes: what can be checked without a GPU is checked here.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "mbkit/backend/device.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/config.hpp"
#include "test_helpers.hpp"

namespace mbkit::backend {
namespace {

TEST(Device, ParsesTheThreeForms) {
  EXPECT_EQ(parse_device("cpu"), Device{});
  EXPECT_EQ(parse_device("cuda"), (Device{Device::Kind::kCuda, -1}));
  EXPECT_EQ(parse_device("cuda:0"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(parse_device("cuda:12"), (Device{Device::Kind::kCuda, 12}));
  for (const char* text : {"cpu", "cuda", "cuda:3"}) EXPECT_EQ(parse_device(text).text(), text);
}

TEST(Device, RefusesOtherTextNamingTheFlag) {
  EXPECT_MBKIT_ERROR(parse_device("gpu"), ExitCode::kUsage, "--device: unknown device 'gpu'");
  EXPECT_MBKIT_ERROR(parse_device(""), ExitCode::kUsage, "--device: unknown device ''");
  for (const char* bad :
       {"cuda:", "cuda:-1", "cuda:x", "cuda:1.5", "cuda: 1", "cuda:99999999999"}) {
    EXPECT_MBKIT_ERROR(parse_device(bad), ExitCode::kUsage, "must be a whole number");
  }
}

EnvironmentLookup environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    const auto found = values.find(name);
    return found == values.end() ? nullptr : found->second.c_str();
  };
}

TEST(Device, LocalRankComesFromTheLauncher) {
  EXPECT_FALSE(local_rank_from_environment(environment({})).has_value());
  const auto slurm = local_rank_from_environment(environment({{"SLURM_LOCALID", "2"}}));
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->rank, 2);
  EXPECT_EQ(slurm->variable, "SLURM_LOCALID");
  // Open MPI started under SLURM sets both; its own is the rank among its processes.
  const auto both = local_rank_from_environment(
      environment({{"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->rank, 1);
  EXPECT_EQ(both->variable, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(local_rank_from_environment(environment({{"MPI_LOCALRANKID", "3"}}))->rank, 3);
  EXPECT_MBKIT_ERROR(local_rank_from_environment(environment({{"SLURM_LOCALID", "one"}})),
                     ExitCode::kUsage, "SLURM_LOCALID='one' is not a local rank");
}

TEST(Device, EachRankTakesItsLocalRanksGpu) {
  const Device cuda{Device::Kind::kCuda, -1};
  EXPECT_EQ(choose_gpu(cuda, std::nullopt, 1, nullptr), 0);
  EXPECT_EQ(choose_gpu(cuda, LocalRank{3, "SLURM_LOCALID"}, 4, nullptr), 3);
  // A named GPU may be shared by the ranks of a node.
  EXPECT_EQ(choose_gpu(Device{Device::Kind::kCuda, 1}, LocalRank{3, "SLURM_LOCALID"}, 2, nullptr),
            1);
}

TEST(Device, MissingGpusAreOneClearLine) {
  const Device cuda{Device::Kind::kCuda, -1};
  EXPECT_MBKIT_ERROR(choose_gpu(cuda, std::nullopt, 0, nullptr), ExitCode::kUsage,
                     "--device cuda: no CUDA GPU is visible to this process");
  EXPECT_MBKIT_ERROR(choose_gpu(cuda, std::nullopt, 0, ""), ExitCode::kUsage,
                     "(CUDA_VISIBLE_DEVICES=)");
  EXPECT_MBKIT_ERROR(choose_gpu(Device{Device::Kind::kCuda, 2}, std::nullopt, 2, nullptr),
                     ExitCode::kUsage, "--device cuda:2: this node has 2 GPUs (cuda:0 to cuda:1)");
  EXPECT_MBKIT_ERROR(
      choose_gpu(cuda, LocalRank{2, "OMPI_COMM_WORLD_LOCAL_RANK"}, 2, "0,1"), ExitCode::kUsage,
      "local rank 2 (OMPI_COMM_WORLD_LOCAL_RANK) has no GPU of its own: this node has 2 "
      "(CUDA_VISIBLE_DEVICES=0,1); start at most 2 ranks per node");
}

TEST(Device, MakeBackendSaysWhyThereIsNoGpuBackend) {
  EXPECT_MBKIT_ERROR(make_backend("tpu", 1), ExitCode::kUsage, "--device: unknown device 'tpu'");
  EXPECT_MBKIT_ERROR(make_backend("cuda:x", 1), ExitCode::kUsage, "--device cuda:x");
  // Without a CUDA build: "not built"; with one, on a machine without a GPU: none visible; on a
  // GPU: the backend has no operations yet. Every way, a usage error naming --device cuda.
  EXPECT_MBKIT_ERROR(make_backend("cuda", 1), ExitCode::kUsage, "--device cuda: ");
  EXPECT_EQ(make_backend("cpu", 1)->threads(), 1);
}

TEST(Precision, NamesAndParsing) {
  for (nn::Precision p : {nn::Precision::kFp32, nn::Precision::kTf32, nn::Precision::kBf16}) {
    EXPECT_EQ(nn::parse_precision(nn::precision_name(p)), p);
  }
  EXPECT_EQ(nn::precision_name(nn::Precision::kBf16), "bf16");
  EXPECT_FALSE(nn::find_precision("fp16"));
  EXPECT_FALSE(nn::find_precision("FP32"));
  EXPECT_MBKIT_ERROR(nn::parse_precision("fp16"), ExitCode::kUsage,
                     "--precision: unknown precision 'fp16' (known: fp32, tf32, bf16)");
}

// The CPU backend computes in fp32 only: another precision is one usage line naming both flags,
// never a CPU run that silently ignores it.
TEST(Precision, TheCpuRefusesAnythingButFp32) {
  EXPECT_EQ(make_backend("cpu", 1, nn::Precision::kFp32)->precision(), nn::Precision::kFp32);
  EXPECT_MBKIT_ERROR(make_backend("cpu", 1, nn::Precision::kTf32), ExitCode::kUsage,
                     "--precision tf32: --device cpu computes in fp32 only (tf32 and bf16 need "
                     "--device cuda)");
  EXPECT_MBKIT_ERROR(make_backend("cpu", 1, nn::Precision::kBf16), ExitCode::kUsage,
                     "--precision bf16: --device cpu computes in fp32 only");
}

}  // namespace
}  // namespace mbkit::backend
