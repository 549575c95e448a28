// The synchronous ps round of a message-model file (comm_model.hpp's CommPsRoundRecord): written
// and read back, what it charges a ps step of as many ranks on the virtual clock (half the round
// each way) and what it leaves to the line (other world sizes, several servers, older files),
// and the refusal of damaged ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

using test::TempDir;

// Two ranks whose ping-pong line is 5 ms + 8 ns/B (the README's setting 2 at 1 Gbit/s prices
// an 814 kB message at 11.5 ms so) and whose ps round is 1 ms + 2.5e-8 s/B at three sizes
// (21.35 ms at 814 kB, against the line's two messages of 23 ms).
CommModelRecords ps_round_link() {
  CommModelRecords records;
  records.ranks = 2;
  records.hosts = {"h1", "h2"};
  records.cpu_models = {"cpu", "cpu"};
  records.created = "2026-12-07T00:00:00Z";
  CommPairRecord pair;
  for (const double x : {8.0, 4096.0, 65536.0, 1048576.0}) {
    pair.bytes.push_back(x);
    pair.seconds.push_back(5e-3 + 8e-9 * x);
  }
  records.pairs.push_back(pair);
  records.ps_round.ranks = 2;
  for (const double x : {8.0, 262144.0, 2097152.0}) {
    records.ps_round.bytes.push_back(x);
    records.ps_round.seconds.push_back(1e-3 + 2.5e-8 * x);
  }
  fit_pairs(records);
  return records;
}

double round_at(double bytes) {
  return 1e-3 + 2.5e-8 * bytes;
}

TEST(CommModelPsRound, ItsPointsAreWrittenReadAndPriceAPsStepOfItsRanks) {
  TempDir dir;
  const CommModelRecords records = ps_round_link();
  EXPECT_EQ(ps_round_problem(records.ps_round), "");
  EXPECT_NEAR(records.ps_round.fit.alpha, 1e-3, 1e-12);
  EXPECT_NEAR(records.ps_round.fit.beta, 2.5e-8, 1e-18);
  write_comm_model(dir.file("m.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("m.h5"));
  EXPECT_EQ(back.ps_round.ranks, 2);
  EXPECT_EQ(back.ps_round.bytes, records.ps_round.bytes);
  EXPECT_EQ(back.ps_round.seconds, records.ps_round.seconds);
  const CommModel model = *parse_comm_model(dir.file("m.h5"));
  ASSERT_EQ(model.ps_round_ranks, 2);
  const std::uint64_t bytes = 814000;
  // Between 256 KiB and 2 MiB: linear in bytes, on the line here; half of it each way.
  EXPECT_NEAR(model.ps_message(bytes, 1, 1, 1, 0), round_at(814000) / 2, 1e-15);
  EXPECT_NEAR(model.ps_message(bytes, 1, 1), round_at(814000) / 2, 1e-15);
  EXPECT_NEAR(model.ps_message(bytes, 1, 0), round_at(814000) / 2, 1e-15);  // no servers: one
  EXPECT_NEAR(model.message(bytes), 5e-3 + 8e-9 * 814000, 1e-15);  // a message keeps the line
  // A step of one worker: its gradient arrives half a round after its compute, the parameters
  // are back the other half after the update.
  const SyncStepTime step = sync_step_time({{0.0, 1.4e-3}}, true, model, bytes, 1e-4, 1);
  EXPECT_NEAR(step.gather, 1.4e-3 + round_at(814000) / 2, 1e-15);
  EXPECT_NEAR(step.end, 1.4e-3 + round_at(814000) + 1e-4, 1e-15);
  EXPECT_NEAR(step.sends[0], round_at(814000), 1e-15);
  EXPECT_NEAR(step.receives[0], round_at(814000) / 2, 1e-15);
  EXPECT_NEAR(step.wait[0], 1e-4, 1e-15);  // the update
  EXPECT_NE(model.spec().find(" ps_round 2="), std::string::npos) << model.spec();
  EXPECT_NE(model.spec().find(" points 8:"), std::string::npos) << model.spec();
  EXPECT_NE(model.describe().find("; ps round of 2 ranks interpolating 3 measured sizes"),
            std::string::npos)
      << model.describe();
}

TEST(CommModelPsRound, OtherStepsKeepTheLine) {
  const CommModel model = comm_model_of(ps_round_link(), "m.h5");
  const std::uint64_t bytes = 814000;
  const double line = 5e-3 + 8e-9 * 814000;
  // Two workers (a round measured with one), two servers, or the allreduce: not what it timed.
  EXPECT_NEAR(model.ps_message(bytes, 2, 1, 1, 0), line, 1e-15);
  EXPECT_NEAR(model.ps_message(bytes, 1, 2, 2, 1), line, 1e-15);
  const SyncStepTime two = sync_step_time({{0.0, 1e-3}, {0.0, 2e-3}}, true, model, bytes, 0, 1);
  EXPECT_NEAR(two.end, 2e-3 + 2 * line, 1e-15);
  const SyncStepTime servers = sync_step_time({{0.0, 1e-3}}, true, model, bytes, 0, 2);
  EXPECT_NEAR(servers.end, 1e-3 + 2 * line, 1e-15);
  const SyncStepTime allreduce = sync_step_time({{0.0, 1e-3}}, false, model, bytes, 0, 0);
  EXPECT_NEAR(allreduce.end, 1e-3 + model.allreduce(bytes, 1), 1e-15);
}

TEST(CommModelPsRound, OlderFilesPriceByTheLineAndDamagedOnesAreRefused) {
  TempDir dir;
  CommModelRecords records = ps_round_link();
  records.ps_round = {};  // as written before --fit timed the ps round
  write_comm_model(dir.file("old.h5"), records);
  {
    const io::File file = io::File::open(dir.file("old.h5"));
    EXPECT_FALSE(file.has("ps_round"));
  }
  const CommModel old = *parse_comm_model(dir.file("old.h5"));
  EXPECT_EQ(old.ps_round_ranks, 0);
  EXPECT_EQ(old.ps_message(814000, 1, 1, 1, 0), old.message(814000));
  EXPECT_EQ(old.spec().find("ps_round"), std::string::npos);
  // An unusable round is left out of the file (the rest is written).
  records = ps_round_link();
  records.ps_round.seconds[1] = -1e-3;
  EXPECT_NE(ps_round_problem(records.ps_round), "");
  write_comm_model(dir.file("bad.h5"), records);
  EXPECT_EQ(read_comm_model(dir.file("bad.h5")).ps_round.ranks, 0);
  records = ps_round_link();
  records.ps_round.bytes.clear();
  records.ps_round.seconds.clear();
  EXPECT_EQ(ps_round_problem(records.ps_round), "no measured points");
  // Damaged ones are refused naming the file and the group.
  write_comm_model(dir.file("m.h5"), ps_round_link());
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("ps_round").set_attribute("ranks", 3);
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/ps_round: a ps round of 3 ranks in a measurement of 2");
  write_comm_model(dir.file("p.h5"), ps_round_link());
  {
    io::File file = io::File::open(dir.file("p.h5"), io::File::Mode::kReadWrite);
    file.open_group("ps_round").set_attribute("seconds", std::vector<double>{1e-3, 0, 1e-3});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("p.h5")), ExitCode::kBadData, "p.h5:/ps_round");
}

}  // namespace
}  // namespace mbkit::train
