// Buffers of non-blocking messages, which must outlive their owner while MPI may still use them.
//
// An object that exchanges messages (an exchange, a worker's stream of parameters) owns the
// buffers of its pending sends and posted receives. When an error unwinds it (a wait past
// --comm-timeout, a peer's failure, any exception) its destructor runs while those requests are
// still pending, and the job is aborted only afterwards: a send's buffer freed then may still be
// read by the peer (CI: a stopped rank, continued during the abort, took a parameters header
// from the master's freed memory), and a receive's written into (the failing rank's heap,
// while it prints its error). comm::Request is a plain handle and cannot keep the memory, so the
// buffers are allocated by MessageAllocator, and World tracks every request it starts with the
// bytes it uses. A block freed while a tracked request still uses it is not freed:
//  - a posted receive on it is cancelled (well defined for a receive: MPI_Cancel, then one
//    MPI_Test completes it); the block is freed once every receive on it completed so;
//  - anything else (a send, whose cancelling MPI-4 deprecates and which may hang on a peer that
//    is gone; a collective; a receive already matched, its data still coming) keeps the block,
//    and the request, until the process ends.
// Nothing waits, so a rank whose peer is gone still ends promptly. A request that completed
// (World::test, wait or cancel) is forgotten at once: in a normal run every block is freed as
// before, and the bits of every message are the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mbkit::comm {

/// What the process keeps for requests whose owner went away before they completed.
struct KeptBuffers {
  std::size_t blocks = 0;              ///< blocks not freed (kept until the process ends)
  std::size_t bytes = 0;               ///< their size
  std::size_t requests = 0;            ///< pending requests on them, kept with them
  std::size_t cancelled_receives = 0;  ///< receives cancelled when their block was freed
};
KeptBuffers kept_buffers();

/// Requests World started on memory and not yet seen complete (messages; not barriers).
std::size_t tracked_requests();

namespace in_flight {
/// What a tracked request does with its bytes.
enum class Use { kSend, kReceive, kCollective };
/// World's bookkeeping (world.cpp): a request started on [data, data + bytes), and completed.
void track(std::uintptr_t request, const void* data, std::size_t bytes, Use use);
void forget(std::uintptr_t request);
/// MessageAllocator's check before it frees a block: true when a pending request still uses
/// it; the block then belongs to the process (see above) and must not be freed.
bool keep(void* block, std::size_t bytes) noexcept;
}  // namespace in_flight

/// std::allocator, except that a block a pending request uses is kept instead of freed.
template <class T>
struct MessageAllocator {
  using value_type = T;
  MessageAllocator() = default;
  template <class U>
  MessageAllocator(const MessageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* block, std::size_t n) noexcept {
    if (!in_flight::keep(block, n * sizeof(T))) std::allocator<T>().deallocate(block, n);
  }
  template <class U>
  bool operator==(const MessageAllocator<U>&) const noexcept {
    return true;
  }
};

/// The buffer of a non-blocking message (a std::vector that MPI may outlive its owner with).
template <class T>
using MessageBuffer = std::vector<T, MessageAllocator<T>>;

}  // namespace mbkit::comm
