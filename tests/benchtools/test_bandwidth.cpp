// mb-bench-bandwidth's library: the bus factors of every operation (nccl-tests' definitions),
// sizes and their errors, the table's columns, the --append file, and the tool in-process on one
// process (collectives are then copies), with the test hook that corrupts a result.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/bench/measure.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/tools/mb_bench_bandwidth.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::bench {
namespace {

using test::code_of;

TEST(BusFactor, IsNcclTestsFactorOfEveryOperation) {
  for (const int n : {1, 2, 3, 4, 8}) {
    const double ring = (n - 1.0) / n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kAllreduce, n), 2 * ring) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kReduceScatter, n), ring) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kAllgather, n), ring) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kGather, n), ring) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kReduce, n), 1) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kBcast, n), 1) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kReduceBcast, n), 2) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kExchange, n, "ps"), 2) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kExchange, n, "async"), 2) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Op::kExchange, n, "allreduce-shm"), 2 * ring) << n;
  }
}

TEST(Bandwidth, TimesOverRanksGiveAlgbwAndBusbw) {
  Row row;
  row.bytes = 8'000'000;
  set_times(row, {0.001, 0.003}, 1.5);
  EXPECT_DOUBLE_EQ(row.avg_us, 2000);
  EXPECT_DOUBLE_EQ(row.min_us, 1000);
  EXPECT_DOUBLE_EQ(row.max_us, 3000);
  EXPECT_DOUBLE_EQ(row.algbw_gbps, 4.0);  // 8 MB in 2 ms
  EXPECT_DOUBLE_EQ(row.busbw_gbps, 6.0);
}

TEST(Sizes, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_bytes("17", "--min-bytes"), 17u);
  EXPECT_EQ(parse_bytes("4K", "--min-bytes"), 4096u);
  EXPECT_EQ(parse_bytes("1M", "--min-bytes"), 1048576u);
  EXPECT_EQ(parse_bytes("2g", "--min-bytes"), 2u << 30);
  EXPECT_EQ(parse_bytes("8MiB", "--min-bytes"), 8u << 20);
  for (const char* bad : {"", "M", "1X", "0", "-1", "1.5M", "99999999999999"}) {
    EXPECT_EQ(code_of([&] { parse_bytes(bad, "--max-bytes"); }), ExitCode::kUsage) << bad;
  }
  try {
    parse_bytes("1X", "--max-bytes");
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--max-bytes"), std::string::npos);
  }
}

