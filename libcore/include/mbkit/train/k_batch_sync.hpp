// K-batch-sync SGD (Dutta et al., AISTATS 2018, "Slow and Stale Gradients Can Win the Race"):
// every worker starts the step at the same parameters and computes whole batches back to back
// (a fast worker may finish several); the step ends when K batches in total are finished over
// all workers; every finished batch's gradient is used (a worker's several summed), the batches
// in flight are cancelled, and all restart at the new parameters.
//
// On the virtual clock with a compute model the step is known before it is computed: worker w's
// j-th batch is done at its induced delay plus j batch times (each with its --slowdown), so the
// step ends at T*, the K-th smallest completion time over all workers (ties to the lower worker,
// then its earlier batch: exactly K batches are taken), and worker w computes n_w, its batches
// done by T* (0: it sends zeros, as a dropped worker does). Its round is the worker round's with
// RoundRule::whole_batches (worker_round.hpp): n_w batches of its loader, read in order from its
// slice. The step's gradient is the mean over the K batches' samples (loss scale
// 1 / (K x batch), rescaled as FMB's when a batch was an epoch's short last one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mbkit::train {

struct KBatchStep {
  double end = 0;            ///< T*: the K-th completion, seconds after the step's start
  std::vector<int> batches;  ///< n_w by worker (summing to K)
};

/// `completions[w]`: worker w's batch completion times, ascending (K of them suffice).
KBatchStep plan_k_batch_step(int k, std::span<const std::vector<double>> completions);

/// The wall clock's form of the step (selecting_exchange.hpp), as the batches' gradients really
/// arrive at the master one after another, each tagged with the step whose parameters it was
/// computed at: the step takes the first K of its own, from any workers; one of an earlier
/// step (its worker had not yet seen the newer parameters), or one more of this step after
/// the K-th, is discarded.
class KBatchArrivals {
 public:
  KBatchArrivals(int k, int workers);
  /// Starts taking the batches of `step`: none taken yet.
  void begin(std::int64_t step);
  /// Whether worker `worker`'s batch computed at step `of` joins the step (else discarded).
  /// A batch of a later step than the one begun is a protocol error.
  bool take(int worker, std::int64_t of);
  /// Whether the step has its K batches.
  bool complete() const { return taken_ == k_; }
  /// Batches the step has taken so far.
  int taken() const { return taken_; }
  /// Batches each worker contributed to the step (summing to K once complete).
  const std::vector<int>& batches() const { return batches_; }

 private:
  int k_;
  std::int64_t step_ = 0;
  int taken_ = 0;
  std::vector<int> batches_;
};

}  // namespace mbkit::train
