// Delay traces (--induce trace:FILE): the CSV layout in any row order, wrapping over steps and
// workers, the scale, the HDF5 layout's round trip and digest, every refusal with the file and
// line it names, the PAI importer's conversion, and the replay's continuation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/io/hdf5.hpp"
#include "test_helpers.hpp"

namespace mbkit::emulation {
namespace {

// 3 workers x 2 steps, rows shuffled: cell (worker w, step s) holds 10 s + w.
constexpr const char* kShuffled =
    "worker,step,seconds\n"
    "2,1,12\n"
    "0,0,0\n"
    "1,1,11\n"
    "2,0,2\n"
    "0,1,10\n"
    "1,0,1\n";

TEST(DelayTrace, CsvRowsInAnyOrderFillTheTable) {
  const DelayTrace trace = parse_delay_trace_csv(kShuffled, "t.csv");
  EXPECT_EQ(trace.workers, 3);
  EXPECT_EQ(trace.steps, 2);
  EXPECT_EQ(trace.seconds, (std::vector<double>{0, 1, 2, 10, 11, 12}));
  for (int w = 0; w < 3; ++w) {
    for (int s = 0; s < 2; ++s) EXPECT_EQ(trace.at(s, w), 10.0 * s + w) << w << " " << s;
  }
  // Windows line ends and blanks around fields read the same.
  const DelayTrace crlf =
      parse_delay_trace_csv("worker,step,seconds\r\n0, 0 ,0.5\r\n1,0,0.25\r\n", "c.csv");
  EXPECT_EQ(crlf.seconds, (std::vector<double>{0.5, 0.25}));
}

TEST(DelayTrace, ReplayWrapsOverStepsAndWorkersAndScales) {
  DelayTrace trace = parse_delay_trace_csv(kShuffled, "t.csv");
  EXPECT_EQ(trace.at(2, 0), trace.at(0, 0));  // step 2 of 2: step 0 again
  EXPECT_EQ(trace.at(5, 1), 11.0);            // step 5 mod 2 = 1
  EXPECT_EQ(trace.at(0, 4), trace.at(0, 1));  // worker 4 of 3: worker 1
  EXPECT_EQ(trace.at(7, 5), 12.0);            // step 1, worker 2
  EXPECT_DOUBLE_EQ(trace.mean(), 6.0);
  trace.scale = 0.5;
  EXPECT_EQ(trace.at(3, 2), 6.0);
  EXPECT_DOUBLE_EQ(trace.mean(), 3.0);
}

TEST(DelayTrace, AReplayContinuesStepAfterStep) {
  const auto trace = std::make_shared<const DelayTrace>(parse_delay_trace_csv(kShuffled, "t"));
  TraceReplay straight(trace, 2);
  std::vector<double> delays;
  for (int i = 0; i < 5; ++i) delays.push_back(straight.next());
  EXPECT_EQ(delays, (std::vector<double>{2, 12, 2, 12, 2}));
  // Skipping rounds (a resumed run) is calling next() that many times: the same sequence.
  TraceReplay resumed(trace, 2);
  for (int i = 0; i < 3; ++i) resumed.next();
  EXPECT_EQ(resumed.next(), delays[3]);
}

TEST(DelayTrace, HdfRoundTripKeepsValuesAndDigest) {
  const test::TempDir dir;
  DelayTrace trace = parse_delay_trace_csv(kShuffled, "t.csv");
  trace.source = "a test";
  write_delay_trace(dir.file("t.h5"), trace);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.h5"});  // no temporary left
  const DelayTrace back = read_delay_trace(dir.file("t.h5"));
  EXPECT_EQ(back.seconds, trace.seconds);
  EXPECT_EQ(back.workers, 3);
  EXPECT_EQ(back.steps, 2);
  EXPECT_EQ(back.source, "a test");
  EXPECT_EQ(back.digest(), trace.digest());
  // The digest is of the values: the same rows in another order agree, another value not.
  test::write_text(dir.file("same.csv"),
                   "worker,step,seconds\n0,0,0\n1,0,1\n2,0,2\n0,1,10\n1,1,11\n2,1,12\n");
  EXPECT_EQ(read_delay_trace(dir.file("same.csv")).digest(), trace.digest());
  test::write_text(dir.file("other.csv"),
                   "worker,step,seconds\n0,0,0\n1,0,1\n2,0,2\n0,1,10\n1,1,11\n2,1,12.5\n");
  EXPECT_NE(read_delay_trace(dir.file("other.csv")).digest(), trace.digest());
  // The same values as 2 workers x 3 steps are another trace.
  test::write_text(dir.file("shape.csv"),
                   "worker,step,seconds\n0,0,0\n1,0,1\n0,1,2\n1,1,10\n0,2,11\n1,2,12\n");
  EXPECT_NE(read_delay_trace(dir.file("shape.csv")).digest(), trace.digest());
}

TEST(DelayTrace, BadCsvNamesTheFileAndLine) {
  const std::string header = "worker,step,seconds\n";
  const struct {
    std::string text;
    std::string named;
  } cases[] = {
      {"", "f.csv: empty"},
      {"step,worker,seconds\n0,0,1\n", "f.csv:1: the header is 'step,worker,seconds'"},
      {header, "f.csv: no rows after the header"},
      {header + "0,0,1\n\n", "f.csv:3: '' has 1 field, not 3"},
      {header + "0,0,1,2\n", "f.csv:2: '0,0,1,2' has 4 fields"},
      {header + "x,0,1\n", "f.csv:2: worker 'x' is not a worker index"},
      {header + "0,-1,1\n", "f.csv:2: step '-1' is not a step index"},
      {header + "0,0,1\n0,1,-2\n", "f.csv:3: seconds -2 is negative"},
      {header + "0,0,NaN\n", "f.csv:2: seconds is not a number (NaN)"},
      {header + "0,0,-inf\n", "f.csv:2: seconds is infinite"},
      {header + "0,0,1s\n", "f.csv:2: seconds '1s' is not a number"},
      {header + "0,0,1\n1,0,1\n0,1,1\n1,1,1\n1,0,3\n",
       "f.csv:6: repeats worker 1 step 0 of line 3"},
      {header + "0,0,1\n1,0,1\n1,1,1\n", "f.csv: no row for worker 0 step 1"},
      {header + "0,0,1\n0,2,1\n", "f.csv: no row for worker 0 step 1"},
      {"\x89HDF\r\n\x1a\n", "f.csv:1: the header is '?HDF'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_MBKIT_ERROR(parse_delay_trace_csv(c.text, "f.csv"), ExitCode::kBadData, c.named);
  }
}

TEST(DelayTrace, BadHdfNamesTheFileAndCell) {
  const test::TempDir dir;
  const auto write = [&](const std::string& name, const std::vector<double>& values,
                         std::vector<hsize_t> dims, const char* format) {
    io::File file = io::File::create(dir.file(name));
    file.set_attribute("format", format);
    file.set_attribute("format_version", 1);
    file.create_group("trace")
        .create_dataset<double>("seconds", dims)
        .write(std::span<const double>(values));
    file.close();
  };
  write("inf.h5", {0, 1, std::numeric_limits<double>::infinity(), 0}, {2, 2}, "mbkit-delay-trace");
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("inf.h5")), ExitCode::kBadData,
                     "inf.h5: /trace/seconds[1][0] (step 1, worker 0): is infinite");
  write("neg.h5", {0, -1}, {1, 2}, "mbkit-delay-trace");
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("neg.h5")), ExitCode::kBadData,
                     "(step 0, worker 1): -1 is negative");
  write("flat.h5", {0, 1}, {2}, "mbkit-delay-trace");
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("flat.h5")), ExitCode::kBadData,
                     "is not a [steps][workers] table");
  write("log.h5", {0, 1}, {1, 2}, "mbkit-metric-log");
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("log.h5")), ExitCode::kBadData,
                     "log.h5: not a delay trace");
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("gone.csv")), ExitCode::kBadData, "gone.csv");
  {  // 2^28 cells declared (none stored): refused before anything is read.
    io::File file = io::File::create(dir.file("huge.h5"));
    file.set_attribute("format", "mbkit-delay-trace");
    file.set_attribute("format_version", 1);
    io::StorageOptions chunked;
    chunked.chunk = {1024, 256};
    file.create_group("trace").create_dataset<double>("seconds", {hsize_t{1} << 20, 256}, chunked);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_delay_trace(dir.file("huge.h5")), ExitCode::kBadData,
                     "more than a trace may");
}

