// One training run of mb-train-fmb or mb-train-amb: the engine the trainers share. Its pieces:
//
//   set-up (training_run_setup.cpp): roles (roles.hpp), data, model, optimizer, the run's
//     length, cluster emulation, AMB's time limit, resume, the metric log and the start table;
//   the worker round (worker_round.hpp): what a worker computes for a step (a fixed batch, or
//     micro-batches until a deadline);
//   the combining step (exchange.hpp): the gradients summed over ps or allreduce, or taken as
//     they arrive by the asynchronous master;
//   the clock (run_clock.hpp): wall or virtual;
//   the loops: one server loop and one worker loop (training_run_loops.cpp) over a method's
//     policies (loop_policies.hpp: the synchronous step's in training_run_sync_step.cpp, chosen
//     in training_run_sync.cpp; the asynchronous master's and worker's in
//     training_run_async.cpp, DBSL's in training_run_dbsl.cpp, the wall clock's selection and
//     K-batch-sync's in training_run_selection.cpp, AMB-DG's on the wall clock in
//     training_run_delayed.cpp; local SGD's in training_run_local_sgd.cpp); the end of the
//     run; rank 0's records of each step (training_run_records.cpp).
// libcore/src/train/README.md says how a new trainer plugs in.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/comm/allreduce_trial.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/optim/schedule.hpp"
#include "mbkit/train/dbsl_exchange.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/delayed_gradients.hpp"
#include "mbkit/train/describe.hpp"
#include "mbkit/train/emulated_workers.hpp"
#include "mbkit/train/evaluate.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/k_batch_sync.hpp"
#include "mbkit/train/loop_policies.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/progress.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/train/run_clock.hpp"
#include "mbkit/train/step_selection.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/train/worker_round.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/signals.hpp"

namespace mbkit::train {

struct LocalSgdLoop;
class EmulatedAsyncRounds;

class TrainingRun {
 public:
  /// Sets the run up on this rank (collective under mpirun): everything before the first step.
  /// `command_line` is recorded in the metric log.
  TrainingRun(const TrainOptions& options, comm::World& world, std::string command_line);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  /// Trains to the end; returns the exit status (0 done, 6 stopped by a signal with the state
  /// saved, 128 + signal without a checkpoint; diverging throws on rank 0).
  int train();

 private:
  /// The run's state a checkpoint carries over (rank 0 reads it, every rank gets it).
  struct ResumeHeader {
    double resumed = 0;
    double step = 0;
    double elapsed = 0;
    double epoch_progress = 0;
    double workers = 1;
    double same_comm = 0;
    double optimizer_steps = 0;
    double samples_seen = 0;
    double wall_elapsed = 0;
  };

  // Set-up (training_run_setup.cpp), in this order.
  void open_data();
  void open_test_data();
  void build_model();
  /// The run's model on `backend`, initialised from the seed (build_model's, and --emulate's
  /// worker threads' networks).
  std::unique_ptr<nn::Network> make_network(nn::Backend& backend) const;
  void size_epoch();
  void check_ranks_agree() const;
  void set_up_emulation();
  double expected_slowest_round() const;
  /// DBSL: the plan (each worker's batch and samples per round), the update factors, and the
  /// workers' loaders at their batch (training_run_dbsl.cpp).
  void plan_dbsl();
  /// --calibrate: every worker times batches of B_L/8 to B_L on itself and fits t(x) = a x + b;
  /// returns the models of all workers and their fits' r^2 (collective).
  std::vector<TimeModel> calibrate_time_models(std::vector<double>& r_squared);
  /// Seconds of a training batch of `size` on this worker (forward, backward, the update's
  /// share left out), times its --slowdown: the median of three after a warm-up, on random
  /// inputs, the model's state put back; the compute model's cost when there is one.
  double time_batch(int size);
  void decide_time_limit();
  /// --drop-compute auto: the threshold from the workers' full batches (by worker).
  void choose_drop_compute_threshold(const std::vector<double>& full_batches);
  double measure_full_batch();
  // AMB-DG (training_run_delayed.cpp): the delay, the versions and the timeline.
  void set_up_delayed_gradients();
  /// Rank 0 on resume: the checkpoint's versions and timeline.
  void restore_delayed(const Checkpoint& checkpoint, const std::string& path);
  /// Every rank gets rank 0's versions, and under shares its timeline (collective).
  void share_delayed_versions();
  /// Keeps the step's version; where a round computes here, puts its version's parameters in
  /// the network until end_delayed_round() puts the newest back.
  void begin_delayed_round();
  void end_delayed_round();
  /// AMB-DG on the wall clock under mpirun (delayed_exchange.hpp): the workers compute their
  /// rounds back to back, the master updates as the sums come (the server and worker loops'
  /// policies, made after the synchronous start).
  bool delays_on_wall_clock() const;
  class DelayedServerPolicy;
  class DelayedWorkerPolicy;
  std::unique_ptr<ServerPolicy> make_delayed_server();
  std::unique_ptr<WorkerPolicy> make_delayed_worker();
  void resume();
  void resume_server_shards();
  /// --cpu-quota: the workers' budgets, [rank, time, period, spent] a worker in rank order,
  /// gathered from every rank under shares (collective there).
  std::vector<double> quota_budgets();
  /// --cpu-quota's totals of the budgets this process emulates, for the end-of-run line: "rank
  /// 1: 0.61 s of CPU charged, stopped 0.39 s (120 times)"; "" when none.
  std::string quota_totals() const;
  /// Puts the resumed budgets into this process's rounds, once they are made.
  void restore_quota_budgets();
  void plan_length();
  void open_log();
  void print_start_table() const;
  void print_dbsl_rows() const;

