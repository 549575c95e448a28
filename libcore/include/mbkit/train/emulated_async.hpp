// The asynchronous parameter server with its workers emulated inside this process (--emulate N
// --async), or one of several (--servers S, each over its shard): AsyncMaster's virtual clock
// without messages. The master takes gradients in the order of their virtual arrival
// (VirtualArrivals, the same rule and the same code path's decisions as a rank per worker),
// and each worker's round runs when its gradient is first taken, on the parameters it held
// when the round started (every server's shard: EmulatedAsyncRounds). K-async and the
// staleness bound are the same AsyncRule and async_rule.hpp functions as AsyncMaster's.
//
// A round's ready time must be known when it starts, before its gradient is computed, for the
// order of arrivals: WorkerRound::predict_ready(), which needs a compute model (--compute-model).
// Computing the gradient later, when it arrives, is what keeps the memory small: no gradient is
// kept but those of rounds some server has yet to take, and the parameter sets some worker's
// round still starts from.
//
//   memory: the gradient sum of its shard, and the parameter sets (its shard + state) still
//           referenced by a worker's round in flight: at most one per update made while the
//           slowest round ran (about N with the count rule at one gradient an update);
//   time:   the workers' compute, one pass over its shard per gradient taken, and copies of
//           the held parameters into the network around each round; the bookkeeping costs
//           O(log N) an event (no pass over the workers or the sets in flight).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/nn/network.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/emulated_async_rounds.hpp"
#include "mbkit/train/emulated_workers.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/spare_pool.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

class EmulatedAsyncMaster final : public AsyncCombiner {
 public:
  struct Parts {
    EmulatedAsyncRounds& rounds;  ///< the workers' rounds, shared by the servers
    int server = 0;               ///< which of rounds.servers() this is (its shard)
    const TrainOptions& options;
  };
  explicit EmulatedAsyncMaster(Parts parts);
  ~EmulatedAsyncMaster() override;

  void start(std::span<const float> parameters, std::span<const float> state,
             std::int64_t step) override;
  CombinedStep collect(std::span<float> gradients, std::span<float> state, int min_gradients,
                       std::int64_t step) override;
  void publish(std::span<const float> parameters, std::span<const float> state,
               std::int64_t step) override;
  void finish(std::int64_t step, int code) override;
  bool workers_done() const override { return ended_; }  // another server stopped the run
  int workers_stop() const override;
  void use_time_window(double seconds) override { window_ = seconds; }
  void use_rule(const AsyncRuleSettings& settings) override;
  void use_virtual_clock(double message, double sender, double now) override;
  double virtual_now() const override { return now_; }
  void advance(double seconds) override { now_ += seconds; }
  /// This server's loop failed between start() and finish(): the others stop waiting for it.
  void abandon();

 private:
  using Snapshot = EmulatedAsyncRounds::Snapshot;
  using Computed = EmulatedAsyncRounds::Computed;

  /// Worker w's round starts at virtual time `start`, from the newest set that reached it (or
  /// the worker is done: a server stopped without starting it).
  void begin_round(int w, double start);
  /// Worker w is done: its next round will not run.
  void retire(int w);
  /// The report as the master takes it at master step `step`: the fields a message carries.
  WorkerReport as_taken(int w, const WorkerReport& report, std::int64_t step) const;
  /// A parameter set to fill: a spare one (its buffer kept), or a new one.
  std::shared_ptr<Snapshot> new_snapshot();

  /// K-async: a gradient that came in while its worker's was already in the update.
  struct HeldGradient {
    std::size_t worker;
    std::shared_ptr<const Computed> round;
  };

  Parts parts_;
  std::size_t first_ = 0;  ///< its shard's first value
  /// Held from start() to finish(): the servers' loops run one at a time.
  std::unique_lock<std::mutex> running_;
  AsyncRule rule_;
  std::optional<VirtualArrivals> arrivals_;
  double now_ = 0;
  double window_ = 0;
  bool ended_ = false;
  std::vector<double> blocked_;    ///< --staleness-bound: seconds a round in flight waited to start
  std::vector<bool> retired_;      ///< workers whose rounds ended (another server's stop)
  int retired_count_ = 0;          ///< of retired_'s
  std::deque<HeldGradient> held_;  ///< in order of arrival
  /// history_[i]: publication arrivals_->first_kept() + i.
  std::deque<std::shared_ptr<const Snapshot>> history_;
  /// Sets nothing holds any more, to reuse: each set goes back here when its last holder lets
  /// it go (found without a scan of the about N sets in flight; a round's holder may let its
  /// set go on a helper thread). One set is forgotten about each publication: a few spares
  /// are enough.
  static constexpr std::size_t kSpareSnapshots = 16;
  SparePool<Snapshot> spare_;
};

}  // namespace mbkit::train
