// The virtual clock: --comm-model and --compute-model parsing and their messages, the
// synchronous step timeline against hand-computed values, and the asynchronous event order
// (arrival order, the conservative wait for workers still computing, which parameters a worker
// holds when its next round starts).
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <vector>

#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TEST(CommModel, ParsesAlphaBetaAndComputesMessagesAndRingAllreduce) {
  EXPECT_FALSE(parse_comm_model(""));
  const CommModel model = *parse_comm_model("1e-3,2e-9");
  EXPECT_DOUBLE_EQ(model.alpha, 1e-3);
  EXPECT_DOUBLE_EQ(model.beta, 2e-9);
  EXPECT_FALSE(model.measured);
  EXPECT_DOUBLE_EQ(model.message(1000), 1e-3 + 2e-6);
  // Ring allreduce of 4000 bytes over 4 ranks: 6 messages of 1000 bytes.
  EXPECT_DOUBLE_EQ(model.allreduce(4000, 4), 6 * (1e-3 + 2e-6));
  EXPECT_EQ(model.allreduce(4000, 1), 0);
  EXPECT_DOUBLE_EQ(parse_comm_model(model.spec())->beta, model.beta);
}

TEST(CommModel, BadValuesAreUsageErrors) {
  EXPECT_MBKIT_ERROR(parse_comm_model("1e-3"), ExitCode::kUsage, "--comm-model: '1e-3' is not");
  EXPECT_MBKIT_ERROR(parse_comm_model("1,2,3"), ExitCode::kUsage, "ALPHA,BETA");
  EXPECT_MBKIT_ERROR(parse_comm_model("-1,0"), ExitCode::kUsage, "is negative");
  EXPECT_MBKIT_ERROR(parse_comm_model("x,0"), ExitCode::kUsage, "--comm-model ALPHA");
  EXPECT_MBKIT_ERROR(parse_comm_model("0,inf"), ExitCode::kUsage, "--comm-model BETA");
}

TEST(ComputeModels, EntriesForAllRanksSomeRanksAndRangesLaterWins) {
  const auto models = parse_compute_models({"1e-4,2e-3", "3=2e-4,2e-3", "5-6=1e-5,0"});
  EXPECT_DOUBLE_EQ(models.for_rank(1)->cost(32), 1e-4 * 32 + 2e-3);
  EXPECT_DOUBLE_EQ(models.for_rank(3)->cost(10), 2e-4 * 10 + 2e-3);
  EXPECT_DOUBLE_EQ(models.for_rank(6)->cost(10), 1e-4);
  EXPECT_DOUBLE_EQ(models.for_rank(7)->per_sample, 1e-4);
  const auto later = parse_compute_models({"2-4=1,1", "3=2,2"});
  EXPECT_DOUBLE_EQ(later.for_rank(3)->per_sample, 2);
  EXPECT_FALSE(later.for_rank(1));
  EXPECT_TRUE(parse_compute_models({}).empty());
  // spec() reads back to the same models.
  const auto again = parse_compute_models(split(models.spec(), ' '));
  EXPECT_EQ(again.spec(), models.spec());
}

TEST(ComputeModels, AThirdValueIsTheFirstStepsWarmUp) {
  const auto models = parse_compute_models({"1e-4,2e-3,0.05", "2=1e-4,2e-3"});
  EXPECT_DOUBLE_EQ(models.for_rank(1)->warmup, 0.05);
  EXPECT_DOUBLE_EQ(models.for_rank(2)->warmup, 0.0);
  // Not in cost(): the worker's round adds it once.
  EXPECT_DOUBLE_EQ(models.for_rank(1)->cost(10), 1e-4 * 10 + 2e-3);
  EXPECT_EQ(models.spec(), "0.0001,0.002,0.050000000000000003 2=0.0001,0.002");
  EXPECT_EQ(parse_compute_models(split(models.spec(), ' ')).spec(), models.spec());
  EXPECT_NE(models.describe().find("first step + 50 ms"), std::string::npos) << models.describe();
  EXPECT_MBKIT_ERROR(parse_compute_models({"1,1,-1"}), ExitCode::kUsage, "W: '-1' is negative");
  EXPECT_MBKIT_ERROR(parse_compute_models({"1,1,1,1,1"}), ExitCode::kUsage,
                     "not [RANKS=]A,B[,W[,L]]");
}

