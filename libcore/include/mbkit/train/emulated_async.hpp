// The asynchronous parameter server with its workers emulated inside this process (--emulate N
// --async): AsyncMaster's virtual clock without messages. The master takes gradients in the
// order of their virtual arrival (VirtualArrivals, the same rule and the same code path's
// decisions as a rank per worker), and each worker's round runs when its gradient is taken,
// on the parameters it held when the round started. K-async and the staleness bound are the
// same AsyncRule and async_rule.hpp functions as AsyncMaster's.
//
// A round's ready time must be known when it starts, before its gradient is computed, for the
// order of arrivals: WorkerRound::predict_ready(), which needs a compute model (--compute-model).
// Computing the gradient later, when it arrives, is what keeps the memory small: no gradient is
// kept but K-async's held ones, and the parameter sets some worker's round still starts from.
//
//   memory: one network, the gradient sum, K-async's held gradients (parameters + state each,
//           as AsyncMaster holds the message), and the parameter sets (parameters + state)
//           still referenced by a worker's round in flight: at most one per update made while
//           the slowest round ran (about N with the count rule at one gradient an update);
//   time:   the workers' compute, one pass over the gradients per gradient taken, and a copy
//           of the held parameters into the network before each round.
//
// Under mpirun with --emulate (ranks hosting shares of the workers, Role::shares) every rank
// runs this master alike: the same arrivals, the same publications (each applies the same
// updates) and the same parameter sets kept. A round's ready time is predicted by the rank
// hosting its worker and broadcast from it when the round starts; its round runs there when
// its gradient is taken, and its gradient, state and report are broadcast from it, so every
// rank takes the one process's values in its order (its bits for every R).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/emulated_workers.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

class EmulatedAsyncMaster final : public AsyncCombiner {
 public:
  struct Parts {
    EmulatedWorkers& workers;
    nn::Network& net;  ///< the master's network, on which the workers' rounds run too
    const TrainOptions& options;
    /// A parameter message's modelled cost: the receive time each round reports.
    double modelled_receive = 0;
    /// The StopCode a worker's report carries (a signal).
    std::function<int()> stop_of;
    /// Called with each round's number (from 1) and report, as a worker's --worker-log line.
    std::function<void(std::int64_t, const WorkerReport&)> worker_line;
    /// Under mpirun, the ranks hosting shares of the workers (EmulatedWorkers::hosts); null:
    /// this process hosts them all.
    const comm::World* shares = nullptr;
  };
  explicit EmulatedAsyncMaster(Parts parts);

  void start(std::span<const float> parameters, std::span<const float> state,
             std::int64_t step) override;
  CombinedStep collect(std::span<float> gradients, std::span<float> state, int min_gradients,
                       std::int64_t step) override;
  void publish(std::span<const float> parameters, std::span<const float> state,
               std::int64_t step) override;
  void finish(std::int64_t step, int code) override;
  bool workers_done() const override { return false; }  // only the master stops them
  int workers_stop() const override { return kContinue; }
  void use_time_window(double seconds) override { window_ = seconds; }
  void use_rule(const AsyncRuleSettings& settings) override;
  void use_virtual_clock(double message, double now) override;
  double virtual_now() const override { return now_; }
  void advance(double seconds) override { now_ += seconds; }

 private:
  /// A published parameter set: master step, parameters then state.
  struct Snapshot {
    std::int64_t step = 0;
    std::vector<float> values;
  };
  struct InFlight {
    std::shared_ptr<const Snapshot> held;  ///< the parameters its round started from
    std::int64_t rounds = 0;               ///< rounds it finished before this one
    double ready = 0;                      ///< the round's predicted ready time
    double comm_delay = 0;                 ///< --async-delay-std: its message's extra delay
  };

  /// Worker w's round starts at virtual time `start`, from the newest set that reached it.
  void begin_round(int w, double start);
  /// Runs worker w's round in flight on the network (its gradient and state are then the
  /// network's); returns the worker's report.
  WorkerReport run_round(int w);
  /// Under shares, the `bytes` at `data` as the rank hosting worker w has them, on every rank.
  void from_host(int w, void* data, std::size_t bytes) const;
  /// The report as the master takes it at master step `step`: the fields a message carries.
  WorkerReport as_taken(int w, const WorkerReport& report, std::int64_t step) const;

  /// K-async: a gradient that came in while its worker's was already in the update.
  struct HeldGradient {
    std::size_t worker;
    WorkerReport report;
    std::vector<float> values;  ///< its gradient, then its state
  };

  Parts parts_;
  AsyncRule rule_;
  std::optional<VirtualArrivals> arrivals_;
  double now_ = 0;
  double window_ = 0;
  std::vector<InFlight> in_flight_;
  std::vector<double> blocked_;    ///< --staleness-bound: seconds a round in flight waited to start
  std::deque<HeldGradient> held_;  ///< in order of arrival
  std::vector<std::vector<float>> spare_values_;  ///< held gradients' buffers to reuse
  /// history_[i]: publication arrivals_->first_kept() + i.
  std::deque<std::shared_ptr<const Snapshot>> history_;
  std::shared_ptr<const Snapshot> latest_;
  std::vector<std::shared_ptr<Snapshot>> spare_;  ///< sets to reuse once nothing holds them
};

}  // namespace mbkit::train
