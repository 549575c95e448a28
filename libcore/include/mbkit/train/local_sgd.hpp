// Local SGD, or periodic averaging (mb-train-fmb --local-steps tau; Zinkevich et al. 2010,
// Stich 2019, Lin et al. 2020; the local-update SGD of Wang & Joshi 2018): each worker takes
// tau SGD steps on its own copy of the model, at its own batches, then the workers' models are
// averaged and every worker goes on from the average.
//
// A step of the run (a row of the log) is one local step: each worker's round at one batch and
// its own optimizer step. Every tau-th step (by the run's step count, so that a resumed run
// averages where the straight run does) also averages the models: parameters, the network's
// state (batch-norm statistics) and the optimizer state (momentum, Adam's moments), so that
// after an averaging every worker holds one model and any rank can evaluate or save it. The
// run also averages at a step an evaluation, a checkpoint (every so many steps or epochs), the
// planned end or a stop (signal, time budget, divergence) follows: evaluations and checkpoints
// only ever see
// the average. The workers' reports (a few floats each) are still combined at every step, for
// the log and the stop codes; the model travels only at an averaging.
//
// --local-steps adacomm (AdaComm, Wang & Joshi 2018) counts a period from the last averaging
// and lets rank 0 choose tau anew at the first averaging after each --adacomm-interval seconds
// (TrainingRun::adapt_period).
//
// The average is taken by the synchronous exchange (SyncExchange): the models summed in the
// transport's order (the shared-memory sum and --emulate: worker order), then times 1/W, so
// --emulate N gives the bits of N ranks with --allreduce shm (or ps with --allreduce shm), for
// every --threads (the workers' local steps on the lanes, EmulatedWorkers::run_local_step).
// Under mpirun each rank hosts a share of the N workers: the ranks' sums of their workers'
// models are added in rank order (TrainingRun::combine_shares), as the synchronous step's
// gradients are.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// Whether the run's step `steps_done` (counted from 1) ends a period of `tau` local steps.
inline bool ends_period(std::int64_t steps_done, int tau) {
  return tau > 0 && steps_done % tau == 0;
}

/// A model's trainable part as one flat vector: the parameters, then each optimizer state
/// buffer in the optimizer's order (the network's state travels apart, as the exchange's
/// state). On a host-accessible backend.
std::size_t model_floats(const nn::Network& net, optim::Optimizer& optimizer);
void read_model(nn::Network& net, optim::Optimizer& optimizer, std::span<float> model);
void write_model(std::span<const float> model, nn::Network& net, optim::Optimizer& optimizer);

/// The sum of the workers' models times 1 / workers, in place (the exchange's sum in).
void finish_average(std::span<float> model, int workers);

/// --emulate N: each hosted emulated worker's model between averagings, as one flat vector (the
/// model, then the network's state): hosted x (parameters + optimizer state + state) floats.
/// Workers on different lanes load and store their own copies at once.
class LocalModels {
 public:
  LocalModels(int workers, std::size_t model, std::size_t state);
  /// Every worker's copy becomes the network's current model and state.
  void set_all(nn::Network& net, optim::Optimizer& optimizer);
  /// Worker `w`'s copy into the network and optimizer, and back.
  void load(int w, nn::Network& net, optim::Optimizer& optimizer) const;
  void store(int w, nn::Network& net, optim::Optimizer& optimizer);
  std::span<const float> model(int w) const;
  std::span<const float> state(int w) const;
  std::size_t bytes() const { return copies_.size() * sizeof(float); }

 private:
  std::size_t model_, state_;
  std::vector<float> copies_;
  std::span<float> copy(int w);
};

/// The virtual clock of local SGD's steps. Between averagings each worker runs its rounds
/// back to back on its own; a local step's time is how far it moved the slowest worker's
/// total since the period began, and the averaging step adds the one exchange (ps or
/// allreduce, as sync_step_time) after the slowest worker's whole period. A period's steps
/// thus add up to the slowest worker's sum of its rounds plus the exchange.
class LocalSgdClock {
 public:
  /// A local step's rounds (one per worker): its time.
  double local_step(const std::vector<SyncWorkerTime>& rounds);
  /// The averaging step's rounds: its time (`end`) and the exchange's timing, per worker,
  /// relative to the period's start; the next period starts after it.
  SyncStepTime averaging_step(const std::vector<SyncWorkerTime>& rounds, bool parameter_server,
                              const CommModel& comm, std::uint64_t bytes);
  /// Each worker's delay and compute since the period began.
  const std::vector<SyncWorkerTime>& period() const { return period_; }

 private:
  double add(const std::vector<SyncWorkerTime>& rounds);
  std::vector<SyncWorkerTime> period_;
  double elapsed_ = 0;  ///< the slowest worker's total so far in the period
};

}  // namespace mbkit::train
