// AMB-DG (mb-train-amb --delayed-gradients TAU, delayed_gradients.hpp) on the wall clock, under
// mpirun with one parameter server (rank 0) and a rank per worker (worker w: rank w + 1).
//
// A worker never waits for the update of its last round: it computes round t at parameter
// version t - TAU (the versions it holds from the start until round TAU), sends the round's sum
// with a non-blocking send (its previous send completed first, as the asynchronous worker's)
// and starts round t + 1 at once, waiting only while version t + 1 - TAU has not reached it
// (that wait is its wait_time). The master keeps a receive posted from every worker, so the
// sums of later rounds come in while it waits for the slowest one of round t; it adds round t's
// sums in worker order from zeros (the additions of ps's shared-memory sum: the bits depend on
// the sums alone), updates once all have come, and sends the new version to every worker,
// non-blocking (every version: a worker computes at each one). The rule is the virtual clock's
// (update t uses g(x(t - TAU)) from every worker); only the waiting is real.
//
// Messages: a worker's carries its round, the version it computed at, its sum, state and
// report; its last one (after the master's stop) carries a done mark alone. The master's
// carries a version, or the stop alone; messages between two ranks keep their order. At the
// end every message sent is received: the master sends the stop after the versions, discards
// the sums of the rounds the workers computed past the end until each worker's done, and waits
// for its sends. A silent rank fails the run past --comm-timeout, named (World::wait_until).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"

namespace mbkit::train {

class DelayedExchange {
 public:
  /// `parameters` and `state`: the floats of the model's parameters and state; `delay`: TAU.
  DelayedExchange(const comm::World& world, int workers, std::size_t parameters, std::size_t state,
                  int delay);
  ~DelayedExchange();
  DelayedExchange(const DelayedExchange&) = delete;
  DelayedExchange& operator=(const DelayedExchange&) = delete;

  // The master (rank 0).

  /// Waits for every worker's sum of round `step` (taking in the later rounds' sums that come
  /// meanwhile); `gradients` gets their sum over their samples (scaled as SyncExchange::combine's
  /// for `nominal`), `state` their mean. A report per worker in worker order, its staleness the
  /// age of the version its round computed at.
  CombinedStep collect(std::span<float> gradients, std::span<float> state, std::int64_t step,
                       std::int64_t nominal);
  /// Sends version `version` (the parameters after `version` updates) to every worker,
  /// non-blocking.
  void publish(std::span<const float> parameters, std::span<const float> state,
               std::int64_t version);
  /// The end after step `step`: sends `stop` to every worker, discards their sums until each
  /// one's done, and waits for every message to be delivered.
  void finish(std::int64_t step, int stop);
  /// Sums received after the end (rounds computed past the last step).
  std::int64_t discarded() const { return discarded_; }

  // A worker.

  /// A version held from the start (before any message), oldest first: the parameters and
  /// state (WorkerVersions: round t computes at max(the first held, t - TAU)).
  void hold(std::int64_t version, std::span<const float> parameters, std::span<const float> state);
  /// Waits until round `round`'s version has come (or the master's stop), forgets older versions
  /// and copies it into `parameters`; `state` gets the newest state held (batch-norm statistics
  /// are not delayed). Returns kContinue, or the master's StopCode.
  int take(std::int64_t round, std::span<float> parameters, std::span<float> state);
  /// The version the last take() gave.
  std::int64_t last_version() const { return version_; }
  /// Sends the sum of round `round`, computed at `version` (its previous send completes first).
  void send(std::span<const float> gradients, std::span<const float> state,
            const WorkerReport& report, std::int64_t round, std::int64_t version);
  /// After the master's stop: the done mark, and every send delivered.
  void finish_worker();
  /// Seconds of the last send (completing the previous one) and of the last take's wait.
  double last_send_time() const { return send_time_; }
  double last_wait_time() const { return wait_time_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::int64_t discarded_ = 0;
  double send_time_ = 0, wait_time_ = 0;
  std::int64_t version_ = 0;
};

}  // namespace mbkit::train
