// `--allreduce auto` on one host: which sum is faster is a property of the machine, not of the
// code (measured on one 2-core VM, the shared-memory sum took 0.6 of MPI_Allreduce's time while
// traffic between its cores was fast and 0.85-1.2 while it was slow; on another MPI_Allreduce
// was twice as fast). So auto times both on the run's own buffer size at start and keeps the
// faster one: a few milliseconds for a small model.
#pragma once

#include <cstddef>

#include "mbkit/comm/world.hpp"

namespace mbkit::comm {

struct AllreduceTrial {
  double shared_memory_seconds = 0;  ///< median over rounds of the ranks' mean time of one sum
  double mpi_seconds = 0;
  int rounds = 0;
  /// The choice: the shared-memory sum only when it was strictly faster.
  bool shared_memory() const { return shared_memory_seconds < mpi_seconds; }
};

/// Times SharedSum against an in-place MPI_Allreduce of `floats` floats, taking turns (the
/// first of each pair alternates), after one untimed sum of each. Collective: every rank calls
/// it with the same `floats`, all ranks on one host (SharedSum::possible). Every rank returns
/// rank 0's figures, so every rank makes the same choice.
AllreduceTrial time_allreduce_sums(const World& world, std::size_t floats, int rounds = 5);

}  // namespace mbkit::comm
