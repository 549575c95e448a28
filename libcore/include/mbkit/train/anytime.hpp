// Anytime mini-batch (AMB): a worker's round of micro-batches under a time limit, as the AMB
// original (mbkit.7): the batch is split into micro-batches of floor(batch / partitions)
// samples (the leftover is not used); before each micro-batch the worker goes on if it has
// done none yet, or if micro-batches remain and the time since the round started (induced
// delays included) is under the limit; a started micro-batch is finished.
#pragma once

#include <functional>

namespace mbkit::train {

/// How a batch of `batch` samples splits into micro-batches of (at most) `micro_size`.
struct MicroBatches {
  int size = 0;       ///< samples per micro-batch (the whole batch when it is shorter)
  int available = 0;  ///< micro-batches in the batch (at least 1)
};
MicroBatches split_batch(int batch, int micro_size);

/// What a round did.
struct AnytimeRound {
  int done = 0;                 ///< micro-batches computed (at least 1)
  bool finished_early = false;  ///< all of them, with time left: the batch was too small
  bool cut = false;             ///< ended by `cut()` (the round was abandoned)
};

/// Runs micro-batches 0, 1, ... through `run(k)` while the rule above allows; `elapsed()` is the
/// round's time so far on the run's clock, `between()` (optional) runs before every micro-batch
/// but the first, and then `cut()` (optional): true ends the round there.
AnytimeRound run_anytime_round(const MicroBatches& plan, double time_limit,
                               const std::function<double()>& elapsed,
                               const std::function<void(int)>& run,
                               const std::function<void()>& between = {},
                               const std::function<bool()>& cut = {});

}  // namespace mbkit::train
