// AMB-DG (mb-train-amb --delayed-gradients, delayed_gradients.hpp): the parameter version each
// round computes at, and the virtual clock's update times, worked out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "mbkit/train/delayed_gradients.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::train {
namespace {

std::vector<float> version_values(std::int64_t version) {
  return {static_cast<float>(version), static_cast<float>(10 * version)};
}

WorkerVersions::Values worker_values(std::int64_t version) {
  return {static_cast<float>(version), static_cast<float>(10 * version)};
}

TEST(AmbDg, EachRoundComputesAtTheVersionTauUpdatesOld) {
  ParameterVersions versions(2);
  std::vector<std::int64_t> used;
  for (std::int64_t step = 0; step < 6; ++step) {
    versions.keep(step, version_values(step));
    used.push_back(versions.version_for(step));
    const auto parameters = versions.parameters_of(used.back());
    EXPECT_EQ(std::vector<float>(parameters.begin(), parameters.end()),
              version_values(used.back()));
  }
  // Version 0 until round 2, then t - 2; the newest is the latest update's.
  EXPECT_EQ(used, (std::vector<std::int64_t>{0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(versions.latest()[0], 5.0f);
  EXPECT_EQ(versions.versions().size(), 3u);  // versions 3, 4, 5
}

TEST(AmbDg, AWallClockWorkerStartsRoundTOnceVersionTMinusTauHasCome) {
  // TAU 2, version 0 held from the start: rounds 0 to 2 need nothing more; round 3 needs
  // version 1, round 5 version 3, whatever newer versions came meanwhile.
  WorkerVersions held(2);
  held.add(0, worker_values(0));
  std::vector<std::int64_t> used;
  for (std::int64_t round = 0; round < 3; ++round) {
    ASSERT_TRUE(held.ready(round));
    used.push_back(static_cast<std::int64_t>(held.take(round)[0]));
  }
  EXPECT_FALSE(held.ready(3));  // version 1 has not come: the worker waits
  held.add(1, worker_values(1));
  ASSERT_TRUE(held.ready(3));
  used.push_back(static_cast<std::int64_t>(held.take(3)[0]));
  held.add(2, worker_values(2));
  held.add(3, worker_values(3));
  held.add(4, worker_values(4));
  used.push_back(static_cast<std::int64_t>(held.take(4)[0]));
  used.push_back(static_cast<std::int64_t>(held.take(5)[0]));
  EXPECT_EQ(used, (std::vector<std::int64_t>{0, 0, 0, 1, 2, 3}));
  // The older versions are forgotten; the newest is kept (its state is the round's).
  EXPECT_EQ(held.held(), 2u);
  EXPECT_EQ(held.newest(), 4);
  EXPECT_EQ(held.newest_values()[1], 40.0f);
  EXPECT_FALSE(held.ready(7));  // version 5
  // The versions come in order: one skipped or repeated is the exchange's bug.
  EXPECT_ANY_THROW(held.add(6, worker_values(6)));
  EXPECT_ANY_THROW(held.add(4, worker_values(4)));
}

TEST(AmbDg, AResumedWallClockWorkerComputesAtTheCheckpointsVersions) {
  // Resumed at step 5 with versions 3 and 4 from the checkpoint and 5 now: rounds 5 and 6 at
  // versions 3 and 4, as the straight run's (ParameterVersions::version_for).
  WorkerVersions held(2);
  for (std::int64_t version = 3; version <= 5; ++version) held.add(version, worker_values(version));
  EXPECT_EQ(held.version_for(5), 3);
  EXPECT_EQ(held.version_for(6), 4);
  EXPECT_EQ(held.take(5)[0], 3.0f);
  EXPECT_EQ(held.take(7)[0], 5.0f);
  EXPECT_FALSE(held.ready(8));
  // From a checkpoint without versions: the resumed parameters until round 5 + TAU.
  WorkerVersions fresh(2);
  fresh.add(5, worker_values(5));
  EXPECT_EQ(fresh.version_for(5), 5);
  EXPECT_EQ(fresh.version_for(7), 5);
  EXPECT_EQ(fresh.version_for(8), 6);
  EXPECT_FALSE(fresh.ready(8));
}

TEST(AmbDg, ACheckpointCarriesTheVersionsStillReferenced) {
  ParameterVersions straight(2);
  for (std::int64_t step = 0; step < 5; ++step) straight.keep(step, version_values(step));
  // At step 5 (versions up to 4 kept) rounds 5 and 6 still compute at versions 3 and 4.
  const auto saved = straight.saved(5);
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].name, "version_3");
  EXPECT_EQ(saved[1].name, "version_4");
  ParameterVersions resumed(2);
  resumed.restore(saved, 5, 2, "c.h5");
  resumed.keep(5, version_values(5));
  straight.keep(5, version_values(5));
  EXPECT_EQ(resumed.version_for(5), 3);
  const auto a = resumed.parameters_of(3);
  EXPECT_EQ(std::vector<float>(a.begin(), a.end()), version_values(3));
  EXPECT_EQ(straight.version_for(5), resumed.version_for(5));
  // Early in the run: version 0 is all there is.
  ParameterVersions early(3);
  early.keep(0, version_values(0));
  EXPECT_EQ(early.saved(1).size(), 1u);
  // Versions that are not those of the step: a data error naming the file.
  ParameterVersions wrong(2);
  EXPECT_THROW(wrong.restore(saved, 6, 2, "c.h5"), Error);
  EXPECT_THROW(wrong.restore(saved, 5, 3, "c.h5"), Error);
  // None saved (--resume-anyway from plain AMB): the window starts at the resumed parameters.
  ParameterVersions fresh(2);
  fresh.restore({}, 7, 2, "c.h5");
  fresh.keep(7, version_values(7));
  EXPECT_EQ(fresh.version_for(7), 7);
}

// Two workers; worker 0's link costs 0.5 s a message, worker 1's 1 s; worker 0 computes 2 s,
// worker 1 is 1 s late and computes 2 s; delay 1; updates are free.
TEST(AmbDg, TheUpdateTimesByHand) {
  DelayedTimeline timeline(1, {0.5, 1.0});
  const std::vector<SyncWorkerTime> round = {{0.0, 2.0, true}, {1.0, 2.0, true}};
  // Round 0 (version 0, held from the start): ready at 2 and 3, at the master at 2.5 and 4:
  // update 0 at 4.
  auto t = timeline.step(0, 0, round, 0);
  EXPECT_DOUBLE_EQ(t.end, 4.0);
  EXPECT_EQ(t.wait, (std::vector<double>{0.0, 0.0}));
  // Round 1 (version 0): neither waits; worker 0 runs 2..4, worker 1 3..6, at the master at
  // 4.5 and 7: update 1 at 7.
  t = timeline.step(1, 0, round, 0);
  EXPECT_DOUBLE_EQ(t.end, 3.0);
  // Round 2 (version 1, made at 4): it reaches worker 0 at 4.5, so worker 0 (free at 4) waits
  // 0.5 s and runs 4.5..6.5; worker 1 (free at 6, version at 5) runs 6..9, at the master at 10.
  t = timeline.step(2, 1, round, 0);
  EXPECT_DOUBLE_EQ(t.end, 3.0);
  EXPECT_DOUBLE_EQ(t.wait[0], 0.5);
  EXPECT_DOUBLE_EQ(t.wait[1], 0.0);
  EXPECT_EQ(t.sends, (std::vector<double>{0.5, 1.0}));
  // Updates at 4, 7, 10: the slowest round (3 s) per step, its messages hidden. The synchronous
  // round of the same cluster also waits for the sums and the parameters: 5 s a step.
  CommModel comm;
  comm.pair_ranks = 3;
  comm.pair_alpha = {0, 0.5, 1.0, 0.5, 0, 0, 1.0, 0, 0};
  comm.pair_beta.assign(9, 0.0);
  EXPECT_DOUBLE_EQ(sync_step_time(round, true, comm, 4, 0).end, 5.0);
}

TEST(AmbDg, ARoundTripLongerThanTheDelayIsNotHidden) {
  // One worker computing 1 s, 5 s messages, delay 1: round 0 ends at 6 (1 + 5); round 1 (version
  // 0) at 7; round 2 needs version 1, made at 6, at the worker at 11: ready 12, update at 17;
  // round 3's version 2 (made at 7) reached it at 12: update at 18.
  DelayedTimeline timeline(1, {5.0});
  const std::vector<SyncWorkerTime> round = {{0.0, 1.0, true}};
  std::vector<double> ends;
  for (std::int64_t step = 0; step < 4; ++step) {
    ends.push_back(timeline.step(step, step < 1 ? 0 : step - 1, round, 0).end);
  }
  EXPECT_EQ(ends, (std::vector<double>{6.0, 1.0, 10.0, 1.0}));
  EXPECT_EQ(delay_rounds_for(10.0, 1.0), 10);  // auto: a round trip of 10 rounds
  EXPECT_EQ(delay_rounds_for(2.5, 1.0), 3);
  EXPECT_EQ(delay_rounds_for(0.0, 1.0), 0);
  EXPECT_EQ(delay_rounds_for(1e9, 1e-9), 64);
}

TEST(AmbDg, AResumedTimelineGoesOnAsTheStraightOne) {
  const std::vector<SyncWorkerTime> round = {{0.25, 1.0, true}, {0.0, 1.5, true}};
  DelayedTimeline straight(2, {0.75, 0.5});
  for (std::int64_t step = 0; step < 3; ++step) straight.step(step, 0, round, 0.125);
  DelayedTimeline resumed(2, {0.75, 0.5});
  resumed.restore(straight.saved(), "c.h5");
  for (std::int64_t step = 3; step < 6; ++step) {
    const auto a = straight.step(step, step - 2, round, 0.125);
    const auto b = resumed.step(step, step - 2, round, 0.125);
    EXPECT_EQ(a.end, b.end);
    EXPECT_EQ(a.wait, b.wait);
  }
  EXPECT_THROW(resumed.restore({2.0, 0.0}, "c.h5"), Error);
}

}  // namespace
}  // namespace mbkit::train
