// The processes of a run. MPI is initialised only when the process was started by an MPI
// launcher (mpirun, or srun with PMIx): a tool run on its own starts at once and needs no MPI
// runtime, and the same binary runs unchanged under mpirun.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace mbkit::comm {

/// This machine's host name.
std::string host_name();

/// True when an MPI launcher started this process (Open MPI, PMIx or PMI variables are set).
bool launched_by_mpi();

class World {
 public:
  /// Initialises MPI when launched by MPI; errors of MPI calls are then reported as errors
  /// naming the call (MPI_ERRORS_RETURN) instead of aborting.
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }
  /// This host's name.
  const std::string& host() const { return host_; }

  /// Element-wise sums over all ranks, in place (no-ops on a single process).
  void allreduce_sum(std::span<double> values) const;
  void allreduce_sum(std::span<std::int64_t> values) const;
  void barrier() const;

 private:
  bool initialized_here_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
};

}  // namespace mbkit::comm
