// A worker's round: what a worker computes for one step before the combining step takes it.
//
//   - the induced delay (--induce: a profile's draw or the trace's cell of this worker and
//     round), slept on the wall clock, counted on the virtual one;
//   - the gradient of the batch's summed loss scaled by loss_scale (mbkit/train/exchange.hpp):
//     FMB the whole batch; AMB micro-batches until the time limit, which counts from the start
//     of the round (delays included): one is always done, a started one is finished, and the
//     batch's leftover (batch mod micro size) is never used (mbkit/train/anytime.hpp);
//   - each micro-batch's --slowdown delay, in proportion to its compute time;
//   - on the virtual clock, the worker's --cpu-quota (emulation::QuotaBudget): its compute
//     spends a budget of QUOTA seconds per PERIOD of the run's virtual timeline and stops when
//     it is spent, until the next period; its waits for the parameters spend it too under
//     --comm-wait spin; neither the round nor its gradient's message starts while it is
//     stopped; the time it was stopped counts as delay (the report's sleep_time), and AMB's
//     time limit counts it. The budget carries over from round to round (quota_budget()).
// Compute time is the wall time of forward and backward, or on the virtual clock the compute
// model's cost, else this worker's CPU time; time the backward pass spent in the exchange
// (buckets) is not compute.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/data/loader.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/run_clock.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// QuotaBudget::busy_wait of a worker that waits as --comm-wait `comm_wait` (spin or yield)
/// says: the whole wait, or the first comm::kYieldWaitSeconds of it.
double quota_busy_wait(const std::string& comm_wait);

/// How a round splits and bounds its batch.
struct RoundRule {
  bool anytime = false;   ///< AMB: micro-batches under a time limit
  int micro_size = 0;     ///< AMB: samples per micro-batch
  double time_limit = 0;  ///< AMB: seconds per round on the run's clock
  /// K-batch-sync (k_batch_sync.hpp): whole batches of the loader back to back, as many as
  /// set_batches() says for the round (0: none, only the induced delay).
  bool whole_batches = false;
};

class WorkerRound {
 public:
  struct Parts {
    nn::Network& net;
    data::DataLoader& loader;
    const RunClock& clock;
    const emulation::Slowdown& slowdown;
    std::optional<ComputeModel> compute_model;  ///< virtual clock: cost instead of CPU time
    std::optional<emulation::StragglerProfile> stragglers;
    int rank = 0;
    int worker = 0;  ///< worker index: its trace column and (see masks_of) dropout masks
    std::uint64_t seed = 1;
    RoundRule rule;
    /// --induce trace:FILE: the worker's delays replayed from it, instead of `stragglers`.
    std::shared_ptr<const emulation::DelayTrace> trace = nullptr;
    /// The worker whose dropout masks this one draws: under --gradient-coding its group's
    /// (the group computes one gradient); -1: its own.
    int masks_of = -1;
    /// --cpu-quota of this worker's rank at the run's start (virtual clock only;
    /// mbkit/emulation/straggler.hpp).
    std::optional<emulation::QuotaBudget> cpu_quota = std::nullopt;
  };
  explicit WorkerRound(Parts parts);

  /// Runs before every micro-batch but the first (async AMB: take newer parameters).
  std::function<void()> between_micro_batches;
  /// Asked before every micro-batch but the first, after between_micro_batches: true abandons
  /// the round there (the wall-clock selection's late round, whose step was made without it).
  std::function<bool()> abandon_round;
  /// Whether the last run() was abandoned (its report has the micro-batches done before).
  bool last_round_abandoned() const { return abandoned_; }
  /// With buckets: the backward pass's gradients_ready (nn::Network::backward); returns the
  /// seconds the exchange has spent in this pass so far.
  std::function<double(std::size_t from)> gradients_ready;

  /// One round at step `at_step` (seeds the dropout masks). loss_scale 0: 1 / the batch's size.
  /// The report's send and wait times are those given by set_previous_exchange().
  WorkerReport run(std::int64_t at_step, double loss_scale);

  /// DBSL's round (mbkit/train/dbsl_plan.hpp): the induced delay, then `samples` samples of
  /// the loader in batches of its size (the last one cut short), each batch's mean-loss
  /// gradient handed to `update` (the worker's own optimizer step) before the next batch.
  /// The report's micro_batches counts the batches.
  WorkerReport run_samples(std::int64_t at_step, std::int64_t samples,
                           const std::function<void()>& update);

