// The virtual clock (--clock virtual): a cluster of N workers emulated on a machine with fewer
// cores (mbkit.7, "Cluster emulation").
//
// On a laptop, wall-clock straggler experiments measure the laptop: a sleeping worker frees its
// core for the others and a worker's compute time depends on how many share its core. With the
// virtual clock each worker counts
//   - its compute as CPU time of its own process (as if it had a core of its own), or as the
//     cost of a ComputeModel (seconds per sample + seconds per micro-batch) for exactly
//     reproducible runs and for devices faster or slower than this machine;
//   - its induced delays (--induce, --slowdown) as virtual time, without sleeping;
//   - each message as CommModel::message(bytes) = alpha + beta * bytes, or where a --comm-model
//     file holds the measured points, their interpolation (measured_times.hpp); an allreduce as
//     a ring of such messages or, where the file measured the MPI allreduce of as many ranks,
//     as its points (or fit); a message of a stream (the asynchronous exchange's, whose sender
//     does not wait for a reply) as CommModel::streamed(bytes), the file's streaming line where
//     it has one.
// Rank 0 keeps the emulated cluster's clock: the sync modes' step times follow from the
// workers' reports (SyncTimeline), the asynchronous master processes gradients in the order of
// their virtual arrival (VirtualArrivals, a small conservative discrete-event scheduler).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/measured_times.hpp"

namespace mbkit::train {

/// Cost of one message: alpha seconds + beta seconds per byte, or a file's measured points.
struct CommModel {
  double alpha = 0;
  double beta = 0;
  bool measured = false;      ///< measured at start (not given with --comm-model)
  std::string measured_on{};  ///< what was timed: "ping-pong", "the ps exchange", ...
  std::string file{};         ///< the --comm-model FILE.h5 it was read from (comm_model.hpp)
  /// A file's points of every pair together: where there are, they price a message instead
  /// of alpha and beta.
  MeasuredTimes points{};
  /// A file's per-pair model: `pair_ranks` ranks, the pair (i, j)'s alpha and beta at
  /// [i * pair_ranks + j] (symmetric), and its points where the file has them (then
  /// pair_points has as many entries, and they price the pair's messages). 0: every pair
  /// costs alpha, beta (or points).
  int pair_ranks = 0;
  std::vector<double> pair_alpha{}, pair_beta{};
  std::vector<MeasuredTimes> pair_points{};
  /// A file's fit of MPI's allreduce of `allreduce_ranks` ranks: allreduce_alpha +
  /// allreduce_beta * bytes, or its points where there are. 0: none (a ring of messages).
  int allreduce_ranks = 0;
  /// A ps round or allreduce step at one measured size with its busy passes
  /// (CommPsRoundRecord's slack, tick).
  struct RoundAtSize {
    double bytes = 0;
    double round = 0;  ///< the idle round
    double slack = 0;  ///< the compute before it the step hides
    double tick = 0;   ///< what the step grows by at once past the slack (0: with the compute)
    /// A step whose slowest worker computes `busy` seconds before the exchange: the round up to
    /// the slack, then a whole tick for each tick or part of one beyond it (busy + round
    /// where slack and tick are 0).
    double step(double busy) const;
  };
  double allreduce_alpha = 0, allreduce_beta = 0;
  MeasuredTimes allreduce_points{};
  /// The allreduce's busy passes per measured size (none in a file from before them).
  std::vector<RoundAtSize> allreduce_busy{};
  /// A file's fit of streamed messages (windows of back-to-back sends, comm_model.hpp's
  /// CommStreamRecord): stream_alpha + stream_beta * bytes. false: none (streamed() is
  /// message()).
  bool streams = false;
  double stream_alpha = 0, stream_beta = 0;
  MeasuredTimes stream_points{};  ///< where there are, they price a streamed message
  /// A file's async cycle (comm_model.hpp's CommAsyncRecord): the period of a gradient and its
  /// parameters with the worker idle, and with it busy. false: none (async_cycle() is
  /// streamed(), async_sender() 0).
  bool async_cycles = false;
  MeasuredTimes async_points{}, async_busy_points{};
  /// A file's synchronous ps round of `ps_round_ranks` ranks (comm_model.hpp's
  /// CommPsRoundRecord): the gradient to the server and the parameters back as the trainers
  /// exchange them, its points (and the line fitted to them, shown). 0: none (ps_message() is
  /// message()).
  int ps_round_ranks = 0;
  double ps_round_alpha = 0, ps_round_beta = 0;
  MeasuredTimes ps_round_points{};
  /// Per measured size, in the file's order; none in a file from before the busy passes.
  std::vector<RoundAtSize> ps_round_busy{};

