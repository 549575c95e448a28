// The emulated workers' rounds the asynchronous servers share (--emulate N --async, one server
// or --servers S): round r of worker w runs once every server gave it its shard of the
// parameters (each at the round's start on its own virtual clock, as under mpirun, where the
// worker waits for every server's message), and each server takes the round's gradient, its
// shard of it, when it arrives on that server's clock. A round no server will start (a server
// stopped first: under mpirun its stop ends the worker) never runs.
//
// Under mpirun with --emulate (ranks hosting shares of the workers, Role::shares)
// every rank runs the master alike: a round's ready time is predicted by the rank hosting its
// worker and broadcast from it when the round starts; when its gradient is taken, its gradient,
// state and report are broadcast from there, so every rank takes the one process's values in
// its order (its bits for every R). The host computes a started round while it waits for a
// broadcast (RoundsAhead: the soonest due first, within Parts::ahead_bytes of results not yet
// taken), else at its take: the ranks compute at the same time, and a round's result does not
// depend on when it is computed (its worker's loader, draws and compute model, the parameters
// it started from).
//
// With several servers each plays its loop on a thread of its own, but one runs at a time: a
// server holds lock() while it runs and lets it go only to wait for a round the others have
// not started yet (take()), so what each computes does not depend on the threads' timing. Which
// server runs next does not either: the waiting one hands the turn to the next server after it
// (in server order, round the ring) that can go on, so under shares every rank runs the
// servers' steps, and broadcasts their rounds, in one order.
//
//   memory: per round started by some server and not yet taken by all, the servers' parameter
//           sets it holds (shared with the servers' histories) and, once run, its gradient and
//           state (the whole buffer); a copy of the parameters and state while a round runs;
//           under mpirun, the rounds computed ahead (at most Parts::ahead_bytes); up to 16
//           results no longer held, kept to reuse.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "mbkit/comm/in_flight.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/emulated_workers.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/rounds_ahead.hpp"
#include "mbkit/train/spare_pool.hpp"

namespace mbkit::train {

class EmulatedAsyncRounds {
 public:
  struct Parts {
    EmulatedWorkers& workers;
    nn::Network& net;  ///< the servers' network (each updates its shard), the rounds' too
    const TrainOptions& options;
    int servers = 1;
    /// A parameter message's modelled cost: the receive time each round reports.
    double modelled_receive = 0;
    /// The StopCode a worker's report carries (a signal).
    std::function<int()> stop_of;
    /// Called with each round's number (from 1) and report, as a worker's --worker-log line.
    std::function<void(std::int64_t, const WorkerReport&)> worker_line;
    /// Under mpirun, the ranks hosting shares of the workers (EmulatedWorkers::hosts); null:
    /// this process hosts them all.
    const comm::World* shares = nullptr;
    /// Under shares: the most bytes of results computed ahead of their take (RoundsAhead).
    std::size_t ahead_bytes = kRoundsAheadBytes;
  };
  /// A server's published parameters: its master step, its shard then (server 0) the state.
  struct Snapshot {
    std::int64_t step = 0;
    std::vector<float> values;
  };
  /// A round that ran: the worker's report, its gradient and state (whole buffers).
  struct Computed {
    WorkerReport report;
    comm::MessageBuffer<float> gradients, state;  ///< broadcast from their host (in_flight.hpp)
  };
  explicit EmulatedAsyncRounds(Parts parts);

  int workers() const { return parts_.workers.workers(); }
  int servers() const { return parts_.servers; }
  EmulatedWorkers& emulated() { return parts_.workers; }
  /// Server `server`'s shard of the parameters: [first, last).
  std::pair<std::size_t, std::size_t> shard(int server) const;