TEST(Sizes, SeriesFromMinToMaxByFactor) {
  EXPECT_EQ(size_series(1024, 16384, 2), (std::vector<std::size_t>{1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(size_series(1 << 20, 16 << 20, 4),
            (std::vector<std::size_t>{1 << 20, 4 << 20, 16 << 20}));
  EXPECT_EQ(size_series(1000, 1000, 2), (std::vector<std::size_t>{1000}));
  EXPECT_EQ(code_of([] { size_series(2048, 1024, 2); }), ExitCode::kUsage);
  EXPECT_EQ(code_of([] { size_series(1024, 2048, 1); }), ExitCode::kUsage);
}

TEST(Sizes, BlockOperationsMoveWholeBlocksPerRank) {
  EXPECT_EQ(element_count(Op::kAllreduce, 1000, 4, 3), 250u);
  EXPECT_EQ(element_count(Op::kAllgather, 1000, 4, 3), 249u);
  EXPECT_EQ(element_count(Op::kReduceScatter, 4, 8, 3), 3u);  // at least one element each
  EXPECT_EQ(element_count(Op::kGather, 1 << 20, 8, 2), 131072u);
}

TEST(Iterations, LargeItersFromLargeFromOn) {
  MeasureOptions options;
  options.iters = 200;
  EXPECT_EQ(options.iters_at(64 << 20), 200);  // large_from 0: iters at every size
  options.large_from = 4 << 20;
  options.large_iters = 20;
  EXPECT_EQ(options.iters_at((4 << 20) - 1), 200);
  EXPECT_EQ(options.iters_at(4 << 20), 20);
  EXPECT_EQ(options.iters_at(16 << 20), 20);
}

TEST(Ops, NamesRoundTripAndUnknownIsAUsageError) {
  for (const auto& name : op_names()) EXPECT_EQ(op_name(parse_op(name)), name);
  EXPECT_EQ(code_of([] { parse_op("alltoall"); }), ExitCode::kUsage);
  EXPECT_EQ(code_of([] { parse_dtype("half"); }), ExitCode::kUsage);
}

TEST(Table, RowsHaveTheHeadersColumns) {
  Row row{"exchange-allreduce-shm", 4096, 1024, "float", 1.5, 1, 2, 2.7, 2.7, 0};
  const auto header = split(std::string(results::column_header()).substr(2), ' ');
  std::istringstream line(results::format_row(row));
  std::vector<std::string> fields;
  for (std::string field; line >> field;) fields.push_back(field);
  ASSERT_EQ(fields.size(), header.size());
  EXPECT_EQ(header[0], "op");
  EXPECT_EQ(fields[0], "exchange-allreduce-shm");
  EXPECT_EQ(fields[1], "4096");
  EXPECT_EQ(fields.back(), "0");
}

Run sample_run(int ranks, const std::string& op, double time) {
  Run run;
  run.ranks = ranks;
  run.op = op;
  run.dtype = "float";
  run.iters = 20;
  run.warmup_iters = 5;
  run.hosts = "h x2";
  run.created = "2026-11-25T09:00:00Z";
  run.rows.push_back({op, 1024, 256, "float", time, time / 2, time * 2, 1, 2, 0});
  run.rows.push_back({op, 2048, 512, "float", time * 2, time, time * 3, 1, 2, 3});
  return run;
}

TEST(ResultsFile, AppendKeysByRanksAndOperationAndReplacesTheSameKey) {
  test::TempDir dir;
  const auto path = dir.file("bw.h5");
  results::append_run(path, sample_run(3, "allreduce", 10));
  results::append_run(path, sample_run(2, "allreduce", 20));
  results::append_run(path, sample_run(3, "bcast", 30));
  results::Run large = sample_run(3, "allreduce", 40);
  large.large_iters = 2;
  large.large_from = 2048;
  results::append_run(path, large);  // replaces the first
  const auto runs = results::read_runs(path);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].ranks, 2);
  EXPECT_EQ(runs[1].ranks, 3);
  EXPECT_EQ(runs[1].op, "allreduce");
  EXPECT_DOUBLE_EQ(runs[1].rows[0].avg_us, 40);
  EXPECT_EQ(runs[1].large_iters, 2);
  EXPECT_EQ(runs[1].large_from, 2048u);
  EXPECT_EQ(runs[0].large_iters, 0);
  EXPECT_EQ(runs[2].op, "bcast");
  ASSERT_EQ(runs[2].rows.size(), 2u);
  EXPECT_EQ(runs[2].rows[1].bytes, 2048u);
  EXPECT_EQ(runs[2].rows[1].count, 512u);
  EXPECT_EQ(runs[2].rows[1].wrong, 3);
  EXPECT_DOUBLE_EQ(runs[2].rows[1].max_us, 90);
  EXPECT_EQ(runs[2].hosts, "h x2");
  const io::File file = io::File::open(path);
  EXPECT_TRUE(file.has("np3/allreduce/busbw_GBps"));
  EXPECT_EQ(file.string_attribute("format"), "mbkit-bandwidth");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"bw.h5"});  // no temporary left
}

TEST(ResultsFile, AnotherFileIsADataError) {
  test::TempDir dir;
  const auto path = dir.file("other.h5");
  io::File::create(path).close();
  EXPECT_EQ(code_of([&] { results::read_runs(path); }), ExitCode::kBadData);
  EXPECT_EQ(code_of([&] { results::append_run(path, sample_run(2, "reduce", 1)); }),
            ExitCode::kBadData);
}

// The tool on one process: a table whose last '#' line before the rows names the columns.
struct ToolRun {
  int status = 0;
  std::vector<std::string> comments;
  std::vector<std::vector<std::string>> rows;
};

