// Workers emulated inside one process (--emulate N, mbkit.7 "Cluster emulation"): the
// synchronous methods' transport that moves nothing. FedScale and FedML Parrot emulate
// thousands of federated clients this way; here the clients are the workers of a synchronous
// data-parallel step.
//
// The process plays rank 0 of a run of N workers (and, under ps, the master) on the virtual
// clock. It holds a network per lane (below); each emulated worker is its slice of one dataset
// in memory (data::SplitRows, a few kilobytes of order each), its straggler draws and its
// worker round.
// A step runs every worker's round, each from the step's parameters and state, and adds its
// gradient, state and report into one sum in worker order (add_worker_to_sum), in the order
// and with the additions of the shared-memory sum: a run gives the bits of the same run under
// mpirun with a process per worker and --allreduce shm.
//
// --threads T spreads the workers over T lanes, a thread each (the calling thread is lane 0)
// with a network of its own on a one-thread backend: lane t computes workers t, t + T, ...
// and adds each into the sum when its turn comes (a ticket: worker w waits for w - 1's
// addition), so the sum, the reports and the network's state afterwards (the last worker's)
// are T = 1's to the bit for every T. A worker's round depends only on the worker (its
// loader, its straggler and dropout streams, its compute model), never on its lane.
//
//   memory: a network per lane, one sum (gradients + state + 11 floats per worker), the
//           split's rows, two batches per lane, per worker its loader's order and a round
//           (about 2 KB);
//   time:   the workers' compute over T cores, one pass over the gradients per worker to add
//           it up (one worker at a time); each lane's next batch is prepared on a helper
//           thread of its own meanwhile (as a one-process run's loader prefetches on its own
//           thread; not where --prefetch is 0).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/data/loader.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/run_clock.hpp"
#include "mbkit/train/step_selection.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/train/worker_round.hpp"

namespace mbkit::train {

class BatchAhead;
class LaneThreads;

class EmulatedWorkers {
 public:
  /// Loads the training split of options.data once and gives each of `workers` workers its
  /// slice (as a run with a rank per worker slices it), at its batch (worker_batch_size).
  /// `servers`: 1 under ps (worker w is rank w + 1), 0 under allreduce.
  /// Under mpirun a rank hosts its share (Role::emulated_first, emulated_hosted): workers
  /// `first` to `first + hosted - 1` of the `workers`; hosted < 0: all of them.
  EmulatedWorkers(const TrainOptions& options, int workers, int servers, int first = 0,
                  int hosted = -1);
  EmulatedWorkers(const EmulatedWorkers&) = delete;
  EmulatedWorkers& operator=(const EmulatedWorkers&) = delete;
  ~EmulatedWorkers();

  /// The emulated run's workers, and the ones this process hosts (all, without mpirun).
  int workers() const { return workers_; }
  int first() const { return first_; }
  int hosted() const { return static_cast<int>(loaders_.size()); }
  const data::DatasetInfo& info() const { return rows_->info; }
  data::ImageShape shape() const { return rows_->shape; }
  /// Rows over the hosted workers, and the most batches a hosted worker's epoch has (a run's
  /// steps per epoch: under mpirun, gathered over the ranks).
  std::uint64_t total_rows() const;
  std::int64_t most_batches() const;
  /// The compute model of worker `w`: its rank's entry of --compute-model, if any.
  std::optional<ComputeModel> compute_model(const ComputeModels& models, int w) const;
  int rank_of(int w) const { return w + servers_; }
  /// Lanes computing workers at once: --threads under --emulate, at most one per hosted worker.
  int lanes() const { return lanes_count_; }

  /// DBSL (emulated_dbsl.hpp): every hosted worker reads the whole split, worker w in batches
  /// of `batches[w]` (a batch per worker of the run), as DBSL's worker processes do (its plan);
  /// call before make_rounds().
  void read_whole_split(const std::vector<int>& batches);
  /// Hosted worker w's loader (DBSL's rounds seek it to their permutation).
  data::DataLoader& loader(int w) { return *loaders_.at(static_cast<std::size_t>(w - first_)); }
  /// Whether this process hosts worker w (all of them without mpirun).
  bool hosts(int w) const { return w >= first_ && w < first_ + hosted(); }

  /// The rounds, once the network, the clock and AMB's rule are known.
  struct RoundParts {
    nn::Network& net;
    const RunClock& clock;
    const emulation::Slowdown& slowdown;
    const ComputeModels& compute_models;
    std::optional<emulation::StragglerProfile> stragglers;
    std::uint64_t seed = 1;
    RoundRule rule;
    /// The run's model on another backend (a lane's network; its values are copied from `net`
    /// every step). Needed only where lanes() > 1.
    std::function<std::unique_ptr<nn::Network>(nn::Backend&)> make_network;
    /// --cpu-quota by rank (none: no worker under a quota).
    const emulation::CpuQuota* cpu_quota = nullptr;
  };
  void make_rounds(const RoundParts& parts);
  /// A resumed run: every hosted worker is past its first round (WorkerRound::skip_warmup).
  void skip_warmup();

  /// Worker w's round (the asynchronous master runs them one at a time, emulated_async.hpp;
  /// K-batch-sync plans its batches before the step).
  WorkerRound& round(int w) { return *rounds_.at(static_cast<std::size_t>(w - first_)); }

  /// Resume: every worker's induced delays continue after `rounds` rounds.
  void skip_rounds(std::int64_t rounds);
  /// Calls `f` on each hosted worker's loader, in worker order (resume seeks them).
  void for_each_loader(const std::function<void(data::DataLoader&)>& f);

