// Which device a run computes on (`--device cpu|cuda|cuda:N`), and which GPU a rank takes.
// With several ranks on a node and no index, each rank takes the GPU of its local rank, as
// Horovod and DDP scripts do by hand; the launcher tells the local rank in its own variable.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace mbkit::backend {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = -1;  ///< cuda:N; -1 for "cuda": the local rank's GPU
  /// "cpu", "cuda" or "cuda:1", as the option reads.
  std::string text() const;
  bool operator==(const Device&) const = default;
};

/// Parses `--device`; anything else is a usage error naming the flag and the forms it takes.
Device parse_device(std::string_view text);

/// A process's rank among the processes of its node, and the variable that said so.
struct LocalRank {
  int rank = 0;
  std::string variable;
};

using EnvironmentLookup = std::function<const char*(const char*)>;

/// The local rank from Open MPI's, SLURM's, MPICH's or MVAPICH's variable (in that order), or
/// nullopt when no launcher set one (a process started by hand). A variable that is set but is
/// not a whole number is an error naming it.
std::optional<LocalRank> local_rank_from_environment(const EnvironmentLookup& lookup);
std::optional<LocalRank> local_rank_from_environment();

/// The GPU a process uses for `device` (kind cuda) on a node with `gpus` visible GPUs: its
/// index, or else its local rank's (0 without a launcher). No GPU, an index past the last, or
/// more ranks on the node than GPUs is a usage error that says which and how many there are;
/// `visible_devices` (CUDA_VISIBLE_DEVICES, may be null) is quoted when it is set.
int choose_gpu(const Device& device, const std::optional<LocalRank>& local_rank, int gpus,
               const char* visible_devices);

}  // namespace mbkit::backend
