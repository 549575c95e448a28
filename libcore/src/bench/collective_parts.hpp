// The parts of mb-bench-bandwidth's plain collectives that the host buffers (collectives.cpp)
// and the GPU buffers staged through the host or summed by NCCL (device_collectives.cpp) share:
// the values each rank sends, the buffers' sizes, one MPI iteration, and the expected result.
// Not installed.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::bench::detail {

// Small integers: every sum over up to 2^16 ranks is exact in float, so a right result is
// bit-for-bit the expected one. Rank r's element i.
inline double value(int rank, std::size_t i) {
  return static_cast<double>(rank + 1 + (i % 13));
}

template <class T>
MPI_Datatype mpi_type();
template <>
inline MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

// The element counts of the send and receive buffers of one rank.
inline std::pair<std::size_t, std::size_t> buffer_sizes(Op op, std::size_t count, int ranks) {
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

// One iteration on host buffers of send_count and receive_count elements. A single process has
// no MPI: each collective is then the copy it is on one rank.
template <class T>
void run_once(const comm::World& world, Op op, T* send, std::size_t send_count, T* receive,
              std::size_t receive_count) {
  const int count = static_cast<int>(send_count);
  if (!world.distributed()) {
    if (op != Op::kBcast) std::copy(send, send + send_count, receive);
    return;
  }
  const MPI_Datatype type = mpi_type<T>();
  const int root = 0;
  switch (op) {
    case Op::kAllreduce:
      MBKIT_MPI_CHECK(MPI_Allreduce(send, receive, count, type, MPI_SUM, MPI_COMM_WORLD));
      break;
    case Op::kReduce:
      MBKIT_MPI_CHECK(MPI_Reduce(send, receive, count, type, MPI_SUM, root, MPI_COMM_WORLD));
      break;
    case Op::kBcast:
      MBKIT_MPI_CHECK(MPI_Bcast(receive, count, type, root, MPI_COMM_WORLD));
      break;
    case Op::kReduceBcast:
      // The AMB original's step: comm.Reduce(arr + rank, arr, root=0), then comm.Bcast(arr).
      MBKIT_MPI_CHECK(MPI_Reduce(send, receive, count, type, MPI_SUM, root, MPI_COMM_WORLD));
      MBKIT_MPI_CHECK(MPI_Bcast(receive, count, type, root, MPI_COMM_WORLD));
      break;
    case Op::kGather:
      MBKIT_MPI_CHECK(MPI_Gather(send, count, type, receive, count, type, root, MPI_COMM_WORLD));
      break;
    case Op::kAllgather:
      MBKIT_MPI_CHECK(MPI_Allgather(send, count, type, receive, count, type, MPI_COMM_WORLD));
      break;
    case Op::kReduceScatter:
      MBKIT_MPI_CHECK(MPI_Reduce_scatter_block(send, receive, static_cast<int>(receive_count), type,
                                               MPI_SUM, MPI_COMM_WORLD));
      break;
    case Op::kExchange:
      fail("the exchange is not a plain collective");
  }
}

// What element i of this rank's receive buffer must hold after one iteration (nothing to
// check: false).
inline bool expected(Op op, const comm::World& world, std::size_t i, std::size_t block,
                     double& out) {
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

}  // namespace mbkit::bench::detail
