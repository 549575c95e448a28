// Who does what in a training run: the one place that decides which ranks are workers, what
// data each reads, and that every rank runs the same training.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/options.hpp"

namespace mbkit::train {

// Who is a worker, in one place (Role, the exchanges' messages): under ps ranks 0 to servers - 1
// are the servers (rank 0 the master) and worker w is rank w + servers; otherwise (servers 0)
// worker w is rank w. A bool `parameter_server` reads as one server.
constexpr int worker_rank(int worker, int servers) {
  return worker + servers;
}
constexpr int worker_of_rank(int rank, int servers) {
  return rank - servers;
}
constexpr int worker_count(int world_size, int servers) {
  return world_size - servers;
}

/// Who does what in this run.
struct Role {
  bool distributed = false;
  bool parameter_server = false;  ///< ps with at least 2 ranks
  bool async = false;
  bool master = false;   ///< rank 0 of ps: computes no gradients
  int servers = 0;       ///< ps: the ranks that serve (--servers), 0 otherwise
  bool server = false;   ///< one of them: it keeps and updates a shard of the parameters
  bool computes = true;  ///< a worker
  int worker = 0;        ///< worker index of this rank
  int workers = 1;
  std::string comm = "local";  ///< local, ps, ps-async or allreduce (logs and checkpoints)
  bool shared_memory = false;  ///< allreduce sums through shared memory (--allreduce)
  /// --allreduce auto on one host: shared_memory is decided by timing both sums at start.
  bool time_allreduce = false;
  /// allreduce sums the gradients in GPU memory with NCCL (allreduce_with_nccl).
  bool nccl = false;
  /// --emulate: the workers this process hosts (mbkit/train/emulated_workers.hpp); it is then
  /// rank 0 of an emulated run of `workers` workers (and the ps master), computing nothing
  /// itself, and `distributed` holds although the world has one rank.
  int emulated = 0;
  /// --emulate under mpirun -n R: this rank hosts workers emulated_first to emulated_first +
  /// emulated_hosted - 1 (emulated_share); every rank plays rank 0 of the emulated run (each
  /// updates from the same combined sum), rank 0 alone logs and writes checkpoints.
  bool shares = false;
  int emulated_first = 0;
  int emulated_hosted = 0;

  /// Rank of worker `index`.
  int rank_of(int index) const { return worker_rank(index, servers); }
  /// The ranks of the run: the world's, or the emulated run's (workers and the master).
  int ranks(const comm::World& world) const {
    return emulated > 0 ? workers + servers : world.size();
  }
};

/// --emulate N under mpirun -n R: rank r's share of the N workers, as (first, count): contiguous,
/// in rank order, the first N mod R ranks one more than the others (N / R).
std::pair<int, int> emulated_share(int workers, int ranks, int rank);
/// The rank whose share (emulated_share) holds worker `worker`.
int emulated_host(int workers, int ranks, int worker);

/// Whether --comm allreduce sums with NCCL: --allreduce nccl (with one rank too: the sum then
/// runs on a one-rank communicator, a check of the path), or auto on a CUDA --device with
/// several ranks and no --compress (whose encoded gradients travel through MPI). nccl with a
/// --device that is not CUDA, or with --compress, is a usage error.
bool allreduce_with_nccl(const TrainOptions& options, bool distributed);

/// This rank's role under `options` (usage errors for impossible combinations).
Role decide_role(const TrainOptions& options, const comm::World& world);

/// The file worker `worker` of `workers` trains on, and whether it takes a slice of it.
struct WorkerData {
  std::string path;
  int slice_index = 0;
  int slice_count = 1;
};
/// --data: one file every worker takes a slice of, a printf pattern of shard files (worker
/// index, then workers), or a comma-separated list with a file per worker.
WorkerData worker_data(const std::string& data, int worker, int workers);

/// "0 on a; 1-3 on b (rank 0 is the master)": ranks grouped by host.
std::string describe_hosts(const std::vector<std::string>& hosts, const Role& role);

/// Every rank must run the same training: the ranks' `lines` (their settings) are compared and
/// the first difference is a usage error naming the ranks on each side (collective).
void check_agreement(const comm::World& world, const std::vector<std::string>& lines);

}  // namespace mbkit::train