  // Rank 0's records and the step's bookkeeping (training_run_records.cpp).
  double epoch_at(std::int64_t step) const;
  /// What the run settled at start, for the configuration its log and checkpoints record.
  RunFacts run_facts() const;
  /// Writes a checkpoint (to `path`; empty: --checkpoint) on rank 0; with several servers
  /// every server calls it (they send their shards of the optimizer state to rank 0 first).
  void checkpoint_now(double elapsed, const std::string& path = "");
  /// Rank 0 writes the checkpoint; `optimizer_state` (the servers' shards put together) replaces
  /// its own optimizer state when not empty.
  void save_checkpoint_to(const std::string& path, double elapsed,
                          const std::vector<std::vector<float>>& optimizer_state);
  /// Rank 0 at the end of an epoch: the summary line.
  void end_epoch(double elapsed);
  void run_evaluation(double elapsed);
  void record_step(const CombinedStep& combined, double step_time, double lr);
  /// --train-loss master: loss and accuracy of the current model on rank 0's batch of the step.
  std::pair<double, double> master_batch_loss();
  /// The metric log could not be written (a full disk): the log is dropped, the state saved in
  /// --checkpoint when there is one, and the error rethrown saying so.
  [[noreturn]] void log_write_failed(const Error& error, double elapsed);
  void record_step_rows(const CombinedStep& combined, double step_time, double lr, double elapsed,
                        double loss, double accuracy);
  /// The nan policy: kContinue to update, -1 to skip the update, kDiverged to stop.
  int accept_update(double loss);
  void after_step(double elapsed);
  int rank0_stop() const;
  void worker_line(std::int64_t at_step, const WorkerReport& report) const;

