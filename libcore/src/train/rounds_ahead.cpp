#include "mbkit/train/rounds_ahead.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mbkit/comm/world.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::train {

void wait_computing_ahead(const comm::World& world, std::span<comm::Request> pending,
                          const std::function<bool()>& compute_ahead, const std::string& what) {
  const auto completed = [&] {
    bool done = true;
    for (comm::Request& request : pending) done = world.test(request) && done;
    return done;
  };
  // A poll between rounds computed ahead, while there is one to compute; then a wait as any
  // other (spin, yield, then sleep, from now: the time spent computing was not waiting, and a
  // wait counted from the first poll would sleep up to a millisecond between polls at once).
  while (!completed()) {
    if (!compute_ahead()) {
      world.wait_until(completed, what);
      return;
    }
  }
}

void broadcast_ready_time_computing_ahead(const comm::World& world, int host, double& ready,
                                          const std::function<bool()>& compute_ahead) {
  std::array<comm::Request, 1> pending{world.ibroadcast(
      std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&ready), sizeof ready), host)};
  wait_computing_ahead(world, pending, compute_ahead, "an emulated worker's ready time");
}

std::size_t rounds_ahead_bound() {
  const char* text = std::getenv("MBKIT_EMULATE_AHEAD_BYTES");
  if (text == nullptr || *text == '\0') return kRoundsAheadBytes;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-') {
    usage_error(std::string("MBKIT_EMULATE_AHEAD_BYTES: '") + text + "' is not a count of bytes");
  }
  return static_cast<std::size_t>(bytes);
}

void RoundsAhead::started(int w, double due) {
  MBKIT_CHECK(!due_.contains(w), "worker ", w, " started a round with one pending");
  due_.emplace(w, due);
  pending_.emplace(due, w);
}

std::optional<int> RoundsAhead::next(std::size_t bytes) {
  if (pending_.empty() || bytes > bound_ || held_ > bound_ - bytes) return std::nullopt;
  const int w = pending_.begin()->second;
  pending_.erase(pending_.begin());
  due_.erase(w);
  held_ += bytes;
  return w;
}

void RoundsAhead::drop(int w) {
  const auto found = due_.find(w);
  if (found == due_.end()) return;
  pending_.erase({found->second, w});
  due_.erase(found);
}

void RoundsAhead::released(std::size_t bytes) {
  MBKIT_CHECK(bytes <= held_, "released ", bytes, " bytes of ", held_, " computed ahead");
  held_ -= bytes;
}

}  // namespace mbkit::train
