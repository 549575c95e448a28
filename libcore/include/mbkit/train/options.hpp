// The options of a training run (mb-train-fmb, mb-train-amb), typed: cli/train_options.hpp
// declares them and parses the ones given as text (straggler profiles, cluster models, ...) where
// they are read; validate() checks them all before any rank starts work. The engine never parses.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/comm/compression.hpp"
#include "mbkit/data/augment.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/optim/schedule.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// A length that is not set (steps, or the planned steps of a run bounded by time only).
inline constexpr std::int64_t kUnlimitedSteps = std::numeric_limits<std::int64_t>::max();

/// Anytime mini-batch (mb-train-amb): a worker computes micro-batches of floor(batch / partitions)
/// samples until the time limit, then sends what it did (mbkit.7, the AMB original).
struct AmbOptions {
  bool enabled = false;
  /// Seconds per step; none with auto_time_limit: a worker's full batch without delays.
  std::optional<double> time_limit;
  bool auto_time_limit = false;
  int partitions = 0;  ///< micro-batches per batch
  /// The original's weight decay, added per micro-batch: batch / micro-batch size times FMB's.
  bool decay_per_micro_batch = false;
};

/// The most rounds --delayed-gradients may delay: every rank keeps that many copies of the
/// parameters.
inline constexpr int kMaxDelayRounds = 64;

/// AMB-DG (mb-train-amb --delayed-gradients, mbkit/train/delayed_gradients.hpp): the workers
/// never wait for the master; round t's gradients are computed at the parameters of update
/// t - delay and applied when they arrive.
struct DelayedGradientsOptions {
  bool enabled = false;
  std::optional<int> delay;  ///< rounds; none with auto_delay
  bool auto_delay = false;   ///< the round trip of the message model over the time limit
};

/// DropCompute (mb-train-fmb --drop-compute, mbkit/train/drop_compute.hpp): a worker computes
/// its batch as micro_batches micro-batches and drops those it would start after the threshold.
struct DropComputeOptions {
  bool enabled = false;
  std::optional<double> threshold;  ///< seconds into the round; none with auto_threshold
  bool auto_threshold = false;
  int micro_batches = 4;
};

/// Dual batch size learning (mb-train-dbsl, mbkit/train/dbsl_plan.hpp): rank 0 is a parameter
/// server that averages in each worker's model; large workers train d_L samples per round at
/// the base batch, small ones fewer at a smaller batch, in the same predicted time.
struct DbslOptions {
  bool enabled = false;
  bool plan_only = false;                ///< --plan: print the plan and exit
  bool json = false;                     ///< --plan --json
  int workers = 0;                       ///< --plan without mpirun: n
  std::int64_t train_samples = 0;        ///< --plan without --data: N
  std::string time_model;                ///< --time-model FILE.h5 (per-rank fits)
  std::string time_model_ab;             ///< --time-model-ab A,B
  bool calibrate = false;                ///< each worker times a sweep of batch sizes and fits
  int base_batch = 0;                    ///< B_L
  double extra_time = 1.0;               ///< k
  int small_workers = 0;                 ///< n_S: the last n_S workers
  std::string update_factor = "linear";  ///< linear, sqrt or none
  bool sync = false;                     ///< all workers' models at once (BSP)
  bool keep_optimizer_state = false;     ///< keep momentum between a worker's rounds
};

/// How --comm allreduce sums (--allreduce, mbkit/train/exchange.hpp): auto (the faster of the
/// two on one host, timed at start with two ranks; else MPI_Allreduce), always shared memory
/// (shm: an error when the ranks span hosts), MPI_Allreduce, or NCCL in GPU memory (nccl: a
/// CUDA --device only; auto chooses it there).
enum class AllreduceVia { kAuto, kSharedMemory, kMpi, kNccl };
/// "auto", "shm", "mpi" or "nccl", as --allreduce takes it.
const char* to_string(AllreduceVia via);

/// --comm: the gradient exchange, ps (rank 0 is the master; --servers: ranks 0 to S - 1) or
/// allreduce (every rank computes). cli/ parses the name once.
enum class CommMode { kPs, kAllreduce };
/// "ps" or "allreduce", as --comm takes it (and the recorded configuration holds it).
const char* to_string(CommMode comm);