  // The synchronous steps' set-up and first verdict (training_run_sync.cpp).
  void run_sync();
  // Local SGD (--local-steps, training_run_local_sgd.cpp, mbkit/train/local_sgd.hpp): its
  // set-up, then its step as policies of the server and worker loops (what every rank of a
  // step runs alike, a rank that combines the reports, a ps worker).
  void run_local_sgd();
  class LocalSgdStep;
  class LocalSgdServerPolicy;
  class LocalSgdWorkerPolicy;
  /// Whether the step that makes `done` steps ends with an averaging (after its verdict): a
  /// period's end, or before an evaluation, a checkpoint (after a number of steps or an epoch),
  /// the planned end or a stop.
  bool averages_after(const LocalSgdLoop& loop, std::int64_t done, int verdict) const;
  /// --local-steps adacomm: after each step, the period's losses; at an averaging past the
  /// interval's end, rank 0's new tau for every rank.
  void adapt_period(LocalSgdLoop& loop, const CombinedStep& combined, bool averaged);
  /// A worker's own SGD step, on `net` with `optimizer` (an emulated worker's lane's), on its
  /// gradient of its batch of `batch` (the report's samples may be fewer: the gradient is
  /// rescaled to their mean).
  void local_update(nn::Network& net, optim::Optimizer& optimizer, double lr, WorkerReport& report,
                    std::int64_t batch) const;
  /// Step `step`'s models averaged: every worker's (ps: at the master, then distributed).
  void average_models(LocalSgdLoop& loop, std::int64_t step);
  /// The first verdict of a synchronous run (ps: the master's; allreduce: rank 0's).
  int first_verdict(SyncExchange& exchange);
  /// --emulate under mpirun (Role::shares): the ranks' sums of their hosted workers (the
  /// step's gradients, or local SGD's reports and models) added in rank order on rank 0 into
  /// `sum`, which every rank then holds.
  void combine_shares(std::span<float> sum);
  /// --emulate with a selection that drops gradients: every emulated worker's arrival this
  /// step, predicted by the rank that hosts it and, under mpirun, gathered from every rank, so
  /// that every rank makes the one-process run's selection.
  std::vector<double> emulated_arrivals();
  /// --emulate: `per_worker` values of each hosted worker, in worker order, to every worker's,
  /// in worker order (under mpirun, all-gathered from the ranks' shares; else as they are).
  std::vector<double> gather_shares(std::vector<double> hosted, std::size_t per_worker) const;
  /// --emulate under mpirun: rank 0's verdict and update time, on every rank (each updates
  /// from the same sum; the step's end and its virtual time are rank 0's).
  int share_verdict(int verdict, double& update_time);
  // The synchronous step as policies of the server and worker loops
  // (training_run_sync_step.cpp): what every rank of a step runs alike (SyncStep), a rank that
  // updates (the ps master and servers, every allreduce rank, the emulating process) and a ps
  // worker.
  class SyncStep;
  class SyncServerPolicy;
  class SyncWorkerPolicy;
  /// The steps to the end over those policies. `gradients`: the host memory the exchange sums
  /// (the gradient buffer itself on a host-accessible backend, else a staged copy), `tail`
  /// right after it.
  void run_sync_steps(SyncExchange& exchange, std::span<float> gradients, std::span<float> tail);
  /// ps: the master's parameters and state to the workers, through host views.
  int distribute(SyncExchange& exchange, int stop);
  // The straggler methods' selection on the wall clock (training_run_selection.cpp,
  // mbkit/train/selecting_exchange.hpp): a rank per worker, gradients taken as they arrive.
  bool selects_on_wall_clock() const;
  /// The wall-clock selection's late rounds stop between micro-batches (training_run_selection).
  bool abandons_late_rounds() const;
  /// Whether the master (rank 0) evaluates the whole test split alone: the workers are not
  /// in step with it (asynchronous ps, the wall clock's selection and AMB-DG).
  bool master_evaluates_alone() const {
    return role_.async || selects_on_wall_clock() || delays_on_wall_clock();
  }
  // The master's and the workers' policies of the server and worker loops, made after the
  // synchronous start (--k-batch-sync's worker: batches back to back, sent one by one, at the
  // newest parameters that came between them).
  class SelectingServerPolicy;
  class SelectingWorkerPolicy;
  class KBatchWorkerPolicy;
  std::unique_ptr<ServerPolicy> make_selecting_server();
  std::unique_ptr<WorkerPolicy> make_selecting_worker();
  // The one server loop and the one worker loop (training_run_loops.cpp), over the policies
  // of the method (loop_policies.hpp), each a class nested here for the run's pieces.
  void run_server(ServerPolicy& policy);
  /// The optimizer's step over this rank's shard at `lr`, its wall seconds (the wall-clock
  /// servers' update, as a /servers row reports it).
  double timed_optimizer_step(double lr);
  void run_worker(WorkerPolicy& policy);
  // The asynchronous master (or one of several servers) and worker (training_run_async.cpp).
  class AsyncServerPolicy;
  class AsyncWorkerPolicy;
  std::unique_ptr<ServerPolicy> make_async_server();
  std::unique_ptr<WorkerPolicy> make_async_worker();
  /// --servers S --async, at the end: the servers send rank 0 their shards of the parameters
  /// (for the evaluation and the checkpoint), their /servers rows and StopCodes; rank 0 writes
  /// all rows (its own `rows` too) in step order and sends every server the largest code, so
  /// that all end the run the same way.
  void gather_async_servers(std::vector<metrics::ServerRecord> rows);
  /// Rank 0: the several servers' /servers rows into the log, in step order.
  void write_server_rows(std::vector<metrics::ServerRecord> rows);
  /// --servers S --async under --emulate: server `server` (1 to S - 1) of this process, its
  /// loop on a thread of its own over the rounds the servers share.
  class EmulatedAsyncServer;
  std::unique_ptr<EmulatedAsyncServer> make_emulated_async_server(int server,
                                                                  EmulatedAsyncRounds& rounds);
  /// Under --emulate with several asynchronous servers: each server's shard of its optimizer
  /// (servers 1 to S - 1; server 0's is optimizer_) put together, as a checkpoint holds it.
  std::vector<std::vector<float>> emulated_servers_optimizer_state() const;
  /// ... and at resume, servers 1 to S - 1 take their shards of resumed_optimizer_state_.
  void resume_emulated_servers();
  bool emulated_async_servers() const;
  /// The modelled receive of the asynchronous master's parameters (the virtual clock).
  double async_parameters_receive() const;
  // DBSL (training_run_dbsl.cpp): the parameter server (a push merged as it comes, or with
  // --sync a round of them) and a worker.
  class DbslServerPolicy;
  class DbslPushServer;
  class DbslRoundServer;
  class DbslWorkerPolicy;
  std::unique_ptr<ServerPolicy> make_dbsl_server();
  std::unique_ptr<WorkerPolicy> make_dbsl_worker();
  int finish();

