#include "mbkit/comm/world.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

#include "mbkit/util/check.hpp"

namespace mbkit::comm {

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

World::World() : host_(host_name()) {
  if (!launched_by_mpi()) return;
  int initialized = 0;
  MBKIT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    // Only the main thread calls MPI (background threads prepare data).
    MBKIT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    initialized_here_ = true;
  }
  MBKIT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MBKIT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MBKIT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

World::~World() {
  if (initialized_here_) MPI_Finalize();
}

void World::allreduce_sum(std::span<double> values) const {
  if (size_ == 1 || values.empty()) return;
  MBKIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void World::allreduce_sum(std::span<std::int64_t> values) const {
  if (size_ == 1 || values.empty()) return;
  MBKIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
}

void World::barrier() const {
  if (size_ > 1) MBKIT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

}  // namespace mbkit::comm
