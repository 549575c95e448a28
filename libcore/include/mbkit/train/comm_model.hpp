// The message model's calibration: the median times of point-to-point messages by size
// (mb-bench-bandwidth --fit) and the line time = alpha + beta * bytes fitted to them, the same
// for MPI allreduces of the whole world (what a synchronous --allreduce mpi step calls), and
// their file (--comm-model FILE.h5 of the trainers), as time_model.hpp is the DBSL time model's.
// The trainers price a message by the line, and the allreduce by its measured points where
// the file has them (measured_times.hpp), by its line where it has none. A second line,
// fitted to streamed messages (windows of back-to-back sends, as osu_bw times them), prices
// the messages of exchanges whose sender does not wait for a reply (CommModel::streamed); the
// asynchronous exchange's cycle and the synchronous ps round, each measured as the trainers
// exchange, price those exchanges (CommModel::async_cycle, ps_message).
// The model itself
// (CommModel, what a message costs on the virtual clock) is virtual_clock.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// A least-squares line seconds = alpha + beta * bytes through measured points.
struct CommModelFit {
  double alpha = 0;         ///< seconds per message
  double beta = 0;          ///< seconds per byte
  double r_squared = 0;     ///< 1 - SS_res / SS_tot; 1 when every point is on the line
  double alpha_stderr = 0;  ///< standard errors of alpha and beta (0 with two points)
  double beta_stderr = 0;
};

/// Fits seconds = alpha + beta * bytes by least squares with alpha >= 0 (where the free line's
/// intercept is negative, noise around a small latency, the line through the origin, as
/// fit_time_model keeps b >= 0). Needs at least two distinct sizes and positive finite times;
/// anything else is a usage error that says which.
CommModelFit fit_comm_model(std::span<const double> bytes, std::span<const double> seconds);

/// The smallest r^2 of a fit that is written as a model.
inline constexpr double kCommModelMinRSquared = 0.9;

/// Why a fit cannot time messages ("alpha = -1e-06 s is negative"), or "" when it can: alpha
/// and beta finite, neither negative, not both 0, and r^2 at least `min_r_squared`
/// (kCommModelMinRSquared unless the measurement accepted less: mb-bench-bandwidth
/// --min-r-squared, a file's min_r_squared).
std::string comm_fit_problem(const CommModelFit& fit, double min_r_squared = kCommModelMinRSquared);

/// Why `value` cannot be the least r^2 of a message model's line, or "": it must be finite,
/// above 0 and at most 1.
std::string min_r_squared_problem(double value);

/// Whether two pairs' fits differ: alpha or beta apart by more than three times their
/// combined standard error and by more than 10% of the larger (mb-bench-bandwidth(1)).
bool fits_differ(const CommModelFit& a, const CommModelFit& b);

/// One pair of ranks' measurement: the points (median one-way seconds per size; none in a file
/// written without them) and their fit.
struct CommPairRecord {
  int rank_a = 0, rank_b = 1;  ///< rank_a < rank_b
  std::vector<double> bytes;
  std::vector<double> seconds;
  CommModelFit fit;
};

/// An MPI allreduce of the whole world of `ranks` ranks: the points (per size, the median over
/// iterations of the slowest rank's seconds; none in a file written without them) and the line
/// seconds = alpha + beta * bytes.
/// Open MPI picks its algorithm by size and number of ranks, so a ring of messages of the
/// point-to-point fit is no estimate of it.
///
/// The points are the trainers' own allreduce step (train::SyncExchange: the arrival message
/// and barrier, then the allreduce), back to back, followed by busy passes as the ps round's
/// (CommPsRoundRecord: every rank computes before the step); files written before timed the
/// allreduce alone after a rendezvous, and have no slack or tick.
struct CommAllreduceRecord {
  int ranks = 0;  ///< 0: not measured (a file from before --fit timed the allreduce)
  std::vector<double> bytes;
  std::vector<double> seconds;
  std::vector<double> slack;  ///< per point; none in a file from before the busy passes
  std::vector<double> tick;   ///< per point, 0 where the step grew with the compute
  CommModelFit fit;
};

