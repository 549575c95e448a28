// The synchronous ps round of a message-model file (comm_model.hpp's CommPsRoundRecord): written
// and read back, what it charges a ps step of as many ranks on the virtual clock (half the round
// each way) and what it leaves to the line (other world sizes, several servers, older files),
// and the refusal of damaged ones; the busy passes' slack and tick (a step hides compute up to
// the slack, then grows a whole tick at a time) at the measured sizes only.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
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

// The round of ps_round_link with busy passes: at 262144 bytes (a 7.55 ms round) the step
// hides 2.75 ms of compute and then grows in 4 ms ticks; at 2 MiB it grows with the compute.
CommModelRecords ticked_link() {
  CommModelRecords records = ps_round_link();
  records.ps_round.slack = {0.0, 2.75e-3, 0.0};
  records.ps_round.tick = {0.0, 4e-3, 0.0};
  return records;
}

TEST(CommModelPsRound, BusyPassesPriceAStepAsTheRoundThenWholeTicks) {
  TempDir dir;
  const CommModelRecords records = ticked_link();
  EXPECT_EQ(ps_round_problem(records.ps_round), "");
  write_comm_model(dir.file("t.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("t.h5"));
  EXPECT_EQ(back.ps_round.slack, records.ps_round.slack);
  EXPECT_EQ(back.ps_round.tick, records.ps_round.tick);
  const CommModel model = *parse_comm_model(dir.file("t.h5"));
  EXPECT_TRUE(model.ps_round_ticks());
  const double round = round_at(262144);
  const std::uint64_t ticked = 262144;
  // Compute (plus the update) up to the slack hides in the round; past it, whole ticks.
  for (const auto& [compute, end] :
       {std::pair(0.0, round), std::pair(1.3e-3, round), std::pair(2.6e-3, round),
        std::pair(2.7e-3, round + 4e-3), std::pair(6.6e-3, round + 4e-3),
        std::pair(6.7e-3, round + 8e-3)}) {
    const SyncStepTime step = sync_step_time({{0.0, compute}}, true, model, ticked, 1e-4, 1);
    EXPECT_NEAR(step.end, end, 1e-12) << compute;
    // The send overlaps the compute hidden, never past the step's end; the rest is waiting.
    EXPECT_NEAR(step.sends[0], std::min(round, end - compute), 1e-12) << compute;
    EXPECT_NEAR(step.send, step.sends[0], 1e-15);
    EXPECT_NEAR(step.wait[0], end - compute - step.sends[0], 1e-12) << compute;
    EXPECT_NEAR(step.receives[0], round / 2, 1e-15);
  }
  // The slowest worker's compute decides; delays count as compute.
  EXPECT_NEAR(sync_step_time({{0.0, 1e-3}, {0.0, 2e-3}}, true, model, ticked, 0, 1).end,
              2e-3 + 2 * model.message(ticked), 1e-12);  // two workers: not the measured round
  EXPECT_NEAR(sync_step_time({{2e-3, 1e-3}}, true, model, ticked, 0, 1).end, round + 4e-3, 1e-12);
  // Grown with the compute at 2 MiB (slack and tick 0): compute + round, as without passes.
  EXPECT_NEAR(sync_step_time({{0.0, 1.3e-3}}, true, model, 2097152, 1e-4, 1).end,
              1.4e-3 + round_at(2097152), 1e-12);
  // Between measured sizes the slack is unknown: compute + the interpolated round.
  EXPECT_EQ(model.ps_round_at(814000, 1, 1), nullptr);
  EXPECT_NEAR(sync_step_time({{0.0, 1.3e-3}}, true, model, 814000, 1e-4, 1).end,
              1.4e-3 + round_at(814000), 1e-12);
  // Only a ps step of the round's ranks and one server.
  EXPECT_NE(model.ps_round_at(ticked, 1, 1), nullptr);
  EXPECT_EQ(model.ps_round_at(ticked, 1, 2), nullptr);
  EXPECT_EQ(model.ps_round_at(ticked, 2, 1), nullptr);
  EXPECT_NE(model.spec().find(" busy 8:0:0 262144:"), std::string::npos) << model.spec();
  EXPECT_NE(model.describe().find("some sizes in ticks"), std::string::npos) << model.describe();
  // A round without passes (as written before them) prices compute + round everywhere.
  const CommModel plain = comm_model_of(ps_round_link(), "m.h5");
  EXPECT_FALSE(plain.ps_round_ticks());
  EXPECT_EQ(plain.ps_round_at(ticked, 1, 1), nullptr);
  EXPECT_NEAR(sync_step_time({{0.0, 1.3e-3}}, true, plain, ticked, 1e-4, 1).end, 1.4e-3 + round,
              1e-12);
  EXPECT_EQ(plain.spec().find(" busy"), std::string::npos);
}

TEST(CommModelPsRound, AnAllreduceWithBusyPassesIsPricedAsTheRound) {
  TempDir dir;
  CommModelRecords records = ps_round_link();
  records.allreduce.ranks = 2;
  records.allreduce.bytes = {8.0, 262144.0, 2097152.0};
  records.allreduce.seconds = {4e-3, 0.02, 0.04};
  records.allreduce.slack = {0.0, 2.75e-3, 0.0};
  records.allreduce.tick = {0.0, 4e-3, 0.0};
  fit_pairs(records);
  EXPECT_EQ(allreduce_problem(records.allreduce), "");
  write_comm_model(dir.file("a.h5"), records);
  const CommModelRecords back = read_comm_model(dir.file("a.h5"));
  EXPECT_EQ(back.allreduce.slack, records.allreduce.slack);
  EXPECT_EQ(back.allreduce.tick, records.allreduce.tick);
  const CommModel model = *parse_comm_model(dir.file("a.h5"));
  EXPECT_TRUE(model.allreduce_ticks());
  // Two workers (the file's ranks); the update follows the sum on every rank.
  for (const auto& [compute, gather] : {std::pair(1.3e-3, 0.02), std::pair(2.7e-3, 0.02),
                                        std::pair(2.8e-3, 0.024), std::pair(7.0e-3, 0.028)}) {
    const SyncStepTime step =
        sync_step_time({{0.0, 1e-3}, {0.0, compute}}, false, model, 262144, 1e-4, 0);
    EXPECT_NEAR(step.gather, gather, 1e-12) << compute;
    EXPECT_NEAR(step.end, gather + 1e-4, 1e-12) << compute;
    EXPECT_NEAR(step.sends[0], std::min(0.02, gather - 1e-3), 1e-12) << compute;
    EXPECT_NEAR(step.sends[1], std::min(0.02, gather - compute), 1e-12) << compute;
    EXPECT_NEAR(step.send, step.sends[1], 1e-15);
    EXPECT_NEAR(step.wait[1], step.end - compute - step.sends[1], 1e-12) << compute;
  }
  // Unmeasured sizes, other world sizes: compute + the allreduce, as before.
  EXPECT_EQ(model.allreduce_at(814000, 2), nullptr);
  EXPECT_EQ(model.allreduce_at(262144, 3), nullptr);
  EXPECT_NEAR(sync_step_time({{0.0, 1e-3}, {0.0, 1.3e-3}}, false, model, 2097152, 0, 0).end,
              1.3e-3 + 0.04, 1e-12);
  EXPECT_NE(model.spec().find(" busy 8:0:0 262144:"), std::string::npos) << model.spec();
  records.allreduce.tick[1] = -1;
  EXPECT_EQ(allreduce_problem(records.allreduce), "a tick of -1 s");
}

TEST(CommModelPsRound, DamagedBusyPassesAreRefused) {
  CommModelRecords records = ticked_link();
  records.ps_round.slack.pop_back();
  EXPECT_EQ(ps_round_problem(records.ps_round), "2 slacks and 3 ticks for 3 sizes");
  records = ticked_link();
  records.ps_round.slack[1] = 1.0;  // longer than the round
  EXPECT_NE(ps_round_problem(records.ps_round).find("a slack of 1 s for a round of"),
            std::string::npos);
  records = ticked_link();
  records.ps_round.tick[2] = -1e-3;
  EXPECT_EQ(ps_round_problem(records.ps_round), "a tick of -0.001 s");
  TempDir dir;
  write_comm_model(dir.file("m.h5"), ticked_link());
  {
    io::File file = io::File::open(dir.file("m.h5"), io::File::Mode::kReadWrite);
    file.open_group("ps_round").set_attribute("slack_seconds", std::vector<double>{0, -1, 0});
    file.close();
  }
  EXPECT_MBKIT_ERROR(read_comm_model(dir.file("m.h5")), ExitCode::kBadData,
                     "m.h5:/ps_round (the ps round): a slack of -1 s");
}

}  // namespace
}  // namespace mbkit::train
