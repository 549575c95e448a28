#include "mbkit/comm/in_flight.hpp"

#include <mpi.h>

#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

namespace mbkit::comm {
namespace {

struct Tracked {
  const std::byte* data = nullptr;
  in_flight::Use use = in_flight::Use::kSend;
};

// Process-lifetime: created on first use and never destroyed, so that a block freed during the
// process's end (static destructors) still finds it, and the kept blocks stay reachable (not
// leaks to LeakSanitizer).
struct Keeper {
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, Tracked> by_request;
  std::multimap<const std::byte*, std::uintptr_t> by_address;
  std::vector<const void*> blocks;  // kept until the process ends
  KeptBuffers kept;

  void erase(std::unordered_map<std::uintptr_t, Tracked>::iterator found) {
    auto [first, last] = by_address.equal_range(found->second.data);
    for (auto at = first; at != last; ++at) {
      if (at->second == found->first) {
        by_address.erase(at);
        break;
      }
    }
    by_request.erase(found);
  }
};

Keeper& keeper() {
  static Keeper* const instance = new Keeper;
  return *instance;
}

// Cancels a pending receive without waiting: true when it then completed (the buffer is free).
// One that was matched already goes on receiving; its buffer must stay.
bool cancelled(std::uintptr_t handle) {
  int finalized = 1;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return false;
  MPI_Request request = MPI_REQUEST_NULL;
  std::memcpy(&request, &handle, sizeof request);
  if (MPI_Cancel(&request) != MPI_SUCCESS) return false;
  int done = 0;
  return MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done != 0;
}

}  // namespace

KeptBuffers kept_buffers() {
  Keeper& k = keeper();
  const std::lock_guard lock(k.mutex);
  return k.kept;
}

std::size_t tracked_requests() {
  Keeper& k = keeper();
  const std::lock_guard lock(k.mutex);
  return k.by_request.size() - k.kept.requests;
}

namespace in_flight {

void track(std::uintptr_t request, const void* data, std::size_t bytes, Use use) {
  if (request == 0 || data == nullptr || bytes == 0) return;
  Keeper& k = keeper();
  const std::lock_guard lock(k.mutex);
  const auto* at = static_cast<const std::byte*>(data);
  k.by_request[request] = {at, use};
  k.by_address.emplace(at, request);
}

void forget(std::uintptr_t request) {
  Keeper& k = keeper();
  const std::lock_guard lock(k.mutex);
  const auto found = k.by_request.find(request);
  if (found != k.by_request.end()) k.erase(found);
}

bool keep(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return false;
  Keeper& k = keeper();
  const std::lock_guard lock(k.mutex);
  const auto* begin = static_cast<const std::byte*>(block);
  auto at = k.by_address.lower_bound(begin);
  const auto end = k.by_address.lower_bound(begin + bytes);
  if (at == end) return false;  // the normal case: nothing pending on it
  std::size_t still_pending = 0;
  while (at != end) {
    const std::uintptr_t request = at->second;
    const auto found = k.by_request.find(request);
    ++at;
    if (found == k.by_request.end()) continue;  // both maps hold every request: not reached
    if (found->second.use == Use::kReceive && cancelled(request)) {
      k.erase(found);
      ++k.kept.cancelled_receives;
    } else {
      ++still_pending;
    }
  }
  if (still_pending == 0) return false;
  k.blocks.push_back(block);
  ++k.kept.blocks;
  k.kept.bytes += bytes;
  k.kept.requests += still_pending;
  return true;
}

}  // namespace in_flight
}  // namespace mbkit::comm
