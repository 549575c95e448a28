// mb-bench-bandwidth --fit: the one-way time of a message between every pair of ranks over the
// sizes of the run (ping-pong), from which train/comm_model.hpp fits the trainers' message
// model time = alpha + beta * bytes, per pair and for all pairs together; and the time of an
// MPI allreduce of the whole world over the same sizes, fitted the same way, which times a
// synchronous --allreduce mpi step; and the time of a message in a stream of back-to-back
// sends between every pair (as osu_bw times it against osu_latency's ping-pong), fitted the
// same way, which prices streamed messages; the asynchronous exchange's own cycle; and the
// synchronous parameter server's round through the trainers' exchange, which prices a
// synchronous ps step of as many ranks.
#pragma once

#include <ostream>
#include <vector>

#include "mbkit/bench/measure.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/train/comm_model.hpp"

namespace mbkit::bench {

/// What the ping-pong of every pair measured: a table row per pair and size ("pingpong-I-J":
/// time_us the median one-way time, min_us and max_us the fastest and slowest, busbw = algbw)
/// and the points of every pair (fitted by train::fit_pairs), on every rank.
struct PingPong {
  std::vector<Row> rows;
  train::CommModelRecords records;
};

/// Collective: the pairs (0,1), (0,2), ..., (1,2), ... in turn, each `options.warmup_iters`
/// untimed round trips then `options.iters_at(size)` timed ones per size, each halved; the
/// others wait. With options.check, the lower rank checks the echoed bytes (column wrong).
/// The two ranks of a pair spin while they wait, so that the poll loop's sleeps are not timed.
PingPong measure_ping_pong(comm::World& world, const std::vector<std::size_t>& sizes,
                           const MeasureOptions& options);

/// Collective (exchange_bench.cpp, as the ps round): the trainers' --allreduce mpi step of
/// every rank (train::SyncExchange: the arrival message and barrier, then MPI's allreduce of
/// the gradient, bytes / 4 floats, at least one): per size `options.warmup_iters` untimed then
/// `options.iters_at(size)` timed steps back to back, an iteration its slowest rank's, then the
/// busy passes of measure_ps_round with every rank computing. Adds a row per size
/// ("allreduce-world": time_us the median, min_us and max_us the fastest and slowest
/// iteration; with options.check, the sum of an untimed step checked) and the points, slack
/// and tick to `ping_pong.records.allreduce`.
void measure_fit_allreduce(comm::World& world, const std::vector<std::size_t>& sizes,
                           const MeasureOptions& options, PingPong& ping_pong);

/// Collective: the streamed messages of the pairs (0,1), (0,2), ..., in turn: per size,
/// `options.warmup_iters` untimed then `options.iters_at(size)` timed windows, in each of which
/// the lower rank posts train::stream_window(size) non-blocking sends back to back and waits for
/// them, and the higher rank keeps two receives posted (each message finds its receive posted,
/// as the asynchronous master's gradient finds the master's) and sends back one 1-byte
/// acknowledgement; the time from the first send to the acknowledgement over the window's
/// messages is a point. Adds a row
/// per pair and size ("stream-I-J": time_us the median over windows a message, min_us and max_us
/// the fastest and slowest window's) and the points to `ping_pong.records.stream`. With
/// options.check the higher rank checks the last message's bytes (column wrong). The ranks spin
/// while they wait, as in the ping-pong.
void measure_stream(comm::World& world, const std::vector<std::size_t>& sizes,
                    const MeasureOptions& options, PingPong& ping_pong);

/// Gradients in a timed window of the async cycle. The gradients of a size go in one stream, so
/// a window is a stretch of a full pipeline and needs no more to time its period.
inline constexpr int kAsyncCycleWindow = 4;

/// Collective: the asynchronous exchange of the pairs (0,1), (0,2), ..., in turn, the lower rank
/// the master, the higher its worker (train::CommAsyncRecord): per size, gradients of that size,
/// sent back to back as AsyncWorker sends them
/// (each after the previous is through, taking whatever parameters arrived without waiting for
/// them), each answered by the master with parameters of the same size (the newest, one send in
/// flight, as AsyncMaster). Two passes, each one stream of `options.warmup_iters` untimed and
/// `options.iters_at(size)` timed windows of kAsyncCycleWindow gradients (a window's time: from
/// the post of its first send to that of the next window's first): the worker idle between
/// sends, then busy (spinning) for the idle pass's median period before each send, as a worker
/// computes; each pass ends when the parameters answering its last gradient are in. Adds rows
/// "async-I-J" and "async-busy-I-J" (time_us the median seconds a gradient, min_us and max_us the
/// fastest and slowest window's; busbw twice algbw: a gradient and its parameters) and the points
/// to `ping_pong.records.async_cycle`. With options.check the master checks the last gradient's
/// bytes (column wrong). The ranks wait as the trainers' ranks do (comm::World::wait_until's
/// spin, yield, sleep), not spinning: two spinning ranks starve the kernel's threads that move
/// the data on a shared machine.
void measure_async_cycle(comm::World& world, const std::vector<std::size_t>& sizes,
                         const MeasureOptions& options, PingPong& ping_pong);

/// Collective (exchange_bench.cpp, where --op exchange times the same steps): the synchronous
/// parameter server's round of the whole world (train::CommPsRoundRecord), rank 0 the server:
/// per size, `options.warmup_iters` untimed then `options.iters_at(size)` timed steps of the
/// trainers' own train::SyncExchange (combine, then distribute of parameters as large as the
/// gradient), back to back as training steps whose compute is short; an iteration lasts as
/// long as its slowest worker's. Adds a row per size ("ps-round": time_us the median, min_us and
/// max_us the fastest and slowest iteration; busbw twice algbw: a gradient and the parameters)
/// and the points to `ping_pong.records.ps_round`. With options.check, the parameters of an
/// untimed step are checked on every worker (column wrong). Then busy passes of as many steps,
/// the workers spinning train::kPsBusyStep before each, one kPsBusyStep longer each pass (at
/// most train::kPsBusyMost), until a pass's median step is longer than the idle round by half
/// a busy step and, where an earlier pass hid the compute, the next pass is too: the record's
/// slack and tick at the size (train::CommPsRoundRecord). Needs 2 ranks or more.
void measure_ps_round(comm::World& world, const std::vector<std::size_t>& sizes,
                      const MeasureOptions& options, PingPong& ping_pong);

/// '#' lines: alpha, beta and r^2 of each pair and of all together, whether the pairs differ
/// (then the file holds a model per pair), the allreduce's fit beside the ring of messages
/// the message model alone would time it as, and the streamed messages' fit beside the line's
/// cost of the same sizes.
void write_comm_fits(std::ostream& out, const train::CommModelRecords& records);

}  // namespace mbkit::bench
