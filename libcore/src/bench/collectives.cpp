// The plain collectives of mb-bench-bandwidth: out-of-place MPI calls (nccl-tests' default),
// rank 0 the root, values that sum exactly in float so the check compares bits.
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <stdexcept>

#include "collective_parts.hpp"
#include "mbkit/bench/measure.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::bench {
namespace {

using detail::buffer_sizes;
using detail::expected;
using detail::fill;

// Page-aligned storage, as the anchor's malloc gives buffers of this size (fresh mappings):
// std::vector's heap blocks put the send and receive buffers at unrelated offsets within a
// page, and MPI_Allreduce of 1-4 MiB on 2 ranks then measured 1.3x slower here (230 against
// 175 us at 1 MiB, the same call and schedule; page-aligned: 165-212 against 175-204).
template <class T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) {}
  T* allocate(std::size_t n) {
    constexpr std::size_t kPage = 4096;
    const std::size_t bytes = (std::max<std::size_t>(n * sizeof(T), 1) + kPage - 1) / kPage * kPage;
    void* memory = std::aligned_alloc(kPage, bytes);
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  bool operator==(const PageAllocator&) const { return true; }
};
template <class T>
struct Buffers {
  std::vector<T, PageAllocator<T>> send, receive;
};

// Both buffers of `op` at `bytes`, each element `value`; what does not fit in memory is a
// BuffersDoNotFit naming the size.
template <class T>
void allocate(Buffers<T>& b, Op op, std::size_t bytes, std::size_t send_count,
              std::size_t receive_count, T value) {
  try {
    b.send.assign(send_count, value);
    b.receive.assign(receive_count, value);
  } catch (const std::bad_alloc&) {
    throw BuffersDoNotFit(op_name(op), bytes, (send_count + receive_count) * sizeof(T));
  } catch (const std::length_error&) {
    throw BuffersDoNotFit(op_name(op), bytes, (send_count + receive_count) * sizeof(T));
  }
}

// `iterations` of the collective, blocking, under the world's watchdog armed once around the
// loop (nothing added to an iteration's time): a rank that stopped or died during it is named
// once the loop has lasted --comm-timeout, the deadline of the whole loop.
template <class T>
void run_guarded(const comm::World& world, Op op, Buffers<T>& b, int iterations) {
  const std::string what = cat(op_name(op), " of ", b.send.size() * sizeof(T), " bytes");
  world.guarded(what.c_str(), [&] {
    for (int i = 0; i < iterations; ++i) {
      detail::run_once(world, op, b.send.data(), b.send.size(), b.receive.data(), b.receive.size());
    }
  });
}

template <class T>
std::int64_t check(const comm::World& world, Op op, Buffers<T>& b, std::size_t count,
                   const MeasureOptions& options) {
  std::fill(b.receive.begin(), b.receive.end(), static_cast<T>(-1));
  // bcast sends its receive buffer: rank 0's holds the data.
  if (op == Op::kBcast && world.rank() == 0) fill(std::span<T>(b.receive), 0);
  world.barrier();
  run_guarded(world, op, b, 1);
  if (options.corrupt && world.rank() == 0) b.receive[0] += static_cast<T>(1);
  const std::size_t block = count / static_cast<std::size_t>(world.size());
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < b.receive.size(); ++i) {
    double want = 0;
    if (expected(op, world, i, block, want) && b.receive[i] != static_cast<T>(want)) ++wrong;
  }
  return wrong;
}

// As nccl-tests does: warm-up iterations at the largest size before the sweep, so that the first
// size measured does not pay for what MPI sets up at its first large messages (4 MiB measured
// first took 1.7x its time measured after 1 and 2 MiB, with 5 warm-up iterations of its own).
template <class T>
void warm_up_at_largest(const comm::World& world, Op op, std::size_t bytes,
                        const MeasureOptions& options) {
  const auto [send_count, receive_count] =
      buffer_sizes(op, element_count(op, bytes, sizeof(T), world.size()), world.size());
  Buffers<T> b;
  allocate(b, op, bytes, send_count, receive_count, static_cast<T>(0));
  run_guarded(world, op, b, options.warmup_iters);
}

template <class T>
Row measure_size(const comm::World& world, Op op, std::size_t bytes,
                 const MeasureOptions& options) {
  const int n = world.size();
  Row row;
  row.op = op_name(op);
  row.count = element_count(op, bytes, sizeof(T), n);
  row.bytes = row.count * sizeof(T);
  row.type = dtype_name(options.dtype);
  const auto [send_count, receive_count] = buffer_sizes(op, row.count, n);
  Buffers<T> b;
  allocate(b, op, bytes, send_count, receive_count, static_cast<T>(0));
  fill(std::span<T>(b.send), world.rank());
  if (op == Op::kBcast) fill(std::span<T>(b.receive), 0);
  run_guarded(world, op, b, options.warmup_iters);
  world.barrier();
  const auto start = SteadyClock::now();
  run_guarded(world, op, b, options.iters);
  const double seconds = seconds_since(start) / options.iters;
  set_times(row, gather_seconds(world, seconds), bus_factor(op, n));
  if (options.check) {
    std::int64_t wrong = check(world, op, b, row.count, options);
    world.allreduce_sum(std::span<std::int64_t>(&wrong, 1));
    row.wrong = wrong;
  }
  return row;
}

}  // namespace

std::vector<double> gather_seconds(const comm::World& world, double seconds) {
  const auto bits = world.all_gather(std::bit_cast<std::uint64_t>(seconds));
  std::vector<double> values;
  for (const auto b : bits) values.push_back(std::bit_cast<double>(b));
  return values;
}

std::vector<double> slowest_per_iteration(const comm::World& world,
                                          const std::vector<double>& mine) {
  // Doubles travel as their bits, every rank's block in rank order.
  const auto ranks = static_cast<std::size_t>(world.size());
  const std::size_t iters = mine.size();
  const std::size_t block = iters * sizeof(double);
  std::vector<std::uint8_t> raw(block * ranks);
  std::memcpy(raw.data() + block * static_cast<std::size_t>(world.rank()), mine.data(), block);
  world.all_gather_in_place(std::span<std::uint8_t>(raw), block);
  std::vector<double> slowest(iters, 0.0), rank_times(iters);
  for (std::size_t r = 0; r < ranks; ++r) {
    std::memcpy(rank_times.data(), raw.data() + block * r, block);
    for (std::size_t i = 0; i < iters; ++i) slowest[i] = std::max(slowest[i], rank_times[i]);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest;
}

std::vector<Row> measure_collective(const comm::World& world, Op op,
                                    const std::vector<std::size_t>& sizes,
                                    const MeasureOptions& options) {
  MBKIT_CHECK(op != Op::kExchange, "measure_collective() of the exchange");
  std::vector<Row> rows;
  if (!sizes.empty()) {
    const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
    if (options.dtype == Dtype::kFloat) {
      warm_up_at_largest<float>(world, op, largest, options);
    } else {
      warm_up_at_largest<double>(world, op, largest, options);
    }
  }
  for (const std::size_t bytes : sizes) {
    MeasureOptions at_size = options;
    at_size.iters = options.iters_at(bytes);
    rows.push_back(options.dtype == Dtype::kFloat
                       ? measure_size<float>(world, op, bytes, at_size)
                       : measure_size<double>(world, op, bytes, at_size));
  }
  return rows;
}

}  // namespace mbkit::bench
