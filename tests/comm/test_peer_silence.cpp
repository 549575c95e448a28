// comm::PeerSilence on a single process: the silence of the peers a server expects a message
// from is counted across its polls (at most kMostCountedPerPoll between two), a peer heard from
// or no longer expected is not counted, and past the wait deadline the run fails as a wait
// does, naming only the silent peers' ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "mbkit/comm/peer_silence.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::comm {
namespace {

int rank_after_the_server(std::size_t peer) {
  return static_cast<int>(peer) + 1;
}

void sleep_seconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

TEST(PeerSilence, CountsOnlyTheExpectedPeers) {
  World world;
  world.set_timeout(10);
  PeerSilence silence(3, rank_after_the_server);
  silence.expect(0);
  silence.expect(2);
  sleep_seconds(0.05);
  silence.check(world, "server waiting");
  EXPECT_GE(silence.silence(0), 0.05);
  EXPECT_FALSE(silence.expecting(1));
  EXPECT_EQ(silence.silence(1), 0.0);
  silence.heard(2);
  EXPECT_EQ(silence.silence(2), 0.0);
  silence.expect(2);  // its next message: silent from zero again
  sleep_seconds(0.02);
  silence.check(world, "server waiting");
  EXPECT_LT(silence.silence(2), silence.silence(0));
}

TEST(PeerSilence, TimeBetweenPollsCountsAtMostHalfASecond) {
  // The server working (or stopped) between its waits is no one's silence.
  World world;
  world.set_timeout(0.9);
  PeerSilence silence(1, rank_after_the_server);
  silence.expect(0);
  sleep_seconds(0.55);
  silence.check(world, "server waiting");
  EXPECT_DOUBLE_EQ(silence.silence(0), PeerSilence::kMostCountedPerPoll);
  sleep_seconds(0.45);
  EXPECT_THROW(silence.check(world, "server waiting"), Error);  // 0.95 s counted: past 0.9 s
}

TEST(PeerSilence, ASilentPeerPastTheDeadlineIsNamed) {
  World world;
  world.set_timeout(0.1);
  PeerSilence silence(3, rank_after_the_server);
  silence.expect(0);
  silence.expect(1);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int poll = 0; poll < 1000; ++poll) {
      sleep_seconds(0.005);
      silence.heard(0);  // rank 1 keeps pushing
      silence.expect(0);
      silence.check(world, "server waiting for a push for step 8");
    }
    FAIL() << "rank 2 was never named";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kCommunication);
    const std::string message = error.what();
    EXPECT_NE(message.find("server waiting for a push for step 8: nothing for 0.1 s "
                           "(--comm-timeout); rank 2 does not answer"),
              std::string::npos)
        << message;
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.1);
  EXPECT_LT(waited, 2.0);
}

}  // namespace
}  // namespace mbkit::comm