  double message(std::uint64_t bytes) const { return one_way(static_cast<double>(bytes)); }
  /// A message between ranks `from` and `to`: its pair's cost in a per-pair model.
  double message(std::uint64_t bytes, int from, int to) const {
    return one_way(static_cast<double>(bytes), from, to);
  }
  /// One way of a synchronous ps step of `workers` workers and `servers` servers, between
  /// worker rank `from` and server `to`: half the file's measured round where the step has one
  /// server (0 counts as one) and the round was measured with workers + 1 ranks, else
  /// message(bytes, from, to).
  double ps_message(std::uint64_t bytes, int workers, int servers, int from, int to) const;
  /// The same where no pair is named: half the round, else message(bytes).
  double ps_message(std::uint64_t bytes, int workers, int servers) const;
  /// The round's busy passes at exactly `bytes` where ps_message prices the step by the round
  /// and the file measured that size with them (mb-bench-bandwidth --also-bytes), else none:
  /// between measured sizes the slack and tick are unknown.
  const RoundAtSize* ps_round_at(std::uint64_t bytes, int workers, int servers) const;
  /// Whether the file measured the round's busy passes and some size's step moved in ticks.
  bool ps_round_ticks() const;
  /// The allreduce's busy passes at exactly `bytes` where allreduce() prices `ranks` ranks by
  /// the file's points and the file measured that size with them, else none.
  const RoundAtSize* allreduce_at(std::uint64_t bytes, int ranks) const;
  /// Whether the allreduce's busy passes found some size's step moving in ticks.
  bool allreduce_ticks() const;
  /// A message of a stream, whose sender sends the next without waiting for a reply (the
  /// asynchronous workers' gradients, the master's parameters to them): the stream's points,
  /// or its line, where there is one, else message(bytes).
  double streamed(std::uint64_t bytes) const;
  /// The asynchronous exchange of `bytes` a gradient: the link's period for a gradient out and
  /// the parameters back (the async cycle's points), else streamed(bytes).
  double async_cycle(std::uint64_t bytes) const;
  /// The CPU seconds those messages take on the worker's core, which its compute cannot hide
  /// (the busy cycle less the idle one, at least 0); 0 without an async cycle.
  double async_sender(std::uint64_t bytes) const;
  /// An allreduce of `bytes` over `ranks`: the measured one where it is of `ranks` ranks, else
  /// a ring, 2 (ranks - 1) messages of bytes / ranks (in a per-pair model, each step as long as
  /// the ring's slowest link's).
  double allreduce(std::uint64_t bytes, int ranks) const;
  /// "alpha 25 us, beta 0.1 ns/B (measured)"; a file's adds where it interpolates points.
  std::string describe() const;
  /// "ALPHA,BETA" as --comm-model takes it; a file's points add " points B:S,...", a per-pair
  /// model " I-J=ALPHA,BETA" (and its points) per pair, a measured allreduce
  /// " allreduce R=ALPHA,BETA" (and its points), a stream " stream=ALPHA,BETA" (and its points):
  /// the model's values, to the bit.
  std::string spec() const;

