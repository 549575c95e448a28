// How long the ranks a server expects a message from have kept it waiting, for the servers that
// go on with the others while one rank is silent (asynchronous ps, DBSL): their waits end at the
// first message from anyone, so a rank that stopped or died would never make one time out, and
// the run would carry on without it until its end. Past the wait deadline (--comm-timeout) a
// silent rank fails the run as a wait would (exit code 4), naming it.
//
// Silence is counted only while the server polls, at most kMostCountedPerPoll between two
// polls: the server's own work between waits, or its being stopped, is no one's silence, and a
// message that arrived meanwhile is taken in at the next poll, before the check.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/comm/world.hpp"

namespace mbkit::comm {

class PeerSilence {
 public:
  static constexpr double kMostCountedPerPoll = 0.5;  ///< seconds

  /// `peers` ranks, numbered 0..peers-1 here (rank_of maps them to the world's ranks).
  PeerSilence(std::size_t peers, std::function<int(std::size_t)> rank_of);

  /// A message from `peer` is due from now on: its silence starts at zero.
  void expect(std::size_t peer);
  /// It came, or none is due any more.
  void heard(std::size_t peer);
  bool expecting(std::size_t peer) const { return silence_[peer].has_value(); }
  /// Seconds `peer` has been silent while expected (0 when nothing is due).
  double silence(std::size_t peer) const { return silence_[peer].value_or(0.0); }

  /// From a wait's poll, after the messages that came were taken in: counts the time since the
  /// last call for every expected peer and fails (World::timed_out) naming those silent past
  /// world.wait_deadline(); `what` names the wait ("server waiting for a push for step 12").
  void check(const World& world, const std::string& what);

 private:
  std::vector<std::optional<double>> silence_;
  std::function<int(std::size_t)> rank_of_;
  std::chrono::steady_clock::time_point last_check_;
};

}  // namespace mbkit::comm
