// The timed steps of mb-bench-partitions on the engine's own pieces: the model from the zoo on
// the --device backend, the training data through the trainers' loader, the AMB worker's round
// (train::WorkerRound, anytime rule, no deadline) and the optimizer's update.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/bench/partitions.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/train/run_clock.hpp"

namespace mbkit::bench {

struct StepTimerOptions {
  models::ModelConfig model;
  std::string data;
  std::string device = "cpu";
  /// --precision.
  std::string precision = "fp32";
  int threads = 0;  ///< 0: the backend's default
  std::uint64_t seed = 1;
  int rank = 0;
  /// The AMB original's update: Adam with learning rate 1e-4.
  std::string optimizer = "adam";
  double lr = 1e-4;
};

class StepTimer {
 public:
  /// Opens the data, builds the backend, model and optimizer (errors name the flag or file).
  explicit StepTimer(const StepTimerOptions& options);
  ~StepTimer();

  /// Rows of the training split.
  std::uint64_t rows() const { return rows_; }
  /// The backend's description ("cpu: oneDNN 3.x, avx512_core, 1 thread").
  std::string backend() const { return backend_->description(); }
  int threads() const { return backend_->threads(); }

  /// Seconds of each of `steps` steps of `split`, after `warmup` untimed ones; `first`, if
  /// given, gets the first untimed step's seconds (NaN with no warm-up step): the process's
  /// first step of a run pays its one-time costs there (primitives created, memory touched).
  /// `load`, if given, gets the loader's background thread's CPU seconds per batch over the
  /// timed steps (0 when it loads inline: --prefetch auto on a process pinned to one core).
  std::vector<double> time_steps(const Split& split, int warmup, int steps, double* first = nullptr,
                                 double* load = nullptr);

 private:
  StepTimerOptions options_;
  std::uint64_t rows_ = 0;
  std::unique_ptr<nn::Backend> backend_;
  std::unique_ptr<nn::Network> net_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<data::DataLoader> loader_;  ///< of the current batch size
  train::RunClock clock_;
  emulation::Slowdown slowdown_;
  std::int64_t step_ = 0;
};

}  // namespace mbkit::bench
