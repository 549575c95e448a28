#include "mbkit/comm/shared_sum.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>

#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::comm {
namespace {

using Clock = SteadyClock;

constexpr std::size_t kCacheLine = 64;
constexpr std::size_t kLineFloats = kCacheLine / sizeof(float);
// The phases of a sum (see the header); a counter per phase holds the number of the last sum
// this rank completed the phase of.
constexpr int kArrived = 0, kSummed = 1, kCopied = 2, kPhases = 3;
// Floats added at a time: a block of the running sum stays in L1 while every rank's block is
// added in.
constexpr std::size_t kBlock = 1024;

std::size_t round_up(std::size_t value, std::size_t unit) {
  return (value + unit - 1) / unit * unit;
}

MPI_Win win_of(std::uintptr_t bits) {
  MPI_Win win = MPI_WIN_NULL;
  std::memcpy(&win, &bits, sizeof win);
  return win;
}

const char* phase_name(int phase) {
  switch (phase) {
    case kArrived:
      return "waiting for the other ranks' gradients at ";
    case kSummed:
      return "waiting for the other ranks' sums at ";
    default:
      return "waiting for the other ranks to read the sum at ";
  }
}

}  // namespace

// One cache line per counter: a rank polling another's counter does not slow its writes.
struct SharedSum::Counters {
  struct alignas(kCacheLine) Line {
    std::uint64_t value;
  };
  std::array<Line, kPhases> phase;
};

SharedSum::Counters* SharedSum::counters(int rank) const {
  static_assert(sizeof(Counters) == kPhases * kCacheLine);
  return counters_[static_cast<std::size_t>(rank)];
}

bool SharedSum::possible(const World& world) {
  return world.distributed() && world.local_size() == world.size();
}

SharedSum::SharedSum(const World& world, std::size_t floats) : world_(world) {
  MBKIT_CHECK(possible(world), "a shared-memory sum needs every rank on one host");
  static_assert(sizeof(MPI_Win) <= sizeof(std::uintptr_t));
  const auto ranks = static_cast<std::size_t>(world.size());
  segment_ = round_up((floats + ranks - 1) / ranks, kLineFloats);
  const std::size_t bytes = sizeof(Counters) + round_up(floats * sizeof(float), kCacheLine);
  // Open MPI does not align the parts to cache lines: each part gets a line to align itself in.
  const std::size_t allocated_bytes = bytes + kCacheLine;
  MPI_Info info = MPI_INFO_NULL;
  MBKIT_MPI_CHECK(MPI_Info_create(&info));
  // Each rank's part on its own pages (Open MPI then places it near the rank that writes it).
  MBKIT_MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  void* mine = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  const int allocated = MPI_Win_allocate_shared(static_cast<MPI_Aint>(allocated_bytes), 1, info,
                                                MPI_COMM_WORLD, &mine, &win);
  MPI_Info_free(&info);
  if (allocated != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int length = 0;
    MPI_Error_string(allocated, text, &length);
    throw Error(cat("MPI_Win_allocate_shared of ", allocated_bytes, " bytes per rank failed (",
                    text, "): this MPI cannot share memory between the ranks; use --allreduce mpi"),
                ExitCode::kCommunication);
  }
  std::memcpy(&window_, &win, sizeof win);
  MBKIT_MPI_CHECK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  for (int rank = 0; rank < world.size(); ++rank) {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    MBKIT_MPI_CHECK(MPI_Win_shared_query(win, rank, &size, &unit, &base));
    MBKIT_CHECK(static_cast<std::size_t>(size) >= allocated_bytes, "rank ", rank,
                "'s part of the shared window is ", size, " bytes, not ", allocated_bytes);
    const auto address = reinterpret_cast<std::uintptr_t>(base);
    auto* bytes_at = static_cast<unsigned char*>(base) + (round_up(address, kCacheLine) - address);
    counters_.push_back(reinterpret_cast<Counters*>(bytes_at));
    buffers_.push_back(reinterpret_cast<float*>(bytes_at + sizeof(Counters)));
  }
  Counters* own = counters_[static_cast<std::size_t>(world.rank())];
  for (auto& line : own->phase) std::atomic_ref<std::uint64_t>(line.value).store(0);
  buffer_ = std::span<float>(buffers_[static_cast<std::size_t>(world.rank())], floats);
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  // No rank reads a counter before every rank zeroed its own.
  world.rendezvous("setting up the shared-memory sum");
}

SharedSum::~SharedSum() {
  // MPI_Win_free is collective: while an error unwinds (a rank is gone) it would wait for ever;
  // the job is about to end, so the window is left to the operating system.
  if (window_ == 0 || std::uncaught_exceptions() > 0) return;
  MPI_Win win = win_of(window_);
  MPI_Win_free(&win);
}

void SharedSum::arrive(int phase) {
  // Release: the buffer's writes are visible to a rank that sees the new count.
  std::atomic_ref<std::uint64_t>(
      counters(world_.rank())->phase[static_cast<std::size_t>(phase)].value)
      .store(calls_, std::memory_order_release);
}

double SharedSum::wait_for_all(int phase, const std::string& what) const {
  const auto done = [&](int rank) {
    return std::atomic_ref<std::uint64_t>(
               counters(rank)->phase[static_cast<std::size_t>(phase)].value)
               .load(std::memory_order_acquire) >= calls_;
  };
  const auto behind = [&] {
    std::vector<int> ranks;
    for (int rank = 0; rank < world_.size(); ++rank) {
      if (!done(rank)) ranks.push_back(rank);
    }
    return ranks;
  };
  const auto start = Clock::now();
  world_.wait_until(
      [&] {
        for (int rank = 0; rank < world_.size(); ++rank) {
          if (!done(rank)) return false;
        }
        return true;
      },
      cat(phase_name(phase), what), behind);
  return seconds_since(start);
}

double SharedSum::sum(const std::string& what) {
  ++calls_;
  arrive(kArrived);
  const double waited = wait_for_all(kArrived, what);

  const auto ranks = static_cast<std::size_t>(world_.size());
  const auto me = static_cast<std::size_t>(world_.rank());
  const std::size_t floats = buffer_.size();
  const std::size_t begin = std::min(floats, me * segment_);
  const std::size_t end = std::min(floats, begin + segment_);
  alignas(kCacheLine) std::array<float, kBlock> running;
  for (std::size_t at = begin; at < end; at += kBlock) {
    const std::size_t count = std::min(kBlock, end - at);
    std::copy_n(buffers_[0] + at, count, running.data());
    for (std::size_t rank = 1; rank < ranks; ++rank) {
      const float* in = buffers_[rank] + at;
      for (std::size_t i = 0; i < count; ++i) running[i] += in[i];
    }
    std::copy_n(running.data(), count, buffer_.data() + at);
  }
  arrive(kSummed);
  wait_for_all(kSummed, what);

  for (std::size_t rank = 0; rank < ranks; ++rank) {
    if (rank == me) continue;
    const std::size_t from = std::min(floats, rank * segment_);
    const std::size_t to = std::min(floats, from + segment_);
    std::copy(buffers_[rank] + from, buffers_[rank] + to, buffer_.data() + from);
  }
  // The next sum's data is written into this buffer (the backward pass) while it is not
  // called: nobody may still be reading this rank's segment by then.
  arrive(kCopied);
  wait_for_all(kCopied, what);
  return waited;
}

}  // namespace mbkit::comm