 private:
  bool prices_ps_round(int workers, int servers) const;
  double one_way(double bytes) const;
  double one_way(double bytes, int from, int to) const;
};

/// "" gives none (measure at start); "ALPHA,BETA" in seconds and seconds per byte, finite and
/// not negative; a text without a comma is a file of mb-bench-bandwidth --fit (read by
/// comm_model.hpp). Throws a usage error naming --comm-model.
std::optional<CommModel> parse_comm_model(const std::string& text);

/// What measure_comm_model times. A hot ping-pong between two spinning ranks misses most of what
/// a message costs in a step: the master wakes from its polling loop (it waited for the
/// workers' compute), and MPI's reduce and broadcast take several handshakes, each a process
/// switch on a shared or loaded machine. So a run whose exchange is MPI's collectives times
/// those, as its steps call them.
enum class MeasuredExchange {
  kPingPong,         ///< isend/irecv between ranks 0 and 1 (async, dbsl, --servers, --compress)
  kParameterServer,  ///< sync ps, one server: workers idle, rendezvous, reduce to 0, broadcast
  kAllreduce,        ///< sync allreduce on the host: rendezvous, allreduce
};

/// Measures the model with an 8-byte message and one of `bytes` (the gradient), the median of
/// 15 rounds (31 of the collectives) after one to warm up, as `how` says: kPingPong: one-way time
/// of a ping-pong between ranks 0 and 1; kParameterServer: the workers sleep `idle` seconds
/// (as while they compute: the master's wait meanwhile decides how fast it wakes), then, from
/// the sleep's planned end (a late wake-up counts), the gradient's way to the master
/// (rendezvous + reduce) and the parameters' way back (rendezvous + broadcast) as rank 1 sees
/// them, a message their mean;
/// kAllreduce: an allreduce of the world's ranks R, a message 1 / (2 (R - 1)) of it (and beta
/// scaled by R), the inverse of CommModel::allreduce. Every rank calls it; every rank returns
/// rank 0's result.
CommModel measure_comm_model(const comm::World& world, std::uint64_t bytes,
                             MeasuredExchange how = MeasuredExchange::kPingPong,
                             double idle = 0.010);
/// The longest idle time kParameterServer needs: a rank that has waited this long sleeps between
/// polls at the longest interval (comm::World::wait_until spins for 50 us, yields up to 3 ms, then
/// sleeps 50 us growing to 1 ms), so a longer round wakes the master as late as this one does.
inline constexpr double kMeasureIdle = 0.010;
/// The idle time to measure kParameterServer with: the round the workers' compute models and
/// the induced delays' mean give the slowest worker, `round_seconds`, up to kMeasureIdle; a
/// short round (under 3 ms) finds the master yielding, not asleep, and its messages cheaper.
double measure_idle_for(double round_seconds);

/// Compute cost of a worker: per_sample * samples + per_batch, per micro-batch.
struct ComputeModel {
  double per_sample = 0;
  double per_batch = 0;
  /// Seconds a worker's first round of a run computes more, once (oneDNN's primitives created,
  /// its memory first touched: a real trainer's step 0 took 49 ms where later steps took
  /// 1.5 ms). Not in cost(): WorkerRound adds it to its first micro-batch.
  double warmup = 0;
  /// CPU seconds per sample of preparing a batch on the loader's background thread (--prefetch
  /// above 0): beside the compute, so no time of the step's own where a core is free, but the
  /// worker's CPU all the same, which a --cpu-quota's budget pays (mb-bench-partitions' load_ms
  /// over the batch size; 0 where the loader runs inline, its time then in A and B).
  double loader = 0;
  /// The loader's CPU seconds for a batch of `samples`.
  double loader_cpu(std::int64_t samples) const { return loader * static_cast<double>(samples); }
  double cost(std::int64_t samples) const {
    return per_sample * static_cast<double>(samples) + per_batch;
  }
};

/// The --compute-model entries: "A,B[,W[,L]]" for every rank, "RANK=A,B[,W[,L]]" or
/// "FIRST-LAST=A,B[,W[,L]]" for some.
struct ComputeModels {
  std::optional<ComputeModel> all;
  std::vector<std::pair<std::pair<int, int>, ComputeModel>> ranges;  ///< later entries win

  bool empty() const { return !all && ranges.empty(); }
  /// The model of `rank`, if any entry covers it.
  std::optional<ComputeModel> for_rank(int rank) const;
  /// Throws a usage error when an entry names a rank >= world_size or a rank without a model
  /// is a worker while others have one (all workers need one, or none).
  void check_ranks(int world_size, int first_worker) const;
  std::string describe() const;
  std::string spec() const;  ///< the entries joined by spaces
};

/// Throws a usage error naming --compute-model and the entry that is wrong.
ComputeModels parse_compute_models(const std::vector<std::string>& entries);

/// One worker's part of a synchronous step, in virtual seconds from the step's start.
struct SyncWorkerTime {
  double delay = 0;    ///< induced delay before and after computing
  double compute = 0;  ///< CPU or modelled compute
  bool used = true;    ///< false: dropped by the step's selection (cancelled, sends nothing)
};

/// Where a synchronous step's virtual time goes.
struct SyncStepTime {
  double gather = 0;          ///< all gradients combined (ps: at the master; allreduce: everywhere)
  double end = 0;             ///< every worker holds the new parameters: the next step starts
  double send = 0;            ///< a worker's communication time in this step (the slowest's)
  std::vector<double> wait;   ///< per worker: idle time (end - delay - compute - its send)
  std::vector<double> sends;  ///< per worker: its communication time in this step
  std::vector<double> receives;  ///< per worker: ps's parameters coming back (allreduce: 0)
};

/// ps: each worker sends its gradient to the master (one message), the master waits for the
/// last it uses (a dropped worker is cancelled at the end: it sends nothing, waits 0), updates
/// (`update` seconds) and sends the parameters back (one message). allreduce: a ring allreduce of
/// the gradient after the last worker is ready, then every rank updates. `bytes` is the gradient's
/// (= the parameters') size. With a per-pair model worker w is rank w + `servers` (ps) and its
/// messages cost its slowest link to a server's.
SyncStepTime sync_step_time(const std::vector<SyncWorkerTime>& workers, bool parameter_server,
                            const CommModel& comm, std::uint64_t bytes, double update,
                            int servers = 1);

/// The asynchronous master's event order under the virtual clock.
///
/// Each worker computes without pause: it starts a round at a virtual time the master knows,
/// computes, sends (arriving `message` seconds after it is ready) and starts its next round at
/// once on the newest parameters that had reached it by then. Its sends go one at a time: a
/// gradient ready before the previous one is through waits for it (the worker waits for its
/// previous send before it posts the next, and computes on after), so a worker whose message
/// takes longer than its round sends one gradient per message time. The master takes gradients in
/// order of arrival (ties by worker index), but only when no worker still computing could
/// deliver an earlier one: a worker without a gradient waiting arrives no sooner than its start
/// + `message` (conservative discrete-event simulation: correct whatever order the real
/// messages come in).
class VirtualArrivals {
 public:
  /// `sender_seconds`: CPU each send takes on the worker's core (CommModel::async_sender), after
  /// its compute and before its message leaves.
  VirtualArrivals(int workers, double message_seconds, double sender_seconds = 0);