/// --clock: wall (real time) or virtual (an emulated cluster, mbkit/train/virtual_clock.hpp).
enum class ClockMode { kWall, kVirtual };
/// "wall" or "virtual", as --clock takes it (and the log and configuration hold it).
const char* to_string(ClockMode clock);

/// The options given as text that need parsing, as the command line gave them: cli/ parses
/// them into TrainOptions' typed fields; the run records the text as given (its configuration).
struct OptionTexts {
  std::string augment;  ///< --augment LIST ("" when not given; bare --augment: crop:4,flip)
  std::string prefetch = "auto";
  std::string allreduce = "auto";
  std::string induce;
  std::string slowdown;
  std::string cpu_quota;
  std::string comm_model;
  std::vector<std::string> compute_model;
  std::string time_limit;
  std::string compress = "none";
  std::string drop_compute;       ///< --drop-compute SECONDS|auto ("" when not given)
  std::string delayed_gradients;  ///< --delayed-gradients TAU|auto ("" when not given)
  std::string local_steps = "1";  ///< --local-steps tau|adacomm
};

struct TrainOptions {
  // Data.
  /// Dataset or shard file (its train split). Distributed: one file that every worker takes a
  /// slice of, a printf pattern of shard files ('sh-%05d-of-%05d.h5': worker index, workers),
  /// or a comma-separated list with one file per worker.
  std::string data;
  std::string test_data;  ///< file whose test split evaluations use (default: data)
  int batch_size = 64;    ///< per worker
  /// --global-batch-size: samples per synchronous step over all workers, split among them
  /// (worker_batch_size); 0: --batch-size per worker.
  std::int64_t global_batch_size = 0;
  data::Augmentation augment;  ///< --augment LIST (none by default)
  bool drop_last = false;
  // Model and optimisation.
  models::ModelConfig model;
  optim::OptimizerConfig optimizer;
  optim::ScheduleConfig schedule;  ///< schedule.lr is the learning rate
  /// How --weight-decay is read: "mean" (wd p added to the mean gradient, once per update) or
  /// "sum" (the AMB original: wd p added to the gradient of the summed loss of every gradient
  /// evaluation, then divided by its samples: wd / B per update for FMB, wd / p for AMB).
  std::string weight_decay_on = "mean";
  double warmup_epochs = 0;  ///< linear warm-up, converted to steps
  /// --lr-scaling: none, linear or sqrt: --lr is the rate of a batch of lr_base_batch samples
  /// and is scaled by (global batch / lr_base_batch) or its square root (Goyal et al.).
  std::string lr_scaling = "none";
  std::int64_t lr_base_batch = 0;  ///< 0: --batch-size (one worker's batch)
  // Length: the run ends at whichever is reached first (at least one must be set).
  double epochs = 0;
  std::int64_t steps = 0;
  double time_budget = 0;  ///< seconds of training
  // Evaluation.
  std::int64_t eval_every = 0;    ///< steps between evaluations (0: only at the end)
  bool eval_every_epoch = false;  ///< also evaluate at the end of every epoch
  std::int64_t test_size = 0;     ///< test samples per evaluation (0: the whole test split)
  /// With test_size: "fixed" (the first test_size test images every time) or "random" (the AMB
  /// original: a fresh random batch of test_size images per evaluation, drawn by rank 0).
  std::string test_sample = "fixed";
  /// The steps' training loss: "workers" (the mean over the samples the workers computed) or
  /// "master" (the AMB original: rank 0 evaluates the updated model on a batch of its own).
  std::string train_loss = "workers";
  int eval_batch_size = 256;
  // The run.
  std::uint64_t seed = 1;
  int threads = 0;
  /// Batches a background thread prepares ahead (0: the computing thread loads each batch
  /// itself); --prefetch auto gives 2, or 0 when the process may run on one core only.
  int prefetch = 2;
  std::string device = "cpu";
  /// --precision: fp32, tf32 or bf16 (a GPU's).
  std::string precision = "fp32";
  std::string log;     ///< metric log file (HDF5)
  bool force = false;  ///< replace an existing log
  double flush_interval = 5.0;
  std::string checkpoint;  ///< checkpoint file, written every checkpoint_every steps and at the end
  std::int64_t checkpoint_every = 0;
  /// Also keep a checkpoint of every epoch's end: NAME-epochNNNN.h5 beside --checkpoint NAME.h5.
  bool checkpoint_every_epoch = false;
  std::string resume;  ///< checkpoint to continue from, or "auto" (--checkpoint if it exists)
  /// Resume although an option that changes the training, or the dataset, differs from the
  /// checkpoint's (train/resume_check.hpp).
  bool resume_anyway = false;
  std::string nan_policy = "stop";  ///< stop or skip
  std::int64_t print_every = 0;  ///< progress lines when stderr is not a terminal (0: every 10 s)
  // Distribution (under mpirun/srun).
  CommMode comm = CommMode::kPs;
  bool async = false;  ///< ps only: the master updates as gradients arrive
  AllreduceVia allreduce = AllreduceVia::kAuto;  ///< allreduce only
  double bucket_mb = 0;  ///< allreduce through MPI: bucket size in MiB (0: one sum)
  int servers = 1;       ///< ps: ranks 0 to servers - 1 serve a shard of the parameters each
  comm::CompressionSpec compression;  ///< --compress: gradients on the wire (sync ps, allreduce)
  int async_min_grads = 1;            ///< gradients per asynchronous update
  /// --async, the AMB original's time rule (--async_master time): each update applies the
  /// gradients that arrived within this many seconds of the master's step start, or the first
  /// one to arrive after it when none did (0: the count rule, async_min_grads).
  double async_master_time_limit = 0;
  /// --async, the original's communication stragglers: each worker->master message is delayed
  /// by std |N(0, 1)| seconds, drawn per (seed, worker, round) (0: none).
  double async_delay_std = 0;
  /// --async, K-async SGD (--k-async K, Dutta et al. 2018): each update takes K gradients
  /// from K distinct workers (mbkit/train/async_rule.hpp). 0: off.
  int k_async = 0;
  /// --async, stale synchronous parallel (--staleness-bound s, Ho et al. 2013): no worker's
  /// clock runs more than s rounds ahead of the slowest's (async_rule.hpp). -1: off.
  int staleness_bound = -1;
  /// --k-batch-async K: K-batch-async SGD by name, --async --async-min-grads K (the command
  /// line sets those two from it). 0: not given.
  int k_batch_async = 0;
  double comm_timeout = 60;         ///< seconds a rank waits for another before the job fails
  std::string comm_wait = "yield";  ///< yield (sleep while waiting) or spin
  std::optional<emulation::StragglerProfile> induce;  ///< induced straggler delays
  /// --induce trace:FILE: the replayed delays (read and checked at start), x trace_scale.
  std::shared_ptr<const emulation::DelayTrace> induce_trace;
  double trace_scale = 1;         ///< --trace-scale: multiplies every value of the trace
  emulation::Slowdown slowdown;   ///< persistently slower workers
  emulation::CpuQuota cpu_quota;  ///< --cpu-quota: workers under a CFS quota (virtual clock)
  /// --cpu-quota-tick: the scheduler's tick of the quota's kernel model (0: checked continuously)
  double cpu_quota_tick = 0;
  bool worker_log = false;  ///< a console line per worker per step
  /// --worker-table: what the log's /workers holds (all, summary, sample:K; "": all up to 64
  /// workers, summary above; mbkit/metrics/worker_table.hpp).
  std::string worker_table;
  // Cluster emulation (mbkit/train/virtual_clock.hpp).
  ClockMode clock = ClockMode::kWall;
  std::optional<CommModel> comm_model;  ///< virtual: none = measured at start
  ComputeModels compute_model;          ///< virtual: empty = CPU time
  /// --emulate N: N workers (and the ps master) inside this one process, on the virtual clock
  /// (mbkit/train/emulated_workers.hpp); 0: a rank per worker.
  int emulate = 0;
  // Straggler methods that drop late gradients (mbkit/train/step_selection.hpp): sync ps, on
  // either clock (the wall clock's: mbkit/train/selecting_exchange.hpp). 0: off.
  int backup_workers = 0;  ///< --backup-workers b: each step uses the first W - b gradients
  int k_sync = 0;          ///< --k-sync K: each step uses the first K gradients
  /// --gradient-coding s: groups of s + 1 workers on the same data; each group's first is used.
  int gradient_coding = 0;
  /// --local-steps tau: local SGD (mbkit/train/local_sgd.hpp), each worker takes tau SGD steps
  /// on its own model, then the models are averaged. 1: every step's gradients are averaged
  /// (plain FMB).
  int local_steps = 1;
  /// --local-steps adacomm: AdaComm (Wang & Joshi 2018) chooses tau, from --adacomm-tau0, anew
  /// every --adacomm-interval seconds of the run's clock (local_steps is then the first tau).
  bool adacomm = false;
  int adacomm_tau0 = 20;
  double adacomm_interval = 60;
  /// --k-batch-sync K (mbkit/train/k_batch_sync.hpp): each step ends when the workers have
  /// finished K batches between them, computed back to back from the step's parameters. 0: off.
  int k_batch_sync = 0;
  AmbOptions amb;
  DropComputeOptions drop_compute;
  DelayedGradientsOptions delayed_gradients;
  DbslOptions dbsl;
  OptionTexts given;  ///< the parsed options' text as given, for the recorded configuration
  /// --cuda-graphs: on or off; empty: on where the backend records them (CUDA), else off.
  std::string cuda_graphs;
};

