// The synchronous ps step of the straggler methods that drop late gradients (StepSelection:
// --backup-workers, --k-sync, --gradient-coding) on the wall clock, under mpirun: the master
// takes the gradients in the order they really arrive (a receive posted from every worker,
// polled), stops at the first ones the rule selects, sums those in worker order (so the sum is
// a function of the selection alone), updates and sends the new parameters to the workers
// whose gradients of the step came. A gradient that comes after its step was made is received
// and discarded (messages carry their step, so none is applied to a later one), and its worker
// is sent the newest parameters at once: it starts its next round from them, as
// SyncReplicasOptimizer's late workers do. A round without a seam (FMB's one batch) is not
// interrupted: MPI cannot take back a computation in progress, and the late gradient is what
// tells the master the worker is free. A round of micro-batches (AMB, DropCompute) can stop
// between them: with notify_late(), each publish also sends the workers it does not answer (still
// computing an earlier step) a notice of the step; a worker that sees one newer than its round
// (overtaken(), between micro-batches) abandons the round: instead of its gradient it sends a
// short message (its step and report: abandon()), which the master takes as a late gradient,
// answering it at once with the newest parameters.
//
// Point-to-point messages only (no collective: the workers are not in step with each other).
// A worker's message: its step, gradient, state and report; the master's: the parameters'
// step, a StopCode, the parameters and state. Every gradient sent is received: at the end
// the master waits for each worker's last one and answers it with the stop, so nothing is
// left in flight. A worker silent past --comm-timeout fails the run naming it (PeerSilence).
//
// K-batch-sync (take_batches(K), k_batch_sync.hpp) over the same receives: a worker computes
// batches back to back at the newest parameters it has, sending each batch's gradient tagged
// with its step and checking, between batches, whether newer parameters came (without
// waiting); a batch is never interrupted, so a worker sees new parameters only after the batch
// in progress. The master keeps a receive posted from every worker, takes the first K batches
// of the step from any workers (KBatchArrivals), adding each into the sum as it is taken, in
// arrival order (the arrivals one poll sees in worker order), and sends the new parameters to
// every worker; a batch of an earlier step is received and discarded. A parameter message
// whose previous one to that worker is not yet delivered (the worker is inside a batch) waits
// until it is, and then carries the newest parameters. At the end every worker, told to stop,
// says goodbye (leave()) after its last batch, which the master receives and discards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/step_selection.hpp"

namespace mbkit::train {

class SelectingExchange {
 public:
  /// `parameters` and `state`: the floats of the model's parameters and state. Worker w is
  /// rank w + 1 (one server).
  SelectingExchange(const comm::World& world, const StepSelection& selection,
                    std::size_t parameters, std::size_t state);
  ~SelectingExchange();
  SelectingExchange(const SelectingExchange&) = delete;
  SelectingExchange& operator=(const SelectingExchange&) = delete;

  // The master (rank 0).

  /// Waits for the gradients of `step` until the rule's choice is complete; `gradients` gets
  /// the sum of the chosen ones over their samples (scaled as SyncExchange::combine's for
  /// `nominal`), `state` their mean; `used[w]` whether worker w's was used. `parameters` and
  /// `state` as they are are sent to the late workers that come meanwhile. The result has a
  /// report per worker in worker order (an unused one's without samples, loss or correct
  /// answers; one that did not come: its rank only).
  CombinedStep collect(std::span<float> gradients, std::span<float> state,
                       std::span<const float> parameters, std::int64_t step, std::int64_t nominal,
                       std::vector<bool>& used);
  /// K-batch-sync (both sides, before anything else): the master's steps take `k` batches
  /// each (collect_batches), and publish() answers every worker.
  void take_batches(int k);
  /// K-batch-sync: waits until the first `k` batches of `step` came, from any workers;
  /// `gradients` gets their sum (over their samples, scaled as collect()'s for `nominal`),
  /// `state` their mean, `batches[w]` worker w's count of them. The result's reports, one per
  /// worker in worker order, add up each worker's batches (micro_batches: their count; none:
  /// its rank only). `parameters` and `state` as they are go to the workers whose previous
  /// parameters were delivered meanwhile.
  CombinedStep collect_batches(std::span<float> gradients, std::span<float> state,
                               std::span<const float> parameters, std::int64_t step,
                               std::int64_t nominal, std::vector<int>& batches);
  /// Sends the parameters of step `step` (after its update) and `stop` to the workers whose
  /// gradients of the step came (K-batch-sync: to every worker); with a stop those workers are
  /// done.
  void publish(std::span<const float> parameters, std::span<const float> state, std::int64_t step,
               int stop);
  /// The end: receives every other worker's last gradient (discarded) and answers it with
  /// `stop`; waits for every message to be delivered.
  void finish(std::int64_t step, int stop);
  /// Gradients received after their step was made (not applied).
  std::int64_t discarded() const { return discarded_; }
  /// Both sides, before anything else: publish() sends a notice of its step to every worker it
  /// does not answer, which overtaken() sees.
  void notify_late() { notify_late_ = true; }
  /// Late rounds abandoned by their workers (abandon()), not counted in discarded().
  std::int64_t abandoned() const { return abandoned_; }
  /// The micro-batches those rounds computed before they were abandoned (their reports'): work
  /// done and dropped, which the steps' rows of the workers do not show.
  std::int64_t abandoned_micro_batches() const { return abandoned_micro_batches_; }

  // A worker.

  /// Sends the gradient of its round at the parameters of `step` (its previous send first
  /// completes).
  void send(std::span<const float> gradients, std::span<const float> state,
            const WorkerReport& report, std::int64_t step);
  struct Parameters {
    std::int64_t step = 0;  ///< the master's step these parameters start
    int stop = kContinue;
  };
  /// Waits for the master's answer to the last send: the newest parameters and state.
  Parameters receive(std::span<float> parameters, std::span<float> state);
  /// K-batch-sync: the newest parameters and state the master has sent since the last call,
  /// if any came (without waiting); nullopt leaves `parameters` and `state` as they were.
  std::optional<Parameters> poll(std::span<float> parameters, std::span<float> state);
  /// notify_late(): whether a notice came that the master made a step after `step` (the
  /// round's), without waiting.
  bool overtaken(std::int64_t step);
  /// notify_late(): instead of send(), the round at `step` abandoned: its report alone goes.
  void abandon(const WorkerReport& report, std::int64_t step);
  /// notify_late(), at the end: no more notices are taken.
  void stop_listening();
  /// K-batch-sync, after a stop came: tells the master that no more batches follow and waits
  /// until every message of this worker is delivered.
  void leave();
  /// Seconds of the last send (completing the previous one) and of waiting for the answer.
  double last_send_time() const { return send_time_; }
  double last_wait_time() const { return wait_time_; }

 private:
  /// The end of the StepSelection's rounds: every worker's gradient in progress answered with
  /// `code`.
  void finish_rounds(std::int64_t step, int code);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::int64_t discarded_ = 0, abandoned_ = 0, abandoned_micro_batches_ = 0;
  bool notify_late_ = false;
  double send_time_ = 0, wait_time_ = 0;
};

}  // namespace mbkit::train