/// Why an allreduce measurement cannot time the allreduce, or "" when it can. With points: they
/// are usable (measured_times_problem) and the line's alpha and beta finite, whatever its r^2 or
/// sign, since the points price it and the line is only shown beside them, and its busy passes
/// as a ps round's (ps_round_problem). Without points (a
/// file from before they were kept): comm_fit_problem of its line.
std::string allreduce_problem(const CommAllreduceRecord& allreduce);

/// Streamed messages of every pair (as osu_bw against osu_latency's ping-pong): per pair and
/// size, windows of up to `window` back-to-back non-blocking sends and one acknowledgement
/// back; a point is the median over windows of a window's time over its messages. The line
/// seconds = alpha + beta * bytes is fitted to every pair's points together. The points price
/// a streamed message (measured_times.hpp; the line where a file has none): a message of a
/// stream does not pay an isolated round trip's latency (on the shaped link of the README's
/// setting 2 every ping-pong up to 32 kB took 4 ms one way, and the line's alpha 5.5 ms).
struct CommStreamRecord {
  int window = 0;  ///< the most messages in a window; 0: not measured (a file from before)
  std::vector<double> bytes;    ///< every pair's sizes, pair after pair
  std::vector<double> seconds;  ///< per point, the median seconds a message
  CommModelFit fit;
};

/// The most messages in a window of the stream and the bytes a window holds at most: a window
/// of `bytes`-byte messages has kStreamWindowBytes / bytes messages, kStreamMinWindow to
/// kStreamMaxWindow.
inline constexpr int kStreamMaxWindow = 64;
inline constexpr int kStreamMinWindow = 4;
inline constexpr std::size_t kStreamWindowBytes = std::size_t{16} << 20;
int stream_window(std::size_t bytes);

/// Why a stream measurement cannot price streamed messages, or "" when it can: as
/// allreduce_problem (its points price, its line is shown beside them).
std::string stream_problem(const CommStreamRecord& stream);

/// The asynchronous exchange's cycle between a master and a worker (mb-bench-bandwidth --fit,
/// bench/bandwidth_fit.hpp's measure_async_cycle): the worker sends gradients of `bytes` back to
/// back without waiting for parameters (it waits only for its previous send, as AsyncWorker),
/// the master answers each with the parameters (newest first, one in flight, as AsyncMaster).
/// `seconds`: the median seconds a gradient (the cycle's period) with nothing else to do;
/// `busy_seconds`: the same with the worker busy (spinning) for `seconds` before each send, as a
/// worker computes. A link's period is max(wire, the worker's compute + the CPU the messages
/// take on its core): busy_seconds - seconds is that CPU, which compute cannot hide (on the
/// README's setting 2 the 814 kB gradients' cycle is 12.5 ms at 1 Gbit/s, wire-bound, and 1 ms
/// at 10 Gbit/s, mostly CPU). The line is fitted to `seconds` (shown, not used).
struct CommAsyncRecord {
  int window = 0;               ///< gradients a timed window; 0: not measured (a file from before)
  std::vector<double> bytes;    ///< every pair's sizes, pair after pair
  std::vector<double> seconds;  ///< per point, the median period with the worker idle
  std::vector<double> busy_seconds;  ///< per point, the median period with the worker busy
  CommModelFit fit;
};

/// Why an async cycle measurement cannot price the asynchronous exchange, or "" when it can: its
/// points usable (measured_times_problem, `busy_seconds` as many as `seconds`, each finite and
/// positive) and the line's alpha and beta finite.
std::string async_cycle_problem(const CommAsyncRecord& cycle);

/// The synchronous parameter server's round (mb-bench-bandwidth --fit, bench/bandwidth_fit.hpp's
/// measure_ps_round): rank 0 the server, every other rank a worker, steps of the trainers' own
/// exchange (train::SyncExchange: the arrival message and barrier, MPI's reduce of the gradient
/// to the server, the rendezvous and the broadcast of the parameters back) back to back, as a
/// step whose compute is short; a point is, per size, the median over steps of the slowest
/// worker's round. It prices a synchronous ps step's two messages in a run of as many ranks
/// (CommModel::ps_message): the ping-pong's line, an isolated message each way, missed the
/// round by 10% on the README's setting 2 (the real round a whole number of the kernel's 4 ms
/// ticks). The line is fitted to the points (shown, not used).
///
/// Busy passes (measure_ps_round) find, per size, how much compute before the round the step
/// hides: `slack`, the longest busy time (on a grid of kPsBusyStep) after which the step is
/// still as long as the idle round, and `tick`, what the step then grows by at once (0 where it
/// grows with the compute). On the README's setting 2 the round moves in the kernel's 4 ms
/// ticks (24.0 ms at 814 kB and 1 Gbit/s with 0 or 1.3 ms of compute first, 28.0 with 3 ms):
/// a step is the round, then a whole tick for each tick (or part) its compute exceeds the
/// slack by (CommModel::RoundAtSize::step). Files from before have none.
struct CommPsRoundRecord {
  int ranks = 0;  ///< 0: not measured (a file from before --fit timed the round)
  std::vector<double> bytes;
  std::vector<double> seconds;
  std::vector<double> slack;  ///< per point; none in a file from before the busy passes
  std::vector<double> tick;   ///< per point, 0 where the step grew with the compute
  CommModelFit fit;
};

