// mb-bench-bandwidth --fit's lines after the table: each pair's fit, that of all pairs, and
// whether the pairs differ (the ping-pong itself runs under mpirun: e2e.test_comm_model).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "mbkit/bench/bandwidth_fit.hpp"

namespace mbkit::bench {
namespace {

train::CommModelRecords records_with_latencies(double second_alpha) {
  train::CommModelRecords records;
  records.ranks = 3;
  for (const auto& [a, b] : {std::pair(0, 1), std::pair(0, 2)}) {
    train::CommPairRecord pair;
    pair.rank_a = a;
    pair.rank_b = b;
    const double alpha = b == 2 ? second_alpha : 5e-6;
    for (const double x : {8.0, 4096.0, 1048576.0}) {
      pair.bytes.push_back(x);
      pair.seconds.push_back(alpha + 1e-9 * x);
    }
    records.pairs.push_back(pair);
  }
  train::fit_pairs(records);
  return records;
}

TEST(BandwidthFit, PrintsEachPairAllPairsAndWhetherTheyDiffer) {
  std::ostringstream out;
  write_comm_fits(out, records_with_latencies(2e-3));
  const std::string text = out.str();
  EXPECT_NE(text.find("# ranks 0-1: alpha = 5e-06 s"), std::string::npos) << text;
  EXPECT_NE(text.find("# ranks 0-2: alpha = 0.002 s"), std::string::npos) << text;
  EXPECT_NE(text.find("beta = 1e-09 s/B (+- "), std::string::npos) << text;
  EXPECT_NE(text.find("1 GB/s), r^2 = 1.000000 (3 points)"), std::string::npos) << text;
  EXPECT_NE(text.find("# all pairs: alpha = "), std::string::npos) << text;
  EXPECT_NE(text.find("(6 points)"), std::string::npos) << text;
  EXPECT_NE(text.find("# the pairs differ: a model per pair"), std::string::npos) << text;
  // A message is priced by the line, the allreduce by its medians.
  EXPECT_NE(text.find("the trainers price a message of n bytes by the line, and the "
                      "allreduce by interpolating its medians (time_us) linearly in bytes"),
            std::string::npos)
      << text;

  std::ostringstream same;
  write_comm_fits(same, records_with_latencies(5e-6));
  EXPECT_NE(same.str().find("# the pairs agree: one model for all"), std::string::npos)
      << same.str();
}

}  // namespace
}  // namespace mbkit::bench