  /// What a started round's gradient message will carry (the same for every server: predicted
  /// at the first one's start).
  struct Started {
    double ready = 0;       ///< seconds after its start (delay + compute)
    double comm_delay = 0;  ///< --async-delay-std: its message's extra delay
  };
  /// Server `server` starts worker w's next round at virtual time `start` from `held` (its
  /// shard), or nothing when the round will not run.
  std::optional<Started> start(int server, int w, std::shared_ptr<const Snapshot> held,
                               double start);
  /// The round of worker w that server `server` takes next (rounds are taken in order), once
  /// it ran: waits, `lock` released, until every server started it (then runs it, the first to
  /// take it) or one stopped without (nothing: the worker is done).
  std::shared_ptr<const Computed> take(int server, int w, std::unique_lock<std::mutex>& lock);
  /// Server `server` begins its loop (`lock` held): waits for its turn (server 0 has the first).
  void enter(int server, std::unique_lock<std::mutex>& lock);
  /// The server stopped: the rounds it did not start will not run. Its StopCode is the one the
  /// workers it ends report (AsyncCombiner::workers_stop()).
  void stopped(int server, int code);
  /// The StopCode of the server that ended worker w's rounds (kContinue while none did).
  int stop_of_worker(int w) const;
  /// A server's loop failed: the others stop waiting (and fail too).
  void abandon();
  std::mutex& lock() { return lock_; }

 private:
  struct Round {
    std::vector<std::shared_ptr<const Snapshot>> held;  ///< per server, once it started it
    int given = 0;                                      ///< servers that started it
    double ready = 0;                                   ///< predicted at the first start
    double comm_delay = 0;                              ///< --async-delay-std's extra delay
    std::shared_ptr<const Computed> computed;           ///< once it ran
    std::shared_ptr<Computed> ahead;  ///< computed by its host before its take (shares)
  };
  struct Worker {
    std::int64_t first = 0;    ///< rounds_[0]'s number
    std::deque<Round> rounds;  ///< from `first`: started by some server, not taken by all
    std::vector<std::int64_t> started, taken;  ///< per server: rounds started, rounds taken
    int stop = 0;                              ///< the StopCode that ended its rounds
  };
  /// Round r of worker w will not run: some server stopped without starting it.
  bool gone(const Worker& worker, std::int64_t r) const;
  /// Round r of worker w, as its take hands it on: computed (or computed ahead) on its host,
  /// under shares broadcast from there.
  std::shared_ptr<const Computed> run_round(int w, Round& round, std::int64_t r);
  /// Computes hosted worker w's round r on the network (the servers' values kept aside).
  std::shared_ptr<Computed> compute(int w, const Round& round, std::int64_t r);
  /// What a result computed ahead holds, counted against the bound.
  std::size_t result_bytes() const;
  /// Under shares: computes the soonest due round started here, if the bound allows one.
  bool compute_ahead();
  /// Under shares, worker w's round's `ready` as its host predicted it, on every rank
  /// (computing rounds ahead meanwhile).
  void ready_from_host(int w, double& ready);
  /// A result to fill: a spare one, or a new one.
  std::shared_ptr<Computed> new_result();
  /// Under shares, the computed round of worker w on every rank, from its host (computing
  /// rounds ahead meanwhile).
  void from_host(int w, Computed& computed);
  /// Forgets the rounds every server took or never will.
  void forget_taken(Worker& worker);
  /// Server `server` may go on: it has not entered yet, or the round it waits for can be taken.
  bool can_go_on(int server) const;
  /// Gives the turn to the first server after `server`, round the ring, that can go on.
  void pass_turn(int server);

  Parts parts_;
  std::mutex lock_;
  std::condition_variable changed_;
  std::vector<Worker> workers_;
  std::vector<int> stopped_;  ///< per server: its StopCode once it stopped, else kContinue
  bool abandoned_ = false;
  /// Where each server is: not entered yet, running (the one with the turn), waiting in take()
  /// for worker `awaited_`'s round, or stopped.
  enum class Phase { kNotEntered, kRunning, kWaiting, kStopped };
  std::vector<Phase> phase_;
  std::vector<int> awaited_;
  int turn_ = 0;  ///< the server that runs
  std::vector<float> saved_parameters_, saved_state_;
  RoundsAhead ahead_;
  /// Results no longer held, to reuse (a gradient is the model's size: allocated each round,
  /// it is faulted in, and on the ranks that receive it zeroed, every time); enough for the
  /// rounds a take hands on while others are computed (one freed, one made).
  static constexpr std::size_t kSpareResults = 16;
  SparePool<Computed> spare_results_;
};

}  // namespace mbkit::train
