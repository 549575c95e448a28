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
  EXPECT_NE(text.find("the trainers price a message of n bytes by the line, a streamed message "
                      "by interpolating the stream's medians, --async by the async cycle's, a "
                      "synchronous ps step of as many ranks by the ps round's, and the allreduce "
                      "by interpolating its medians (time_us) linearly in bytes"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("# streamed messages"), std::string::npos) << text;
  EXPECT_EQ(text.find("# ps round"), std::string::npos) << text;

  // Streamed messages: their fit, and the largest size's measured, fitted and line times.
  train::CommModelRecords streamed = records_with_latencies(5e-6);
  streamed.stream.window = 64;
  streamed.stream.bytes = {8.0, 4096.0, 1048576.0};
  streamed.stream.seconds = {2e-6 + 8e-10, 2e-6 + 4096e-10, 2e-6 + 1048576e-10};
  train::fit_pairs(streamed);
  std::ostringstream stream;
  write_comm_fits(stream, streamed);
  EXPECT_NE(stream.str().find("# streamed messages (windows of up to 64), all pairs: alpha = "
                              "2e-06 s (+- "),
            std::string::npos)
      << stream.str();
  EXPECT_NE(stream.str().find("beta = 1e-10 s/B"), std::string::npos) << stream.str();
  EXPECT_NE(stream.str().find("# streamed message of 1048576 bytes: measured 0.000106858 s, "
                              "fitted 0.000106858 s, the line 0.00105358 s"),
            std::string::npos)
      << stream.str();

  // The ps round: its fit, and the largest size's round beside the line's two messages.
  train::CommModelRecords round = records_with_latencies(5e-6);
  round.ps_round.ranks = 3;
  round.ps_round.bytes = {8.0, 4096.0, 1048576.0};
  round.ps_round.seconds = {1e-3, 1e-3 + 4096e-9, 1e-3 + 1048576e-9};
  train::fit_pairs(round);
  std::ostringstream rounds;
  write_comm_fits(rounds, round);
  const std::string text_of_round = rounds.str();
  const auto round_line = text_of_round.find("# ps round of 3 ranks: alpha = ");
  ASSERT_NE(round_line, std::string::npos) << text_of_round;
  EXPECT_NE(text_of_round.substr(round_line, text_of_round.find('\n', round_line) - round_line)
                .find("beta = 1e-09 s/B (+- "),
            std::string::npos)
      << text_of_round;
  EXPECT_NE(rounds.str().find("# ps round of 1048576 bytes: measured 0.00204858 s, two messages "
                              "of the line 0.00210715 s"),
            std::string::npos)
      << rounds.str();

  std::ostringstream same;
  write_comm_fits(same, records_with_latencies(5e-6));
  EXPECT_NE(same.str().find("# the pairs agree: one model for all"), std::string::npos)
      << same.str();
}

}  // namespace
}  // namespace mbkit::bench