/// The busy passes' grid: the worker's compute before the round grows by this much a pass,
/// up to kPsBusyMost (a slack as long is written as it, the tick as 0).
inline constexpr double kPsBusyStep = 0.25e-3;
inline constexpr double kPsBusyMost = 20e-3;

/// Why a ps round measurement cannot price the ps exchange, or "" when it can: as
/// allreduce_problem (its points price, its line is shown beside them); a slack and a tick per
/// point where there are any, finite, not negative, the slack no longer than the round.
std::string ps_round_problem(const CommPsRoundRecord& round);

/// What mb-bench-bandwidth --fit measured: every pair, the fit of all their points together,
/// whether the pairs differ (then a trainer uses each pair's own fit), the allreduce, and the
/// streamed messages.
struct CommModelRecords {
  int ranks = 2;
  std::vector<std::string> hosts;       ///< by rank
  std::vector<std::string> cpu_models;  ///< by rank
  std::vector<std::pair<std::string, std::string>> library_versions;
  std::string created;  ///< UTC time of the measurement
  /// The least r^2 of the pairs' lines the measurement accepts (mb-bench-bandwidth
  /// --min-r-squared; a file from before has none: kCommModelMinRSquared).
  double min_r_squared = kCommModelMinRSquared;
  CommModelFit all;  ///< every pair's points together
  bool per_pair = false;
  std::vector<CommPairRecord> pairs;  ///< every pair, in order (0,1), (0,2), ..., (1,2), ...
  CommAllreduceRecord allreduce;
  CommStreamRecord stream;
  CommAsyncRecord async_cycle;
  CommPsRoundRecord ps_round;
};

/// Fits each pair and all points together and decides per_pair (fits_differ for any two
/// pairs), and fits the allreduce and the stream where they were measured. The points are given;
/// the fits are filled in.
void fit_pairs(CommModelRecords& records);

/// Writes the records to `path` atomically (format "mbkit-comm-model" in mbkit-formats(5)). A
/// fit that is no usable model (comm_fit_problem: that of all pairs together, or each pair's
/// where per_pair) is refused with status 1, naming the pair and why, and nothing is written.
/// An allreduce that is no usable model (allreduce_problem) is left out of the file: the
/// trainers then time the allreduce as a ring of messages; a stream that is no usable model
/// (stream_problem) too: the trainers then price streamed messages by the line.
void write_comm_model(const std::string& path, const CommModelRecords& records);

/// Reads a comm-model file; a missing, damaged or inconsistent file, or one holding a fit that
/// is not a usable model or points that cannot price messages (measured_times_problem), is a
/// data error naming it. The points are optional: without them the records hold none.
CommModelRecords read_comm_model(const std::string& path);

/// The model a trainer uses: the fit of all pairs together; each pair's fit where the pairs
/// differ; the allreduce's points (else its fit) where the file has one; and the stream's
/// points (else its fit) where the file has one (a file from before has none: streamed
/// messages cost the line's). A
/// message is priced by the line, not the ping-pong's points (comm_model_of says why).
CommModel comm_model_of(const CommModelRecords& records, const std::string& path);

/// A run of `ranks` ranks with `model`: a per-pair model must be of as many ranks (a data
/// error naming the file), and times only synchronous ps and allreduce (`async_or_dbsl`: a
/// usage error naming --comm-model).
void check_comm_model_for_run(const CommModel& model, int ranks, bool async_or_dbsl);

}  // namespace mbkit::train
