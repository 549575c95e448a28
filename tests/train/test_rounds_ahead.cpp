// RoundsAhead: which started round a host computes before its take (the soonest due), and the
// bound on the results computed ahead, past which a round waits for its take.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mbkit/train/rounds_ahead.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::train {
namespace {

TEST(RoundsAhead, ComputesTheSoonestDueFirstWithinTheBound) {
  RoundsAhead ahead(250);
  ahead.started(4, 0.3);
  ahead.started(1, 0.1);
  ahead.started(7, 0.2);
  EXPECT_EQ(ahead.next(100), 1);
  EXPECT_EQ(ahead.next(100), 7);
  EXPECT_EQ(ahead.held_bytes(), 200u);
  EXPECT_FALSE(ahead.next(100));  // 300 bytes would pass the bound: worker 4 waits
  EXPECT_EQ(ahead.pending(), 1u);
  ahead.released(100);  // worker 1's result was broadcast
  EXPECT_EQ(ahead.next(100), 4);
  EXPECT_FALSE(ahead.next(100));  // none left
}

TEST(RoundsAhead, ABoundOfZeroComputesEveryRoundAtItsTake) {
  RoundsAhead ahead(0);
  ahead.started(0, 0.5);
  EXPECT_FALSE(ahead.next(1));
  ahead.drop(0);  // its take computed it
  EXPECT_EQ(ahead.pending(), 0u);
  ahead.started(0, 0.7);  // its next round
  EXPECT_EQ(ahead.pending(), 1u);
}

TEST(RoundsAhead, ADroppedRoundIsNotComputedAhead) {
  RoundsAhead ahead(1000);
  ahead.started(2, 0.1);
  ahead.started(3, 0.1);  // due at once: the lower worker first
  ahead.drop(2);
  EXPECT_EQ(ahead.next(10), 3);
  ahead.drop(3);  // already computed ahead: nothing to drop
  EXPECT_FALSE(ahead.next(10));
  EXPECT_EQ(ahead.held_bytes(), 10u);
}

TEST(RoundsAhead, TheBoundIsTheDefaultOrTheTestsEnvironmentVariable) {
  ::unsetenv("MBKIT_EMULATE_AHEAD_BYTES");
  EXPECT_EQ(rounds_ahead_bound(), kRoundsAheadBytes);
  ::setenv("MBKIT_EMULATE_AHEAD_BYTES", "4096", 1);
  EXPECT_EQ(rounds_ahead_bound(), 4096u);
  ::setenv("MBKIT_EMULATE_AHEAD_BYTES", "4k", 1);
  try {
    rounds_ahead_bound();
    ADD_FAILURE() << "a bound that is not a count of bytes was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(error.what()).find("MBKIT_EMULATE_AHEAD_BYTES: '4k'"), std::string::npos)
        << error.what();
  }
  ::unsetenv("MBKIT_EMULATE_AHEAD_BYTES");
}

}  // namespace
}  // namespace mbkit::train