TEST(DelayTrace, TracePathIsTheTextAfterTrace) {
  EXPECT_EQ(trace_path_of("trace:a/b.csv"), "a/b.csv");
  EXPECT_EQ(trace_path_of("trace:"), "");
  EXPECT_EQ(trace_path_of("niagara"), "");
  EXPECT_EQ(trace_path_of("0:1:1"), "");
}

// PAI's layout: pandas' unnamed index column first; iterations sampled every 10 from 1.
constexpr const char* kPai =
    ",worker,gpu,time,batch_time_norm\n"
    "0,0,25,1,476\n"
    "1,1,25,1,509\n"
    "2,2,25,1,468\n"
    "3,0,25,11,500\n"
    "4,1,25,11,1000\n"
    "5,2,25,11,433\n";

TEST(PaiTrace, ExcessOverTheFastestWorkerInThousandths) {
  const DelayTrace trace = parse_pai_trace(kPai, "job.csv", PaiDelays::kExcess);
  EXPECT_EQ(trace.workers, 3);
  EXPECT_EQ(trace.steps, 2);
  const std::vector<double> expected = {(476.0 - 468) / 1000, (509.0 - 468) / 1000,  0,
                                        (500.0 - 433) / 1000, (1000.0 - 433) / 1000, 0};
  EXPECT_EQ(trace.seconds, expected);
  EXPECT_NE(trace.source.find("iterations 1..11"), std::string::npos) << trace.source;
  const DelayTrace whole = parse_pai_trace(kPai, "job.csv", PaiDelays::kWhole);
  EXPECT_EQ(whole.seconds, (std::vector<double>{0.476, 0.509, 0.468, 0.5, 1.0, 0.433}));
}