/// The batch of worker `worker` of `workers`: --batch-size, or --global-batch-size split as
/// evenly as possible (the first global % workers workers take one sample more).
int worker_batch_size(const TrainOptions& options, int workers, int worker);
/// Gradients per asynchronous update: --k-async K's K, else --async-min-grads.
int async_gradients_per_update(const TrainOptions& options);
/// Micro-batches per batch of an anytime round: AMB's --partitions, DropCompute's
/// --micro-batches (neither: 1).
int anytime_partitions(const TrainOptions& options);
/// The samples of a synchronous step over all workers.
std::int64_t global_batch_size(const TrainOptions& options, int workers);
/// The factor --lr-scaling applies to --lr and the schedule for `workers` workers (1 for none).
double lr_scale_factor(const TrainOptions& options, int workers);
/// The per-worker checks of --global-batch-size and --lr-scaling once the workers are known.
void validate_batches(const TrainOptions& options, int workers);

/// --allreduce: auto, shm or mpi; a usage error naming the flag otherwise.
AllreduceVia parse_allreduce_via(const std::string& option);
/// --prefetch: batches loaded ahead by a thread ("auto": 2 when the process may use more than
/// one core, else 0; a count from 0 to 64).
int prefetch_depth(const std::string& option);
/// --drop-compute: positive seconds, or "auto"; "" leaves DropCompute off.
void parse_drop_compute(const std::string& option, DropComputeOptions& drop);
/// --delayed-gradients: rounds (0 or more), or "auto"; "" leaves AMB-DG off.
void parse_delayed_gradients(const std::string& option, DelayedGradientsOptions& delayed);
/// --local-steps tau|adacomm into local_steps and adacomm (a usage error naming the flag).
void parse_local_steps(TrainOptions& o);
/// Whether the run is local SGD (--local-steps above 1, or adacomm).
inline bool local_sgd(const TrainOptions& o) {
  return o.local_steps > 1 || o.adacomm;
}
/// --time-limit: positive seconds, or "auto" (sets auto_time_limit).
void parse_time_limit(const std::string& option, AmbOptions& amb);
/// Parses every text of `options.given` into its typed field: a usage error names the flag.
void parse_option_texts(TrainOptions& options);

/// Checks every option on its own and against the others; a usage error names the flag.
void validate(const TrainOptions& options);

/// The DBSL options on their own and against the others (part of validate()).
void validate_dbsl(const TrainOptions& options);

/// "mb-train-amb", "mb-train-dbsl" or "mb-train-fmb".
const char* tool_name(const TrainOptions& options);

}  // namespace mbkit::train