TEST(ComputeModels, AFourthValueIsTheLoadersCpuPerSample) {
  const auto models = parse_compute_models({"1e-4,2e-3,0,1e-6", "2=1e-4,2e-3,0.05"});
  EXPECT_DOUBLE_EQ(models.for_rank(1)->loader, 1e-6);
  EXPECT_DOUBLE_EQ(models.for_rank(1)->loader_cpu(256), 256e-6);
  EXPECT_DOUBLE_EQ(models.for_rank(2)->loader, 0.0);
  // Beside the compute: not in cost().
  EXPECT_DOUBLE_EQ(models.for_rank(1)->cost(10), 1e-4 * 10 + 2e-3);
  // W is written (0 here) where L follows it.
  EXPECT_EQ(models.spec(),
            "0.0001,0.002,0,9.9999999999999995e-07 2=0.0001,0.002,0.050000000000000003");
  EXPECT_EQ(parse_compute_models(split(models.spec(), ' ')).spec(), models.spec());
  EXPECT_NE(models.describe().find("loader CPU 0.001 ms/sample"), std::string::npos)
      << models.describe();
  EXPECT_MBKIT_ERROR(parse_compute_models({"1,1,0,-1"}), ExitCode::kUsage, "L: '-1' is negative");
}

TEST(ComputeModels, BadEntriesAndRanksAreUsageErrors) {
  EXPECT_MBKIT_ERROR(parse_compute_models({"1e-4"}), ExitCode::kUsage,
                     "--compute-model '1e-4': not [RANKS=]A,B");
  EXPECT_MBKIT_ERROR(parse_compute_models({"x=1,1"}), ExitCode::kUsage, "RANK");
  EXPECT_MBKIT_ERROR(parse_compute_models({"4-2=1,1"}), ExitCode::kUsage, "not RANK or FIRST-LAST");
  EXPECT_MBKIT_ERROR(parse_compute_models({"1,-1"}), ExitCode::kUsage, "is negative");
  // 0,0 is no compute time at all: only induced delays count (a replayed trace's step times).
  EXPECT_EQ(parse_compute_models({"0,0"}).for_rank(1)->cost(32), 0.0);
  EXPECT_MBKIT_ERROR(parse_compute_models({"9=1,1"}).check_ranks(4, 1), ExitCode::kUsage,
                     "rank 9 does not exist");
  // Some workers with a model and others without would mix modelled and measured time.
  EXPECT_MBKIT_ERROR(parse_compute_models({"2=1,1"}).check_ranks(4, 1), ExitCode::kUsage,
                     "rank 1 has no model");
  parse_compute_models({"1-3=1,1"}).check_ranks(4, 1);  // the master (rank 0) needs none
}

TEST(SyncStepTime, ParameterServerWaitsForTheSlowestThenUpdatesAndBroadcasts) {
  const CommModel comm{1e-3, 1e-9, false};
  const std::uint64_t bytes = 1'000'000;  // 1 ms + 1 ms per message
  // Worker 0: 1 s delay + 0.5 s compute; worker 1: 0.2 + 0.5; worker 2: 0 + 2.
  const auto time = sync_step_time({{1.0, 0.5}, {0.2, 0.5}, {0.0, 2.0}}, true, comm, bytes, 0.25);
  EXPECT_DOUBLE_EQ(time.gather, 2.0 + 0.002);
  EXPECT_DOUBLE_EQ(time.end, 2.0 + 0.002 + 0.25 + 0.002);
  EXPECT_DOUBLE_EQ(time.send, 0.004);
  ASSERT_EQ(time.wait.size(), 3u);
  EXPECT_NEAR(time.wait[0], time.end - 1.5 - 0.004, 1e-12);
  EXPECT_NEAR(time.wait[1], time.end - 0.7 - 0.004, 1e-12);
  EXPECT_NEAR(time.wait[2], 0.25, 1e-12);  // the slowest only waits for the update
}

TEST(SyncStepTime, AllreduceIsARingAfterTheSlowestThenEveryRankUpdates) {
  const CommModel comm{1e-3, 1e-9, false};
  const auto time = sync_step_time({{0, 1.0}, {0.5, 1.0}}, false, comm, 2'000'000, 0.1);
  const double ring = 2 * (1e-3 + 1e-3);  // 2 messages of 1 MB
  EXPECT_DOUBLE_EQ(time.gather, 1.5 + ring);
  EXPECT_DOUBLE_EQ(time.end, 1.5 + ring + 0.1);
  EXPECT_NEAR(time.wait[0], 0.6, 1e-12);
  EXPECT_NEAR(time.wait[1], 0.1, 1e-12);
  // One process: no exchange at all.
  const auto alone = sync_step_time({{0.25, 1.0}}, false, comm, 2'000'000, 0.1);
  EXPECT_DOUBLE_EQ(alone.end, 1.35);
}

