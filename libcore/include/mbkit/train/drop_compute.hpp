// DropCompute (Giladi et al., NeurIPS 2023): each worker computes its batch as micro-batches and
// drops those it would start after a compute-time threshold; the step sums what was done. Its
// round is AMB's (anytime.hpp) with the batch's micro-batches as the most a worker computes; what
// it adds is the threshold's choice, made here.
//
// --drop-compute auto chooses the threshold that maximises the expected samples per second of a
// step over the emulated cluster's own distribution: each worker's micro-batch cost (measured or
// modelled, times its --slowdown) and delays drawn from its --induce profile or trace. A worker
// with delay d and micro-batch cost c starts micro-batch k > 0 only while d + k c < threshold, so
// it computes n = min(M, max(1, ceil((threshold - d) / c))) micro-batches and is ready at d + n c;
// a step takes the slowest worker plus the exchange.
#pragma once

#include <vector>

namespace mbkit::train {

struct DropComputeChoice {
  double threshold = 0;                ///< seconds into a worker's round
  double samples_per_second = 0;       ///< expected, at the threshold
  double full_batches_per_second = 0;  ///< expected samples per second with nothing dropped
};

/// `micro_costs[w]`: worker w's seconds per micro-batch; `micro_batches` (M) per batch of
/// `micro_size` samples each; `delays[t][w]`: worker w's delay in trial t (one trial of zeros
/// without stragglers); `exchange`: seconds a step spends after the slowest worker. Candidates:
/// 400 thresholds from the cheapest micro-batch to the slowest full round; ties go to the larger
/// threshold (less dropped).
DropComputeChoice choose_drop_compute_threshold(const std::vector<double>& micro_costs,
                                                int micro_batches, int micro_size,
                                                const std::vector<std::vector<double>>& delays,
                                                double exchange);

}  // namespace mbkit::train
