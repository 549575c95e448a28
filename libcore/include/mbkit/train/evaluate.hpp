// Evaluation of a network on a loader's rows: loss, top-1 and top-k accuracy, the confusion
// matrix (rows: true class, columns: predicted) and per-class accuracy. Results of several
// ranks, each on its own slice, add up exactly (every sample counted once).
#pragma once

#include <cstdint>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/nn/network.hpp"

namespace mbkit::train {

struct EvalResult {
  int classes = 0;
  int top_k = 5;
  std::int64_t samples = 0;
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t top_k_correct = 0;
  std::vector<std::int64_t> confusion;  ///< classes x classes

  double loss() const { return samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0; }
  double accuracy() const;
  double top_k_accuracy() const;
  /// Correct / samples per true class (NaN for a class with no samples).
  std::vector<double> per_class_accuracy() const;
  /// Sums the results of all ranks (in place): the counts exactly, the losses added in rank
  /// order whatever MPI's order of addition, as sum_in_rank_order (so an emulated run's
  /// evaluation has the bits of a run with a process per rank).
  void reduce(const comm::World& world);
  /// The results of several slices, by rank: counts summed, losses added in that order.
  static EvalResult sum_in_rank_order(const std::vector<EvalResult>& results);
};

/// One pass over the loader's epoch 0 in evaluation mode (running batch-norm statistics, no
/// dropout). The loader should not shuffle; it is rewound first.
EvalResult evaluate(nn::Network& network, data::DataLoader& loader, int top_k = 5);

/// One batch of the loader, batch `index` of `epoch` (a shuffling loader: a random draw of
/// its batch size), in evaluation mode: the AMB original's evaluation on one test batch.
EvalResult evaluate_batch(nn::Network& network, data::DataLoader& loader, std::int64_t epoch,
                          std::int64_t index, int top_k = 5);

}  // namespace mbkit::train
