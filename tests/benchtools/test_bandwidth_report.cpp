// mb-report on mb-bench-bandwidth --append files: the table, CSV and JSON, and the refusals
// (mixed with metric logs, --target).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/report/bandwidth_report.hpp"
#include "mbkit/tools/mb_report.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::report {
namespace {

std::string results_file(const test::TempDir& dir) {
  const auto path = dir.file("bw.h5");
  for (const int ranks : {3, 2}) {
    results::Run run;
    run.ranks = ranks;
    run.op = "reduce-bcast";
    run.dtype = "float";
    run.iters = 5;
    run.hosts = "h";
    run.created = "now";
    run.rows.push_back({"reduce-bcast", 1024, 256, "float", 10.0 * ranks, 9, 11, 0.1, 0.2, 0});
    results::append_run(path, run);
  }
  return path;
}

TEST(BandwidthReport, TableRowPerRunAndSizeByRanks) {
  test::TempDir dir;
  tools::report::ReportOptions options;
  options.logs = {results_file(dir)};
  std::ostringstream out;
  EXPECT_EQ(tools::report::run_report(options, out), 0);
  const auto lines = split(out.str(), '\n');
  ASSERT_EQ(lines.size(), 5u);  // two comments, two rows, the final newline
  EXPECT_EQ(lines[1], std::string("# ranks op ") + std::string(results::column_header()).substr(2));
  std::istringstream first(lines[2]);
  std::string ranks, op, mode, size, count, type, time;
  first >> ranks >> op >> mode >> size >> count >> type >> time;
  EXPECT_EQ(ranks, "2");
  EXPECT_EQ(op, "reduce-bcast");
  EXPECT_EQ(size, "1024");
  EXPECT_EQ(time, "20.00");
}

TEST(BandwidthReport, CsvAndJson) {
  test::TempDir dir;
  tools::report::ReportOptions options;
  options.logs = {results_file(dir)};
  options.csv = true;
  std::ostringstream csv;
  tools::report::run_report(options, csv);
  EXPECT_NE(csv.str().find("3,reduce-bcast,reduce-bcast,1024,256,float,30,9,11,0.1,0.2,0"),
            std::string::npos)
      << csv.str();
  options.csv = false;
  options.json = true;
  std::ostringstream json;
  tools::report::run_report(options, json);
  EXPECT_NE(json.str().find("\"busbw_GBps\": 0.2"), std::string::npos) << json.str();
}

TEST(BandwidthReport, RefusesMixingAndTargets) {
  test::TempDir dir;
  const auto path = results_file(dir);
  tools::report::ReportOptions options;
  options.logs = {path, dir.file("log.h5")};
  std::ostringstream out;
  EXPECT_THROW(tools::report::run_report(options, out), Error);
  options.logs = {path};
  options.has_target = true;
  options.target = 0.5;
  EXPECT_THROW(tools::report::run_report(options, out), Error);
  EXPECT_FALSE(is_bandwidth_file(dir.file("missing.h5")));
}

}  // namespace
}  // namespace mbkit::report