// Three workers, messages of 1 s. Worker 0 and 1 need 5 s a round, worker 2 needs 10 s.
TEST(VirtualArrivals, TakesGradientsInVirtualOrderOnlyWhenNoEarlierOneCanCome) {
  VirtualArrivals arrivals(3, 1.0);
  EXPECT_EQ(arrivals.publish(0.0), 0);
  for (int w = 0; w < 3; ++w) arrivals.start(w, 1.0);  // parameters arrive at 1 s
  // Worker 2's gradient comes in first in real time, but arrives at 12 s in virtual time:
  // it must wait while workers 0 and 1 (arriving no sooner than 2 s) are computing.
  EXPECT_DOUBLE_EQ(arrivals.arrived(2, 10.0), 12.0);
  EXPECT_FALSE(arrivals.next());
  EXPECT_DOUBLE_EQ(arrivals.arrived(1, 5.0), 7.0);
  EXPECT_FALSE(arrivals.next());  // worker 0 could still arrive at 2 s
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 5.0), 7.0);
  ASSERT_TRUE(arrivals.next());
  EXPECT_EQ(*arrivals.next(), 0);  // a tie goes to the lower index
  EXPECT_DOUBLE_EQ(arrivals.take(0), 7.0);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 6.0);  // it went on as soon as it had sent
  EXPECT_EQ(arrivals.held_at(6.0), 0);             // with the start parameters
  EXPECT_EQ(arrivals.publish(7.0), 1);             // the master's first update
  // Worker 1 also arrived at 7 s, but worker 0, computing again from 6 s, could arrive at 7 s
  // too (with a round that costs nothing) and would go first: wait for it.
  EXPECT_FALSE(arrivals.next());
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 5.0), 12.0);
  ASSERT_TRUE(arrivals.next());
  EXPECT_EQ(*arrivals.next(), 1);
  EXPECT_DOUBLE_EQ(arrivals.take(1), 7.0);
  EXPECT_EQ(arrivals.publish(7.0), 2);
  // Workers 0 and 2 arrive at 12 s, worker 1 no sooner than 7 s: wait for it.
  EXPECT_FALSE(arrivals.next());
  EXPECT_DOUBLE_EQ(arrivals.arrived(1, 5.0), 12.0);
  EXPECT_EQ(*arrivals.next(), 0);  // three at 12 s: the lowest index first
  arrivals.take(0);
  // Worker 0 starts again at 11 s and holds the newest parameters that reached it by then:
  // those published at 7 s (arriving at 8 s).
  EXPECT_EQ(arrivals.held_at(arrivals.round_start(0)), 2);
  EXPECT_EQ(arrivals.held_at(7.5), 0);  // a round starting at 7.5 s had only the first ones
  EXPECT_EQ(arrivals.forget_before(11.0), 2);
  EXPECT_EQ(arrivals.first_kept(), 2);
  EXPECT_EQ(arrivals.held_at(11.0), 2);
}

TEST(VirtualArrivals, AMessageDelayPutsOffTheArrivalNotTheWorkersNextRound) {
  VirtualArrivals arrivals(2, 1.0);
  arrivals.publish(0.0);
  arrivals.start(0, 1.0);
  arrivals.start(1, 1.0);
  EXPECT_TRUE(arrivals.none_until(1.5));  // both arrive at 2 s at the earliest
  EXPECT_FALSE(arrivals.none_until(2.0));
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 3.0, 2.5), 7.5);  // ready at 4 s, + 1 s + 2.5 s
  EXPECT_DOUBLE_EQ(arrivals.arrival(0), 7.5);
  EXPECT_DOUBLE_EQ(arrivals.arrived(1, 4.0), 6.0);
  EXPECT_TRUE(arrivals.none_until(5.9));
  EXPECT_FALSE(arrivals.none_until(6.0));
  EXPECT_EQ(*arrivals.next(), 1);  // the delayed worker 0 comes second
  EXPECT_DOUBLE_EQ(arrivals.take(1), 6.0);
  EXPECT_DOUBLE_EQ(arrivals.round_start(1), 5.0);
  // Worker 1 computes again from 5 s: it could arrive at 6 s, before worker 0's 7.5 s.
  EXPECT_FALSE(arrivals.next());
  EXPECT_FALSE(arrivals.none_until(6.0));
  arrivals.arrived(1, 4.0);  // 10 s
  EXPECT_EQ(*arrivals.next(), 0);
  EXPECT_DOUBLE_EQ(arrivals.take(0), 7.5);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 4.0);  // it went on when ready, not at 6.5 s
  EXPECT_TRUE(arrivals.none_until(4.9));
  EXPECT_FALSE(arrivals.none_until(5.0));  // worker 0 from 4 s: 5 s at the earliest
}

