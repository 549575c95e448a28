// The policies of the engine's server loop and worker loop (TrainingRun::run_server,
// TrainingRun::run_worker, training_run_loops.cpp). The loops are written once: a server collects
// an update, the nan policy accepts it, the server applies it, counts the step and its samples,
// moves the virtual clock, decides whether the run goes on (agreeing on it with the other ranks
// where the method does), publishes, records the step, and after the last step finishes; a
// worker receives what its next round starts from, runs the round and sends its result. What
// differs between the methods is here, chosen at set-up: the synchronous step (ps, allreduce,
// one process, --emulate and its shares under mpirun: SyncServerPolicy on every rank that
// updates, SyncWorkerPolicy on ps's workers, training_run_sync_step.cpp), the asynchronous
// master (an AsyncCombiner, training_run_async.cpp), DBSL's servers (a DbslCombiner,
// training_run_dbsl.cpp), the wall clock's selecting master (a SelectingExchange,
// training_run_selection.cpp) and AMB-DG's (a DelayedExchange, training_run_delayed.cpp) are
// ServerPolicies, their workers WorkerPolicies, and so is local SGD's step
// (training_run_local_sgd.cpp). A new method is a new policy, not a new loop.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "mbkit/train/exchange.hpp"

namespace mbkit::train {

/// What one of the server's updates brought.
struct ServerUpdate {
  /// The workers' reports as recorded: samples, losses (the nan policy's mean), the largest
  /// StopCode they sent (`stop`).
  CombinedStep combined;
  double lr = 0;              ///< the learning rate the step is recorded with
  std::int64_t steps = 1;     ///< steps the update counts (DBSL --sync: a push each)
  bool workers_done = false;  ///< no update: every worker is done (`combined.stop` says how)
  /// The update's work on the virtual clock where the policy prices the step from it (the
  /// synchronous step's optimizer step; 0: free): ranks hosting shares take rank 0's.
  double virtual_update_time = 0;
  /// The step's time where the policy prices it (the synchronous step on the virtual clock,
  /// in `agree`); unset: the loop's (the virtual clock's move, or the wall seconds).
  std::optional<double> step_time;
};

/// A server's side of the loop. Calls, in order: start, then per step collect, update (unless
/// the nan policy skips it), virtual_now, agree, publish (unless the run stops; before rank 0
/// records the step, so that the workers go on meanwhile), and finish.
class ServerPolicy {
 public:
  virtual ~ServerPolicy() = default;
  /// The samples after which the run ends (infinity: its steps alone decide).
  virtual double planned_samples() const { return std::numeric_limits<double>::infinity(); }
  /// Before the first step; `stop` is the run's verdict so far (the workers wait for either
  /// the starting parameters or the stop). Returns the verdict the workers were given: `stop`,
  /// or where the synchronous start gave them the parameters and a verdict already (the wall
  /// clock's selection and AMB-DG), that one.
  virtual int start(std::int64_t step, int stop) = 0;
  /// Waits for the workers' next update of step `step`.
  virtual ServerUpdate collect(std::int64_t step) = 0;
  /// Applies the update collected (an optimizer step, a merge), its work on the virtual clock
  /// (or its time in the record's /servers row: `update.combined.servers`).
  virtual void update(ServerUpdate& update) = 0;
  /// The server's virtual time after the update (the run's clock takes it).
  virtual double virtual_now() const = 0;
  /// Whether this server adds its own reasons to stop (rank 0's signal and budget, the
  /// planned steps and samples) to the workers' and the nan policy's. Not where the ranks
  /// must stop together and the verdict comes otherwise (the synchronous step's servers but
  /// ps's master: allreduce's rode in rank 0's report, ps's servers take the master's).
  virtual bool stops_alone() const { return true; }
  /// The run's verdict after step `step` from `stop` (this server's, or under shares of the
  /// emulated workers rank 0's, which the loop shared). A synchronous step agrees on it here:
  /// ps's master sends it with the parameters (every step: the workers wait for both); the
  /// step is then priced on the virtual clock (`update.step_time`, `update.combined`'s times).
  virtual int agree(std::int64_t /*step*/, int stop, ServerUpdate& /*update*/) { return stop; }
  /// Sends the workers of the update what they go on from, as of step `step`.
  virtual void publish(std::int64_t step) = 0;
  /// After the last step: tells the workers the run's `stop`; returns the run's StopCode
  /// (a worker may have been stopped by another server).
  virtual int finish(std::int64_t step, int stop) = 0;
};

/// A worker's side of the loop: receive, round, send, until receive says the run ended.
/// `receive` need not wait: a worker that computes batches back to back (K-batch-sync on the
/// wall clock) takes newer parameters only if they came, and otherwise goes on.
class WorkerPolicy {
 public:
  virtual ~WorkerPolicy() = default;
  /// What round `rounds` (0, 1, ...) starts from; false when the run ended.
  virtual bool receive(std::int64_t rounds) = 0;
  /// Runs the round (its StopCode is the loop's to set).
  virtual WorkerReport round(std::int64_t rounds) = 0;
  /// The number the worker's line (--worker-log) gives round `rounds` once sent: its count
  /// (1, 2, ...), or a synchronous method's step that the round is for.
  virtual std::int64_t numbered(std::int64_t rounds) const { return rounds + 1; }
  virtual void send(const WorkerReport& report) = 0;
  /// After the last round: the StopCode the run ended with.
  virtual int finish() = 0;
};

}  // namespace mbkit::train
