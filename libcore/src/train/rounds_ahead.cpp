#include "mbkit/train/rounds_ahead.hpp"

#include <cstdlib>
#include <string>

#include "mbkit/comm/world.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::train {

void wait_computing_ahead(const comm::World& world, std::span<comm::Request> pending,
                          const std::function<bool()>& compute_ahead, const std::string& what) {
  world.wait_until(
      [&] {
        bool done = true;
        for (comm::Request& request : pending) done = world.test(request) && done;
        if (done) return true;
        compute_ahead();
        return false;
      },
      what);
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
