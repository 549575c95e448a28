// DBSL's parameter server with its workers emulated inside this process (mb-train-dbsl
// --emulate N): DbslServer's virtual clock (DbslVirtualClock) without messages. A worker's
// round (its samples at its own batch, from the model it pulled, with its own optimizer) runs
// when the server takes its push, in the order the server with a rank per worker takes pushes.
//
// Asynchronous server: the order needs each round's ready time when the round starts, before it
// is computed: WorkerRound::predict_samples_ready(), from the compute model (--compute-model).
// --sync takes every worker's push at once, each round computed then (no prediction needed).
// Under mpirun each rank hosts a share of the workers (EmulatedWorkers) and every rank keeps the
// clock of every worker. --sync: it runs its hosted workers' rounds, the ranks' reports are
// all-gathered (Parts::gather_shares); the round's merge is training_run_dbsl.cpp's. The
// asynchronous server: every rank takes the pushes alike; the rank hosting a worker predicts its
// round's ready time at the reply and, when its push is taken, broadcasts the pushed model and
// report (Parts::shares), which every rank merges: the one process's bits. The host computes a
// replied round while it waits for a broadcast (RoundsAhead: the soonest due first, within
// Parts::ahead_bytes of pushes not yet taken), else at its take: the ranks compute at once.
//
//   memory: one network, and the models still in flight: per worker the model it pulled until
//           its round runs (one shared by all under --sync, whose replies carry one model), the
//           server's model while a round uses the network, one push (--sync hands each to
//           the merge as its round ends, keeping none; under mpirun the asynchronous
//           server's pushes computed ahead, at most Parts::ahead_bytes, and up to 16 taken
//           ones kept to reuse), and with
//           --keep-optimizer-state each worker's optimizer state;
//   time:   the workers' compute, and three copies of the model per round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/train/dbsl_exchange.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/emulated_workers.hpp"
#include "mbkit/train/rounds_ahead.hpp"

namespace mbkit::train {

class EmulatedDbslServer final : public DbslCombiner {
 public:
  struct Parts {
    EmulatedWorkers& workers;
    nn::Network& net;  ///< the server's network, on which the workers' rounds run too
    const optim::OptimizerConfig& optimizer;
    const DbslPlan& plan;
    bool keep_optimizer_state = false;
    bool sync = false;  ///< --sync: pushes are taken all at once (all_pushes)
    /// The StopCode a worker's report carries (a signal).
    std::function<int()> stop_of;
    /// Called with each round's number (from 1) and report, as a worker's --worker-log line.
    std::function<void(std::int64_t, const WorkerReport&)> worker_line;
    /// Under mpirun with a share of the workers (TrainingRun::gather_shares): `per_worker`
    /// values of each hosted worker, in worker order, to every worker's.
    std::function<std::vector<double>(std::vector<double>, std::size_t)> gather_shares;
    /// Under mpirun, the ranks hosting shares of the workers (the asynchronous server
    /// broadcasts a push from its worker's host); null: this process hosts them all.
    const comm::World* shares = nullptr;
    /// Under shares, the asynchronous server: the most bytes of pushes computed ahead of their
    /// take (RoundsAhead).
    std::size_t ahead_bytes = kRoundsAheadBytes;
  };
  explicit EmulatedDbslServer(Parts parts);

  void use_virtual_clock(double message, double now) override;
  double virtual_now() const override { return clock_ ? clock_->now() : 0.0; }
  void advance(double seconds) override;
  void start(std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round) override;
  WorkerReport next_push(std::span<float> model, std::int64_t step) override;
  /// Under mpirun: the hosted workers' pushes only (handed to `take` as each round ends), every
  /// worker's report.
  std::vector<WorkerReport> all_pushes(const PushTaker& take, std::int64_t step) override;
  void reply(int rank, std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round) override;
  void finish(std::int64_t step, int code) override;
  std::int64_t discarded() const override { return discarded_; }

 private:
  using Model = std::vector<float>;  ///< parameters, then state
  /// A push its worker's host computed before the server takes it.
  struct Ahead {
    Model model;
    WorkerReport report;  ///< as computed (taken() completes it)
  };
  struct Worker {
    std::shared_ptr<const Model> pulled;  ///< the model its round starts from (in flight)
    DbslRound round;                      ///< what its pull said
    std::int64_t rounds = 0;              ///< rounds it finished
    std::optional<double> ready;          ///< the asynchronous server's predicted ready time
    std::unique_ptr<optim::Optimizer> optimizer;  ///< kept across rounds when asked
    bool in_flight = false;        ///< replied to, its push not taken (on every rank)
    std::unique_ptr<Ahead> ahead;  ///< computed ahead (its host, under shares)
  };

  /// Worker w's round's ready time, `predicted` by its host, is known to every rank: its push
  /// arrives then (a usage error where its host has no compute model).
  void arrived(int w, std::optional<double> predicted);
  /// Under shares, worker w's round's `ready` as its host predicted it, on every rank
  /// (computing pushes ahead meanwhile).
  void ready_from_host(int w, double& ready);

  /// Runs worker w's round from the model it pulled: `model` gets the model it pushes; returns
  /// the report as the server reads it from the push.
  WorkerReport run_round(int w, std::span<float> model, std::int64_t step);
  /// run_round's computation: `model` gets the pushed model; the report as the worker made it.
  WorkerReport compute_round(int w, std::span<float> model);
  /// The push of worker w's round is taken at `step`: its report completed, its log line.
  WorkerReport taken(int w, WorkerReport report, std::int64_t step);
  /// Under shares: computes the soonest due push started here, if the bound allows one.
  bool compute_ahead();

  Parts parts_;
  std::optional<DbslVirtualClock> clock_;
  std::vector<Worker> workers_;
  std::shared_ptr<const Model> last_reply_;  ///< shared by the replies that carry one model
  Model server_;  ///< the server's model while a worker's round uses the network
  std::int64_t discarded_ = 0;
  RoundsAhead ahead_;
  /// Pushes computed ahead and taken, to reuse: a new one is faulted in and zeroed each time.
  std::vector<std::unique_ptr<Ahead>> spare_ahead_;
  static constexpr std::size_t kSpareAheads = 16;  ///< bounds what the spares hold
};

}  // namespace mbkit::train