TEST(VirtualArrivals, AWorkersSendWaitsForItsPreviousOne) {
  // Rounds of 1 s, messages of 3 s: the worker sends one gradient per 3 s, as the real worker
  // whose send waits for the previous one.
  VirtualArrivals arrivals(1, 3.0);
  arrivals.publish(0.0);
  arrivals.start(0, 0.0);
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 1.0), 4.0);  // sent at 1 s
  EXPECT_DOUBLE_EQ(arrivals.take(0), 4.0);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 1.0);
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 1.0), 7.0);  // ready at 2 s, sent at 4 s
  EXPECT_DOUBLE_EQ(arrivals.take(0), 7.0);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 4.0);  // it computed on from its send
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 1.0), 10.0);
}

TEST(VirtualArrivals, ASendsCpuComesAfterTheComputeAndTheLinkPeriodBoundsTheStep) {
  // The async cycle's model (CommModel::async_sender): a link period of 3 s, 0.5 s of the
  // worker's CPU a send. A step is max(period, compute + CPU).
  VirtualArrivals arrivals(1, 3.0, 0.5);
  EXPECT_DOUBLE_EQ(arrivals.sender(), 0.5);
  arrivals.publish(0.0);
  arrivals.start(0, 0.0);
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 1.0), 4.5);  // computed 1 s, sent at 1.5 s
  EXPECT_DOUBLE_EQ(arrivals.take(0), 4.5);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 1.5);
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 1.0), 7.5);  // ready at 3 s, the link free at 4.5 s
  EXPECT_DOUBLE_EQ(arrivals.take(0), 7.5);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 4.5);    // a step of 3 s: the link's period
  EXPECT_DOUBLE_EQ(arrivals.arrived(0, 4.0), 12.0);  // 4 s of compute: sent at 9 s
  EXPECT_DOUBLE_EQ(arrivals.take(0), 12.0);
  EXPECT_DOUBLE_EQ(arrivals.round_start(0), 9.0);  // a step of 4.5 s: compute + CPU
}

TEST(VirtualArrivals, RetiredWorkersNoLongerHoldBackTheOthers) {
  VirtualArrivals arrivals(2, 0.5);
  arrivals.publish(0.0);
  arrivals.start(0, 0.5);
  arrivals.start(1, 0.5);
  arrivals.arrived(1, 3.0);
  EXPECT_FALSE(arrivals.next());
  arrivals.retire(0);
  ASSERT_TRUE(arrivals.next());
  EXPECT_EQ(*arrivals.next(), 1);
  EXPECT_TRUE(arrivals.waiting(1));
}