  /// Worker `w` starts a round at virtual time `start`.
  void start(int w, double start);
  /// Worker w's gradient came in; it was ready `ready_after` seconds after its round started
  /// (delay + compute) and its message took `message_delay` seconds more than the model's
  /// (--async-delay-std; the worker does not wait for it). Returns its virtual arrival time.
  double arrived(int w, double ready_after, double message_delay = 0);
  /// The worker stopped sending (it finished); it no longer holds back the others.
  void retire(int w);
  /// The worker, whose gradient was taken, may not start its next round yet (a staleness
  /// bound, async_rule.hpp): it sends nothing until start(); round_start() stays its ready time.
  /// `clock` is its rule clock (rounds completed), which stays while it is blocked.
  void block(int w, std::int64_t clock);
  bool blocked(int w) const { return state_[static_cast<std::size_t>(w)] == kBlocked; }
  /// The blocked workers by (clock, worker): those a staleness bound lets go are a prefix
  /// (release_blocked() costs what it releases, not a scan of every worker).
  const std::set<std::pair<std::int64_t, int>>& blocked_by_clock() const { return blocked_; }
  /// The worker whose gradient is next in virtual time, when it is safe to take it.
  std::optional<int> next() const;
  /// Takes worker w's gradient (the one next() named): returns its arrival time. The worker's
  /// next round starts when it sent (arrival - message - its message delay).
  double take(int w);
  /// Worker w's arrival time (it is waiting).
  double arrival(int w) const { return arrival_[static_cast<std::size_t>(w)]; }
  /// True when no gradient can arrive at or before `time` any more: none waiting arrives by
  /// then and every worker still computing arrives after it (its start + message > time).
  bool none_until(double time) const;

  bool waiting(int w) const { return state_[static_cast<std::size_t>(w)] == kWaiting; }
  double round_start(int w) const { return start_[static_cast<std::size_t>(w)]; }
  double message() const { return message_; }
  double sender() const { return sender_; }

  /// Published parameter sets, by virtual time: which one a worker starting at `start` holds
  /// (the newest with publish time + message <= start). Returns an index into what publish()
  /// returned. Times never decrease (the master's clock), so held_at() is a binary search over
  /// the kept ones, about one a worker in flight.
  std::int64_t publish(double time);
  std::int64_t held_at(double start) const;
  /// Forgets publications nobody can need any more: the newest one held at `start` and later
  /// stay. Returns the number forgotten from the front.
  std::int64_t forget_before(double start);
  std::int64_t first_kept() const { return first_kept_; }

 private:
  enum State { kComputing, kWaiting, kRetired, kBlocked };
  /// Takes worker i out of its state's queue (computing_, waiting_ or blocked_).
  void leave_queue(std::size_t i);
  std::vector<State> state_;
  // The events in order, so that next() and none_until() cost O(log N), not a scan of every
  // worker (10,000 emulated workers take a gradient each event): the waiting gradients by
  // (arrival, worker), the computing workers by their earliest arrival (start + message, worker).
  std::set<std::pair<double, int>> waiting_, computing_;
  std::set<std::pair<std::int64_t, int>> blocked_;  ///< (clock at block(), worker)
  std::vector<std::int64_t> blocked_clock_;
  std::vector<double> start_, arrival_, delay_;
  std::vector<double> link_free_;  ///< when each worker's previous send is through
  double message_;
  double sender_;
  std::deque<double> published_;  ///< publish times, from index first_kept_
  std::int64_t first_kept_ = 0;
};

}  // namespace mbkit::train