TEST(PaiTrace, WorkerAndIterationNumbersBecomeIndexesInOrder) {
  // Workers 3 and 7, iterations 21 and 1, columns in another order, rows shuffled.
  const DelayTrace trace = parse_pai_trace(
      "batch_time_norm,time,worker\n5,21,7\n1,1,3\n2,1,7\n4,21,3\n", "j.csv", PaiDelays::kWhole);
  EXPECT_EQ(trace.seconds, (std::vector<double>{0.001, 0.002, 0.004, 0.005}));
}

TEST(PaiTrace, BadFilesNameTheLineAndTheFilesNumbers) {
  const std::string header = ",worker,gpu,time,batch_time_norm\n";
  EXPECT_MBKIT_ERROR(parse_pai_trace(",worker,gpu,iteration,batch_time_norm\n0,0,1,1,1\n", "j.csv",
                                     PaiDelays::kExcess),
                     ExitCode::kBadData, "j.csv:1: the header");
  EXPECT_MBKIT_ERROR(parse_pai_trace(header + "0,0,25,1,4\n1,1,25,1,5\n2,0,25,11,4\n", "j.csv",
                                     PaiDelays::kExcess),
                     ExitCode::kBadData, "j.csv: no row for worker 1 time 11");
  EXPECT_MBKIT_ERROR(
      parse_pai_trace(header + "0,0,25,1,4\n1,0,25,1,5\n", "j.csv", PaiDelays::kExcess),
      ExitCode::kBadData, "j.csv:3: repeats worker 0 time 1 of line 2");
  EXPECT_MBKIT_ERROR(parse_pai_trace(header + "0,0,25,1,nan\n", "j.csv", PaiDelays::kExcess),
                     ExitCode::kBadData, "j.csv:2: batch_time_norm is not a number (NaN)");
  EXPECT_MBKIT_ERROR(parse_pai_trace(header + "0,0,25,x,4\n", "j.csv", PaiDelays::kExcess),
                     ExitCode::kBadData, "j.csv:2: time 'x' is not an iteration number");
  EXPECT_MBKIT_ERROR(parse_pai_trace(header, "j.csv", PaiDelays::kExcess), ExitCode::kBadData,
                     "j.csv: no rows after the header");
}

}  // namespace
}  // namespace mbkit::emulation