  /// The exchange times of the previous step, which the next report carries; `recv`: the
  /// receive of the parameters the next round starts from. The next report's exit_time is the
  /// wall time from this call to the round's start (0 on the virtual clock).
  void set_previous_exchange(double send, double wait, double recv = 0) {
    previous_send_ = send;
    previous_wait_ = wait;
    previous_recv_ = recv;
    exchange_end_ = SteadyClock::now();
  }
  /// The ready time (seconds after the round's start: induced delay, compute and slowdown) of
  /// the next run(), without computing: on the virtual clock with a compute model and a loader
  /// without prefetch, else nullopt. It draws the round's induced delay, which run() then uses.
  std::optional<double> predict_ready();
  /// DBSL: the ready time (seconds after the round's start, summed as run_samples()'s report)
  /// of the next run_samples(`samples`), without computing; nullopt as predict_ready(). It
  /// draws the round's induced delay, which run_samples() then uses.
  std::optional<double> predict_samples_ready(std::int64_t samples);
  /// K-batch-sync: the completion times (seconds after the round's start, summed as run()'s
  /// report) of the next `count` whole batches, without computing; nullopt as predict_ready().
  /// It draws the round's induced delay, which run() then uses.
  std::optional<std::vector<double>> predict_completions(int count);
  /// K-batch-sync: the next run() computes `batches` whole batches.
  void set_batches(int batches) { next_batches_ = batches; }
  /// K-batch-sync on the wall clock: the next run() goes on with the round at the same step
  /// (one more batch), so it has no induced delay of its own: a round's delay is drawn once;
  /// its dropout masks are those of the round's next batch.
  void continue_round() { continues_ = true; }
  /// Forgets the predicted round (its delay drawn, its batch count): a resumed run replays the
  /// steps done without computing them.
  void discard_prediction() {
    predrawn_delay_.reset();
    next_batches_ = -1;
  }
  /// Under --cpu-quota: the virtual time at which the next round starts (the asynchronous
  /// master's round starts); without it a round starts at the run clock's virtual_now() (a
  /// synchronous step's start). Both run() and the predictions use it.
  void set_round_start(double start) { round_start_ = start; }
  /// Under --cpu-quota: the worker's budget as its last round's gradient left (a checkpoint
  /// keeps it; a resumed run restores it, so that its rounds are the straight run's).
  const std::optional<emulation::QuotaBudget>& quota_budget() const { return budget_; }
  void restore_quota_budget(const std::vector<double>& saved, const std::string& where) {
    if (budget_) budget_->restore(saved, where);
  }
  /// Samples of the last batch drawn.
  int last_drawn() const { return last_drawn_; }
  /// A resumed run's worker has done `rounds` rounds already: its induced delays continue
  /// where an uninterrupted run's would be (one draw per round).
  void skip_rounds(std::int64_t rounds);
  /// The compute model's loader CPU for the batch the next round draws (0 without a model).
  double loader_cpu() const;
  /// A resumed run's worker is past its first round: the compute model's warm-up (its W) is
  /// not added again, so that the resumed run's times are the uninterrupted run's.
  void skip_warmup() { warmup_left_ = 0; }

 private:
  Parts parts_;
  std::unique_ptr<emulation::DelaySource> sampler_;  ///< the induced delays, if any
  std::optional<double> predrawn_delay_;             ///< predict_ready()'s draw, for the next run()
  int next_batches_ = -1;                            ///< whole_batches: set_batches()'s count
  bool continues_ = false;                           ///< continue_round(): no induced delay
  int continued_batches_ = 0;                        ///< batches before this run() in its round
  std::optional<double> round_start_;                ///< set_round_start()'s, for the next run()
  std::optional<emulation::QuotaBudget> budget_;     ///< --cpu-quota: as the last gradient left
  /// Virtual clock: the compute model's warm-up, added to the first micro-batch of the first
  /// round that computes one (and to the predictions of that round), then 0.
  double warmup_left_ = 0;
  double previous_send_ = 0, previous_wait_ = 0, previous_recv_ = 0;
  std::optional<SteadyClock::time_point> exchange_end_;
  int last_drawn_ = 0;
  bool abandoned_ = false;
};

}  // namespace mbkit::train