  /// Floats of the sum: gradients, state and a report slot per worker (SyncExchange's fused
  /// buffer for this many workers).
  std::size_t sum_floats(std::size_t gradient_floats, std::size_t state_floats) const;

  /// The hosted workers' arrivals at the master this step, in worker order, for a `selection`
  /// that drops gradients: each round's ready time predicted before it computes
  /// (WorkerRound::predict_ready: a compute model), turned into an arrival by `arrival_of(w,
  /// ready)`. Call it once per step, before run_step.
  std::vector<double> predict_arrivals(const StepSelection& selection,
                                       const std::function<double(int, double)>& arrival_of);

  /// One synchronous step: every hosted worker's round (loss_scale as WorkerRound::run), from
  /// the network's current parameters and state, added into `sum` (sum_floats() floats) in
  /// worker order (a share's: from zeros; the other workers' report slots stay zero). `stop_of(w)`
  /// is the StopCode worker w's report carries (called in worker order, on any lane's thread). The
  /// network's state is the last hosted worker's afterwards; its gradients are scratch. Returns the
  /// hosted workers' reports, in worker order. `used` (empty: all) has a flag per worker of the
  /// run: whose gradient the step takes (the step's selection over every worker's arrival, or a
  /// K-batch-sync plan); a worker not used adds zeros, as its rank would send them
  /// (drop_contribution).
  std::vector<WorkerReport> run_step(std::int64_t step, double loss_scale, std::span<float> sum,
                                     const std::function<int(int)>& stop_of,
                                     const std::vector<bool>& used);
  /// Local SGD (mbkit/train/local_sgd.hpp): each worker on a model of its own. On the thread
  /// of worker w's lane (`lane`, its network `net`), `load` puts the worker's model and state
  /// in before its round and `update` takes its own optimizer step and keeps the model after;
  /// `loss_scale(w)` is its round's (WorkerRound::run: 1 / its own batch).
  struct OwnModels {
    std::function<double(int w)> loss_scale;
    std::function<void(int w, int lane, nn::Network& net)> load;
    std::function<void(int w, int lane, nn::Network& net, WorkerReport& report)> update;
  };
  /// One local step: every hosted worker's round and update over the lanes, as run_step's
  /// rounds; only the reports are added into `report_sum` (a report slot per worker of the
  /// run, zeroed first), in worker order, each with the stop code `stop_of(w)`. Returns the
  /// hosted workers' reports, in worker order.
  std::vector<WorkerReport> run_local_step(std::int64_t step, std::span<float> report_sum,
                                           const std::function<int(int)>& stop_of,
                                           const OwnModels& own);
  /// Lane t's network (lane 0's is the run's), for what runs on it beside the rounds.
  nn::Network& lane_network(int t) { return *lanes_.at(static_cast<std::size_t>(t)).net; }

 private:
  /// A lane: the network its workers compute on, and the helper preparing its next batch.
  struct Lane {
    std::unique_ptr<nn::Backend> backend;  ///< lanes but 0: a one-thread backend of their own
    std::unique_ptr<nn::Network> own;      ///< lanes but 0: the run's model, on `backend`
    nn::Network* net = nullptr;            ///< lane 0: the run's network
    /// Prepares the lane's next worker's batch (none with --prefetch 0).
    std::unique_ptr<BatchAhead> ahead;
  };
  /// Worker w's round on its lane's network, from the step's parameters and state (`own`:
  /// from its own model): the report, the gradient and state left in the lane's network.
  WorkerReport compute_worker(Lane& lane, int w, std::int64_t step, double loss_scale,
                              const OwnModels* own);
  /// Every hosted worker's round over the lanes (compute_worker), then `add(w, net, report)`
  /// in worker order, each when its turn comes (the ticket). Without `own` each lane's network
  /// takes the run's parameters first.
  std::vector<WorkerReport> run_lanes(
      std::int64_t step, double loss_scale, const OwnModels* own,
      const std::function<void(int w, nn::Network& net, WorkerReport& report)>& add);
  Lane& lane_of(int w) { return lanes_[static_cast<std::size_t>((w - first_) % lanes_count_)]; }
  data::DataLoader& loader_of(int w) { return *loaders_[static_cast<std::size_t>(w - first_)]; }

  const TrainOptions& options_;
  int servers_;
  int workers_;    ///< the emulated run's
  int first_ = 0;  ///< the first hosted worker
  int lanes_count_ = 1;
  std::shared_ptr<const data::SplitRows> rows_;
  /// Two batch buffers per lane, by the parity of the lane's round: worker w's batch is in use
  /// while the lane's helper prepares worker w + lanes()'s (K-batch-sync: a buffer per loader).
  std::vector<std::shared_ptr<data::Batch>> batches_;
  std::vector<std::unique_ptr<data::DataLoader>> loaders_;
  std::vector<std::unique_ptr<WorkerRound>> rounds_;
  /// By hosted worker (w - first_): whose dropout masks its rounds draw
  /// (WorkerRound::Parts::masks_of).
  std::vector<int> masks_of_;
  nn::Network* net_ = nullptr;
  std::vector<float> step_state_;  ///< the state every worker starts the step from
  /// Last but one: their helper threads stop before the loaders they prepare go.
  std::vector<Lane> lanes_;
  /// Last: the lanes' threads stop before anything they use goes.
  std::unique_ptr<LaneThreads> threads_;
};

}  // namespace mbkit::train
