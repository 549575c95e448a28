// mb-train-fmb: fixed mini-batch training, on one process or data-parallel under mpirun/srun
// (exchanges in mbkit/train/exchange.hpp), the library side of the tool: main() parses options
// into TrainOptions and calls run_train_fmb.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mbkit/models/zoo.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/optim/schedule.hpp"

namespace mbkit::tools::train {

/// Anytime mini-batch (mb-train-amb): a worker computes micro-batches of floor(batch / partitions)
/// samples until the time limit, then sends what it did (mbkit.7, the AMB original).
struct AmbOptions {
  bool enabled = false;
  std::string time_limit;  ///< seconds, or "auto": a worker's full batch without delays
  int partitions = 0;      ///< micro-batches per batch
  /// The original's weight decay, added per micro-batch: batch / micro-batch size times FMB's.
  bool decay_per_micro_batch = false;
};

struct TrainOptions {
  // Data.
  /// Dataset or shard file (its train split). Distributed: one file that every worker takes a
  /// slice of, a printf pattern of shard files ('sh-%05d-of-%05d.h5': worker index, workers),
  /// or a comma-separated list with one file per worker.
  std::string data;
  std::string test_data;  ///< file whose test split evaluations use (default: data)
  int batch_size = 64;    ///< per worker
  bool augment = false;   ///< random crop (4 pixels of padding) and horizontal flip
  bool drop_last = false;
  // Model and optimisation.
  models::ModelConfig model;
  optim::OptimizerConfig optimizer;
  optim::ScheduleConfig schedule;  ///< schedule.lr is the learning rate
  double warmup_epochs = 0;        ///< linear warm-up, converted to steps
  // Length: the run ends at whichever is reached first (at least one must be set).
  double epochs = 0;
  std::int64_t steps = 0;
  double time_budget = 0;  ///< seconds of training
  // Evaluation.
  std::int64_t eval_every = 0;  ///< steps between evaluations (0: only at the end)
  std::int64_t test_size = 0;   ///< test samples per evaluation (0: the whole test split)
  int eval_batch_size = 256;
  // The run.
  std::uint64_t seed = 1;
  int threads = 0;
  /// Batches a background thread prepares ahead: "auto" (2, or 0 when the process may run on
  /// one core only) or a count (0: the computing thread loads each batch itself).
  std::string prefetch = "auto";
  std::string device = "cpu";
  std::string log;     ///< metric log file (HDF5)
  bool force = false;  ///< replace an existing log
  double flush_interval = 5.0;
  std::string checkpoint;  ///< checkpoint file, written every checkpoint_every steps and at the end
  std::int64_t checkpoint_every = 0;
  std::string resume;  ///< checkpoint to continue from, or "auto" (--checkpoint if it exists)
  std::string nan_policy = "stop";  ///< stop or skip
  std::int64_t print_every = 0;  ///< progress lines when stderr is not a terminal (0: every 10 s)
  // Distribution (under mpirun/srun).
  std::string comm = "ps";          ///< ps (rank 0 is the master) or allreduce
  bool async = false;               ///< ps only: the master updates as gradients arrive
  std::string allreduce = "auto";   ///< allreduce only: auto, shm (shared memory) or mpi
  double bucket_mb = 0;             ///< allreduce through MPI: bucket size in MiB (0: one sum)
  int async_min_grads = 1;          ///< gradients per asynchronous update
  double comm_timeout = 60;         ///< seconds a rank waits for another before the job fails
  std::string comm_wait = "yield";  ///< yield (sleep while waiting) or spin
  std::string induce;               ///< straggler profile: niagara, cedar or MEAN:STD:WEIGHT,...
  std::string slowdown;             ///< RANK=FACTOR,...: persistently slower workers
  bool worker_log = false;          ///< a console line per worker per step
  // Cluster emulation (mbkit/train/virtual_clock.hpp).
  std::string clock = "wall";              ///< wall or virtual
  std::string comm_model;                  ///< virtual: "ALPHA,BETA" (empty: measured at start)
  std::vector<std::string> compute_model;  ///< virtual: "[RANKS=]A,B" entries (empty: CPU time)
  AmbOptions amb;
};

/// Runs the training; returns the exit status: 0 when the run completed, 6 when a signal stopped
/// it after its state was saved (130/143 when there was no --checkpoint to save it to).
int run_train_fmb(const TrainOptions& options);
/// The same with options.amb.enabled set: anytime mini-batch training (mb-train-amb).
int run_train_amb(TrainOptions options);

}  // namespace mbkit::tools::train