// next() and none_until() keep the events in order (O(log N) an event); here against the rule
// itself, a scan of every worker, over random runs with ties (times on a grid of 0.25 s, zero-cost
// rounds), blocked, restarted and retired workers.
TEST(VirtualArrivals, OrderedEventsAgreeWithAScanOfEveryWorkerOverRandomRuns) {
  enum class State { kComputing, kWaiting, kRetired, kBlocked };
  std::mt19937 random(7);
  const auto grid = [&](int steps) { return 0.25 * static_cast<int>(random() % steps); };
  for (int run = 0; run < 200; ++run) {
    const int workers = 1 + static_cast<int>(random() % 9);
    const double message = grid(3);
    VirtualArrivals arrivals(workers, message);
    std::vector<State> state(static_cast<std::size_t>(workers), State::kComputing);
    std::vector<double> start(state.size(), 0.0), arrival(state.size(), 0.0);
    const auto scanned_next = [&]() -> std::optional<int> {
      std::optional<int> best;
      for (int w = 0; w < workers; ++w) {
        const auto i = static_cast<std::size_t>(w);
        if (state[i] == State::kWaiting && (!best || arrival[i] < arrival[*best])) best = w;
      }
      if (!best) return std::nullopt;
      for (int w = 0; w < workers; ++w) {
        const auto i = static_cast<std::size_t>(w);
        if (state[i] != State::kComputing) continue;
        const double bound = start[i] + message;
        if (bound < arrival[*best] || (bound == arrival[*best] && w < *best)) return std::nullopt;
      }
      return best;
    };
    const auto scanned_none_until = [&](double time) {
      for (std::size_t i = 0; i < state.size(); ++i) {
        if (state[i] == State::kWaiting && arrival[i] <= time) return false;
        if (state[i] == State::kComputing && start[i] + message <= time) return false;
      }
      return true;
    };
    for (int event = 0; event < 60; ++event) {
      ASSERT_EQ(arrivals.next(), scanned_next()) << "run " << run << ", event " << event;
      const double probe = grid(40);
      ASSERT_EQ(arrivals.none_until(probe), scanned_none_until(probe)) << "run " << run;
      const int w = static_cast<int>(random() % static_cast<unsigned>(workers));
      const auto i = static_cast<std::size_t>(w);
      const unsigned action = random() % 10;
      if (action < 4 && state[i] == State::kComputing) {
        arrival[i] = arrivals.arrived(w, grid(8));
        state[i] = State::kWaiting;
      } else if (action < 7 && scanned_next()) {
        const int taken = *scanned_next();
        arrivals.take(taken);
        state[static_cast<std::size_t>(taken)] = State::kComputing;
        start[static_cast<std::size_t>(taken)] = arrival[static_cast<std::size_t>(taken)] - message;
      } else if (action == 7 && state[i] == State::kComputing) {
        arrivals.block(w, 0);
        state[i] = State::kBlocked;
      } else if (action == 8 && state[i] != State::kWaiting) {
        start[i] = grid(40);
        arrivals.start(w, start[i]);
        state[i] = State::kComputing;
      } else if (action == 9 && random() % 4 == 0) {
        arrivals.retire(w);
        state[i] = State::kRetired;
      }
    }
  }
}

// held_at() is a binary search over the kept publications (about one a worker in flight); here
// against the rule itself, a scan for the newest that reached the worker, over random runs with
// ties (publication and start times on a grid of 0.25 s, repeated times) and forget_before().
TEST(VirtualArrivals, HeldSetsAgreeWithAScanOfThePublicationsOverRandomRuns) {
  std::mt19937 random(11);
  const auto grid = [&](int steps) { return 0.25 * static_cast<int>(random() % steps); };
  for (int run = 0; run < 200; ++run) {
    const double message = grid(3);
    VirtualArrivals arrivals(1, message);
    std::vector<double> published;  // every publication's time, from index 0
    std::int64_t first_kept = 0;
    const auto scanned_held_at = [&](double start) {
      std::int64_t held = first_kept;
      for (std::size_t i = static_cast<std::size_t>(first_kept); i < published.size(); ++i) {
        if (published[i] + message <= start) held = static_cast<std::int64_t>(i);
      }
      return held;
    };
    double now = 0;
    for (int event = 0; event < 80; ++event) {
      if (published.empty() || random() % 3 != 0) {
        if (random() % 2 == 0) now += grid(3);  // ties: a third of the steps publish at once
        ASSERT_EQ(arrivals.publish(now), static_cast<std::int64_t>(published.size()));
        published.push_back(now);
      }
      const double start = now + grid(8) - 1.0;
      ASSERT_EQ(arrivals.held_at(start), scanned_held_at(start))
          << "run " << run << ", event " << event << ", start " << start;
      if (random() % 5 == 0) {
        const std::int64_t keep_from = scanned_held_at(start);
        ASSERT_EQ(arrivals.forget_before(start), keep_from - first_kept) << "run " << run;
        first_kept = keep_from;
        ASSERT_EQ(arrivals.first_kept(), first_kept);
      }
    }
  }
}

TEST(VirtualArrivals, PublicationsGoForwardInTime) {
  VirtualArrivals arrivals(1, 0.5);
  arrivals.publish(2.0);
  arrivals.publish(2.0);
  EXPECT_THROW(arrivals.publish(1.5), Error);
}

}  // namespace
}  // namespace mbkit::train
