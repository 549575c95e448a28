// The synchronous ps step of the straggler methods that drop late gradients (StepSelection:
// --backup-workers, --k-sync, --gradient-coding) on the wall clock, under mpirun: the master
// takes the gradients in the order they really arrive (a receive posted from every worker,
// polled), stops at the first ones the rule selects, sums those in worker order (so the sum is
// a function of the selection alone), updates and sends the new parameters to the workers
// whose gradients of the step came. A gradient that comes after its step was made is received
// and discarded (messages carry their step, so none is applied to a later one), and its worker
// is sent the newest parameters at once: it starts its next round from them, as
// SyncReplicasOptimizer's late workers do. A round is not interrupted: MPI cannot take back a
// computation in progress, and the late gradient is what tells the master the worker is free.
//
// Point-to-point messages only (no collective: the workers are not in step with each other).
// A worker's message: its step, gradient, state and report; the master's: the parameters'
// step, a StopCode, the parameters and state. Every gradient sent is received: at the end
// the master waits for each worker's last one and answers it with the stop, so nothing is
// left in flight. A worker silent past --comm-timeout fails the run naming it (PeerSilence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  /// Sends the parameters of step `step` (after its update) and `stop` to the workers whose
  /// gradients of the step came; with a stop those workers are done.
  void publish(std::span<const float> parameters, std::span<const float> state, std::int64_t step,
               int stop);
  /// The end: receives every other worker's last gradient (discarded) and answers it with
  /// `stop`; waits for every message to be delivered.
  void finish(std::int64_t step, int stop);
  /// Gradients received after their step was made (not applied).
  std::int64_t discarded() const { return discarded_; }

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
  /// Seconds of the last send (completing the previous one) and of waiting for the answer.
  double last_send_time() const { return send_time_; }
  double last_wait_time() const { return wait_time_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::int64_t discarded_ = 0;
  double send_time_ = 0, wait_time_ = 0;
};

}  // namespace mbkit::train