ToolRun run_tool(const tools::bench_bandwidth::BandwidthOptions& options) {
  std::ostringstream out;
  ToolRun result;
  result.status = tools::bench_bandwidth::run_bench_bandwidth(options, out);
  for (const auto& line : split(out.str(), '\n')) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      result.comments.push_back(line);
      continue;
    }
    std::istringstream fields(line);
    result.rows.emplace_back();
    for (std::string f; fields >> f;) result.rows.back().push_back(f);
  }
  return result;
}

TEST(BandwidthTool, OneProcessTableIsCheckedAndAppended) {
  test::TempDir dir;
  tools::bench_bandwidth::BandwidthOptions options;
  options.ops = {"allreduce,gather", "reduce-scatter"};
  options.min_bytes = "1K";
  options.max_bytes = "4K";
  options.iters = 3;
  options.warmup_iters = 1;
  options.dtype = "double";
  options.append = dir.file("bw.h5");
  const auto run = run_tool(options);
  EXPECT_EQ(run.status, 0);
  ASSERT_EQ(run.rows.size(), 9u);
  EXPECT_EQ(run.comments[run.comments.size() - 2], results::column_header());
  for (const auto& row : run.rows) {
    EXPECT_EQ(row[3], "double");
    EXPECT_EQ(row.back(), "0");
  }
  EXPECT_EQ(run.rows[0][0], "allreduce");
  EXPECT_EQ(run.rows[2][1], "4096");
  EXPECT_EQ(run.rows[2][2], "512");
  EXPECT_EQ(run.rows[8][0], "reduce-scatter");
  EXPECT_EQ(results::read_runs(options.append).size(), 3u);
}

TEST(BandwidthTool, LargeItersAreInTheHeaderAndTheFile) {
  test::TempDir dir;
  tools::bench_bandwidth::BandwidthOptions options;
  options.min_bytes = "1K";
  options.max_bytes = "4K";
  options.iters = 3;
  options.large_iters = 1;
  options.large_from = "2K";
  options.append = dir.file("bw.h5");
  const auto run = run_tool(options);
  EXPECT_EQ(run.status, 0);
  ASSERT_EQ(run.rows.size(), 3u);
  EXPECT_NE(run.comments[0].find("3 iterations (1 from 2048 bytes) after 5 warm-up"),
            std::string::npos)
      << run.comments[0];
  const auto runs = results::read_runs(options.append);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].iters, 3);
  EXPECT_EQ(runs[0].large_iters, 1);
  EXPECT_EQ(runs[0].large_from, 2048u);
}

TEST(BandwidthTool, CorruptedResultIsCountedAndFails) {
  tools::bench_bandwidth::BandwidthOptions options;
  options.ops = {"bcast"};
  options.min_bytes = "64";
  options.max_bytes = "128";
  ::setenv("MBKIT_BENCH_CORRUPT", "1", 1);
  const auto run = run_tool(options);
  ::unsetenv("MBKIT_BENCH_CORRUPT");
  EXPECT_EQ(run.status, 1);
  ASSERT_EQ(run.rows.size(), 2u);
  EXPECT_EQ(run.rows[0].back(), "1");
  EXPECT_EQ(run.comments.back(), "# wrong elements: 2");
}

TEST(BandwidthTool, BadOptionsAreUsageErrors) {
  using tools::bench_bandwidth::BandwidthOptions;
  const auto code = [](const std::function<void(BandwidthOptions&)>& change) {
    BandwidthOptions options;
    options.min_bytes = "1K";
    options.max_bytes = "2K";
    change(options);
    std::ostringstream out;
    return code_of([&] { tools::bench_bandwidth::run_bench_bandwidth(options, out); });
  };
  EXPECT_EQ(code([](BandwidthOptions& o) { o.ops = {"alltoall"}; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.ops = {"exchange"}; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.min_bytes = "4K"; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.iters = 0; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.large_iters = 2; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.large_from = "1K"; }), ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) {
              o.large_from = "1Q";
              o.large_iters = 2;
            }),
            ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) {
              o.ops = {"exchange"};
              o.dtype = "double";
            }),
            ExitCode::kUsage);
  EXPECT_EQ(code([](BandwidthOptions& o) { o.max_bytes = "16G"; }), ExitCode::kUsage);
}

