// The plain collectives of mb-bench-bandwidth: out-of-place MPI calls (nccl-tests' default),
// rank 0 the root, values that sum exactly in float so the check compares bits.
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>

#include "mbkit/bench/measure.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::bench {
namespace {

// Small integers: every sum over up to 2^16 ranks is exact in float, so a right result is
// bit-for-bit the expected one. Rank r's element i.
double value(int rank, std::size_t i) {
  return static_cast<double>(rank + 1 + (i % 13));
}

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

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

// The element counts of the send and receive buffers of one rank.
std::pair<std::size_t, std::size_t> buffer_sizes(Op op, std::size_t count, int ranks) {
  const std::size_t block = count / static_cast<std::size_t>(ranks);
  switch (op) {
    case Op::kGather:
    case Op::kAllgather:
      return {block, count};
    case Op::kReduceScatter:
      return {count, block};
    default:
      return {count, count};
  }
}

template <class T>
void fill(std::span<T> send, int rank) {
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>(value(rank, i));
}

// One iteration. A single process has no MPI: each collective is then the copy it is on one
// rank.
template <class T>
void run_once(const comm::World& world, Op op, Buffers<T>& b) {
  const int count = static_cast<int>(b.send.size());
  if (!world.distributed()) {
    if (op != Op::kBcast) std::copy(b.send.begin(), b.send.end(), b.receive.begin());
    return;
  }
  const MPI_Datatype type = mpi_type<T>();
  const int root = 0;
  switch (op) {
    case Op::kAllreduce:
      MBKIT_MPI_CHECK(
          MPI_Allreduce(b.send.data(), b.receive.data(), count, type, MPI_SUM, MPI_COMM_WORLD));
      break;
    case Op::kReduce:
      MBKIT_MPI_CHECK(
          MPI_Reduce(b.send.data(), b.receive.data(), count, type, MPI_SUM, root, MPI_COMM_WORLD));
      break;
    case Op::kBcast:
      MBKIT_MPI_CHECK(MPI_Bcast(b.receive.data(), count, type, root, MPI_COMM_WORLD));
      break;
    case Op::kReduceBcast:
      // The AMB original's step: comm.Reduce(arr + rank, arr, root=0), then comm.Bcast(arr).
      MBKIT_MPI_CHECK(
          MPI_Reduce(b.send.data(), b.receive.data(), count, type, MPI_SUM, root, MPI_COMM_WORLD));
      MBKIT_MPI_CHECK(MPI_Bcast(b.receive.data(), count, type, root, MPI_COMM_WORLD));
      break;
    case Op::kGather:
      MBKIT_MPI_CHECK(MPI_Gather(b.send.data(), count, type, b.receive.data(), count, type, root,
                                 MPI_COMM_WORLD));
      break;
    case Op::kAllgather:
      MBKIT_MPI_CHECK(
          MPI_Allgather(b.send.data(), count, type, b.receive.data(), count, type, MPI_COMM_WORLD));
      break;
    case Op::kReduceScatter:
      MBKIT_MPI_CHECK(MPI_Reduce_scatter_block(b.send.data(), b.receive.data(),
                                               static_cast<int>(b.receive.size()), type, MPI_SUM,
                                               MPI_COMM_WORLD));
      break;
    case Op::kExchange:
      fail("the exchange is not a plain collective");
  }
}

// What element i of this rank's receive buffer must hold after one iteration (nothing to
// check: false).
bool expected(Op op, const comm::World& world, std::size_t i, std::size_t block, double& out) {
  const int n = world.size();
  const auto sum = [&](std::size_t index) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += value(r, index);
    return s;
  };
  const bool root = world.rank() == 0;
  switch (op) {
    case Op::kAllreduce:
    case Op::kReduceBcast:
      out = sum(i);
      return true;
    case Op::kReduce:
      out = sum(i);
      return root;
    case Op::kBcast:
      out = value(0, i);
      return true;
    case Op::kGather:
    case Op::kAllgather:
      out = value(static_cast<int>(i / block), i % block);
      return op == Op::kAllgather || root;
    case Op::kReduceScatter:
      out = sum(static_cast<std::size_t>(world.rank()) * block + i);
      return true;
    case Op::kExchange:
      break;
  }
  return false;
}

template <class T>
std::int64_t check(const comm::World& world, Op op, Buffers<T>& b, std::size_t count,
                   const MeasureOptions& options) {
  std::fill(b.receive.begin(), b.receive.end(), static_cast<T>(-1));
  // bcast sends its receive buffer: rank 0's holds the data.
  if (op == Op::kBcast && world.rank() == 0) fill(std::span<T>(b.receive), 0);
  world.barrier();
  run_once(world, op, b);
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
  b.send.assign(send_count, static_cast<T>(0));
  b.receive.assign(receive_count, static_cast<T>(0));
  for (int i = 0; i < options.warmup_iters; ++i) run_once(world, op, b);
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
  b.send.resize(send_count);
  b.receive.resize(receive_count);
  fill(std::span<T>(b.send), world.rank());
  if (op == Op::kBcast) fill(std::span<T>(b.receive), 0);
  for (int i = 0; i < options.warmup_iters; ++i) run_once(world, op, b);
  world.barrier();
  const auto start = SteadyClock::now();
  for (int i = 0; i < options.iters; ++i) run_once(world, op, b);
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
