#include "mbkit/comm/peer_silence.hpp"

#include <algorithm>
#include <utility>

namespace mbkit::comm {

PeerSilence::PeerSilence(std::size_t peers, std::function<int(std::size_t)> rank_of)
    : silence_(peers),
      rank_of_(std::move(rank_of)),
      last_check_(std::chrono::steady_clock::now()) {}

void PeerSilence::expect(std::size_t peer) {
  silence_[peer] = 0.0;
}

void PeerSilence::heard(std::size_t peer) {
  silence_[peer].reset();
}

void PeerSilence::check(const World& world, const std::string& what) {
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_check_).count();
  last_check_ = now;
  const double counted = std::min(since, kMostCountedPerPoll);
  const double deadline = world.wait_deadline();
  std::vector<int> silent;
  double longest = 0;
  for (std::size_t peer = 0; peer < silence_.size(); ++peer) {
    if (!silence_[peer]) continue;
    *silence_[peer] += counted;
    if (*silence_[peer] > deadline) {
      silent.push_back(rank_of_(peer));
      longest = std::max(longest, *silence_[peer]);
    }
  }
  if (!silent.empty()) world.timed_out(what, std::move(silent), longest);
}

}  // namespace mbkit::comm