bool begins_with(const std::string& text, const std::string& start) {
  return text.rfind(start, 0) == 0;
}

// --device and --transport are refused before a GPU is looked for (no CUDA is loaded here): a
// GPU with no such device, exit 2, is tests/e2e/test_bench_bandwidth.py's (it loads the plugin).
TEST(BandwidthTool, DeviceAndTransportRefusalsAreUsageErrors) {
  using tools::bench_bandwidth::BandwidthOptions;
  const auto message = [](const std::function<void(BandwidthOptions&)>& change) {
    BandwidthOptions options;
    options.min_bytes = "1K";
    options.max_bytes = "2K";
    change(options);
    std::ostringstream out;
    try {
      tools::bench_bandwidth::run_bench_bandwidth(options, out);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kUsage) << error.what();
      EXPECT_TRUE(out.str().empty()) << out.str();  // nothing measured or printed
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([](BandwidthOptions& o) { o.transport = "nccl"; }),
            "--transport nccl: NCCL moves GPU memory; give --device cuda (or cuda:N) too");
  EXPECT_EQ(message([](BandwidthOptions& o) { o.transport = "gloo"; }),
            "--transport: 'gloo' is not mpi or nccl");
  EXPECT_PRED2(begins_with, message([](BandwidthOptions& o) { o.device = "tpu"; }),
               std::string("--device: unknown device 'tpu'"));
  EXPECT_PRED2(begins_with, message([](BandwidthOptions& o) { o.device = "cuda:-1"; }),
               std::string("--device cuda:-1: the GPU index"));
  for (const char* op : {"gather", "reduce-bcast"}) {
    EXPECT_PRED2(begins_with, message([&](BandwidthOptions& o) {
                   o.device = "cuda";
                   o.ops = {cat("allreduce,", op)};
                 }),
                 std::string(cat("--op ", op, ": NCCL has no such collective")));
  }
  for (const char* transport : {"", "mpi", "nccl"}) {
    EXPECT_PRED2(begins_with, message([&](BandwidthOptions& o) {
                   o.device = "cuda:0";
                   o.transport = transport;
                   o.ops = {"exchange"};
                 }),
                 std::string("--op exchange: the trainers' exchange is timed on host"));
  }
}

// A CPU run never opens libmbkit-cuda (nor NCCL nor cuDNN through it): checked in a fresh run
// of this program, as no test before could have loaded it.
TEST(BandwidthToolDeathTest, ACpuRunMapsNoCudaLibrary) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        tools::bench_bandwidth::BandwidthOptions options;
        options.ops = {"allreduce,bcast"};
        options.min_bytes = "1K";
        options.max_bytes = "1K";
        options.iters = 1;
        std::ostringstream out;
        const int status = tools::bench_bandwidth::run_bench_bandwidth(options, out);
        const std::string mapped = test::mapped_files();
        const bool cuda = mapped.find("libmbkit-cuda") != std::string::npos ||
                          mapped.find("libnccl") != std::string::npos;
        std::exit(status == 0 && !cuda ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// On the CPU the transport is MPI whether named or not: the same table, no device lines.
TEST(BandwidthTool, CpuTransportMpiIsTheDefault) {
  tools::bench_bandwidth::BandwidthOptions options;
  options.min_bytes = "1K";
  options.max_bytes = "1K";
  options.iters = 2;
  options.warmup_iters = 1;
  options.transport = "mpi";
  const auto run = run_tool(options);
  EXPECT_EQ(run.status, 0);
  ASSERT_EQ(run.rows.size(), 1u);
  EXPECT_EQ(run.rows[0][0], "allreduce");
  for (const auto& line : run.comments) EXPECT_EQ(line.find("# device"), std::string::npos);
}

}  // namespace
}  // namespace mbkit::bench