  const TrainOptions& options_;
  comm::World& world_;
  std::string command_line_;
  SteadyClock::time_point started_;
  Role role_;
  bool logs_ = false;  ///< rank 0 prints, logs and checkpoints
  std::optional<emulation::StragglerProfile> stragglers_;
  emulation::Slowdown slowdown_;
  StopRequest stop_request_;
  RunClock clock_;
  std::unique_ptr<nn::Backend> backend_;

  // --emulate: the workers this process hosts, their step's sum (gradients, state, reports),
  // and the test split the evaluations share out over the emulated ranks.
  std::unique_ptr<EmulatedWorkers> emulated_;
  std::vector<float> emulated_sum_;
  std::vector<float> share_sums_;  ///< rank 0 under mpirun: the other ranks' sums
  std::shared_ptr<const data::SplitRows> emulated_test_rows_;
  int emulated_eval_slices_ = 0;
  /// --emulate: every slice of the test split evaluated, added up in rank order.
  EvalResult evaluate_emulated_slices();

  // Data.
  WorkerData my_data_;
  std::optional<data::DataLoader> train_loader_;
  /// --train-loss master: rank 0's own training batches (the whole of its data file).
  std::optional<data::DataLoader> master_loader_;
  std::optional<data::DataLoader> test_loader_;
  data::DatasetInfo info_;
  data::ImageShape shape_;
  std::string test_path_;
  bool has_test_ = false;
  bool random_test_ = false;  ///< --test-sample random: rank 0 draws a test batch per evaluation
  std::uint64_t my_rows_ = 0;
  std::int64_t my_batches_ = 0;
  std::uint64_t total_rows_ = 0;
  std::int64_t steps_per_epoch_ = 1;
  std::int64_t global_batch_ = 0;
  int batch_ = 0;  ///< this worker's batch (--batch-size, or its share of --global-batch-size)
  double lr_factor_ = 1;  ///< --lr-scaling's factor
  /// Which workers' gradients a synchronous step uses (--backup-workers, --k-sync).
  StepSelection selection_;
  /// When worker `worker`'s gradient, ready `ready` seconds into the step, reaches the master:
  /// what the step's selection orders the workers by.
  double arrival_of(int worker, double ready) const;
  /// Every worker's arrival in this step, gathered from every rank (selection_.drops()).
  std::vector<double> gather_arrivals(const WorkerReport& report) const;
  /// --k-batch-sync (k_batch_sync.hpp): the step's plan from every worker's predicted batch
  /// completions (gathered from every rank, or the hosted workers'), each hosted round told its
  /// batches.
  KBatchStep plan_k_batches();
  /// A resumed K-batch-sync run: the `steps` planned again without computing, so that every
  /// worker's delays and data continue where the straight run's are.
  void replay_k_batch_steps(std::int64_t steps);
  /// The samples a K-batch-sync step is planned for: K batches.
  std::int64_t k_batch_samples() const;
  /// Steps of a K-batch-sync epoch: the training rows at K batches a step.
  std::int64_t k_batch_steps_per_epoch() const;

