// The asynchronous parameter server with its workers emulated inside this process (--emulate N
// --async): AsyncMaster's virtual clock without messages. The master takes gradients in the
// order of their virtual arrival (VirtualArrivals, the same rule and the same code path's
// decisions as a rank per worker), and each worker's round runs when its gradient is taken,
// on the parameters it held when the round started.
//
// A round's ready time must be known when it starts, before its gradient is computed, for the
// order of arrivals: WorkerRound::predict_ready(), which needs a compute model (--compute-model).
// Computing the gradient later, when it is taken, is what keeps the memory small: no gradient is
// held, only the parameter sets some worker's round still starts from.
//
//   memory: one network, the gradient sum, and the parameter sets (parameters + state) still
//           referenced by a worker's round in flight: at most one per update made while the
//           slowest round ran (about N with the count rule at one gradient an update);
//   time:   the workers' compute, one pass over the gradients per gradient taken, and a copy
//           of the held parameters into the network before each round.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/nn/network.hpp"
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
  /// Runs worker w's round and adds its gradient and state into the sums; returns the report
  /// as the master receives it.
  WorkerReport run_round(int w, std::span<float> gradients, std::span<float> state,
                         std::int64_t step);

  Parts parts_;
  std::optional<VirtualArrivals> arrivals_;
  double now_ = 0;
  double window_ = 0;
  std::vector<InFlight> in_flight_;
  /// history_[i]: publication arrivals_->first_kept() + i.
  std::deque<std::shared_ptr<const Snapshot>> history_;
  std::shared_ptr<const Snapshot> latest_;
  std::vector<std::shared_ptr<Snapshot>> spare_;  ///< sets to reuse once nothing holds them
};

}  // namespace mbkit::train