  // Model and optimizer.
  std::unique_ptr<nn::Network> net_;
  std::optional<comm::AllreduceTrial> allreduce_trial_;
  std::string allreduce_used_;  ///< what --allreduce auto chose (logs and checkpoints)
  /// --allreduce nccl (role_.nccl): the communicator; destroyed before the network and backend.
  std::unique_ptr<comm::DeviceAllreduce> nccl_;
  bool amb_ = false;
  int micro_size_ = 0;
  optim::OptimizerConfig optimizer_config_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  /// --servers S --async under --emulate: servers 1 to S - 1's optimizers, each over its shard.
  std::vector<std::unique_ptr<optim::Optimizer>> server_optimizers_;
  /// A device backend's gradients (and the exchange's tail) in host memory for the exchanges;
  /// empty on a host-accessible backend, whose gradient buffer is exchanged in place.
  std::vector<float> gradient_staging_;
  /// The values this rank's optimizer updates: a server's shard, else the whole buffer.
  std::pair<std::size_t, std::size_t> shard_;

  // Cluster emulation and AMB.
  ComputeModels compute_models_;
  std::optional<ComputeModel> compute_model_;
  std::uint64_t gradient_bytes_ = 0;
  CommModel comm_model_;
  double time_limit_ = 0;
  std::string time_limit_rule_;  ///< --time-limit auto: how the limit was chosen
  /// --delayed-gradients TAU >= 1: every rank's versions, rank 0's timeline on the virtual
  /// clock (every rank's under shares of the emulated workers); TAU 0 is mb-train-amb's round as it
  /// is (neither).
  int delay_rounds_ = 0;
  std::optional<ParameterVersions> versions_;
  std::optional<DelayedTimeline> delayed_timeline_;
  bool delayed_swapped_ = false;  ///< the network holds a delayed version for the round

  // DBSL.
  bool dbsl_ = false;
  DbslPlan dbsl_plan_;
  std::vector<double> dbsl_factors_;  ///< per worker: the merge's f

  // The run's length and progress.
  ResumeHeader resume_;
  /// Rank 0, resuming with several servers: the checkpoint's whole optimizer state, until
  /// resume_server_shards() hands the servers their shards.
  std::vector<std::vector<float>> resumed_optimizer_state_;
  /// --cpu-quota with, under --cpu-quota-tick, the parameters' copy a round (set_up_emulation).
  emulation::CpuQuota cpu_quota_;
  /// Resuming under --cpu-quota: the checkpoint's budgets (every rank's under shares), until
  /// restore_quota_budgets() hands them to the rounds.
  std::vector<double> resumed_quota_budgets_;
  std::int64_t resumed_quota_state_size_ = 3;  ///< values per worker after its rank
  /// checkpoint_now(): the budgets save_checkpoint_to() writes.
  std::vector<double> quota_budgets_;
  std::int64_t step_ = 0;
  std::int64_t step_base_ = 0;
  double epoch_base_ = 0;
  double samples_seen_ = 0;
  std::int64_t planned_ = kUnlimitedSteps;
  optim::ScheduleConfig schedule_config_;
  std::optional<optim::LearningRateSchedule> schedule_;
  std::vector<std::string> hosts_;
  std::optional<metrics::MetricLog> metric_log_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<WorkerRound> round_;
  double budget_ = 0;
  int consecutive_skips_ = 0;
  std::int64_t skipped_ = 0;
  std::int64_t finished_early_ = 0;  ///< AMB: worker rounds that did their whole batch in time
  bool evaluated_now_ = false;
  int stop_ = kContinue;
  // The epoch under way (whole epochs done), and its sums for the summary line (rank 0).
  double whole_epochs_ = 0;
  double epoch_started_ = 0;
  double epoch_loss_sum_ = 0, epoch_samples_ = 0;
  std::int64_t epoch_steps_ = 0;
  double last_accuracy_ = -1;  ///< the last evaluation's (-1: none yet)
  std::int64_t last_eval_step_ = -1;
};

}  // namespace mbkit::train
