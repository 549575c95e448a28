// The plan of a dual batch size learning run (DBSL, mb-train-dbsl, mbkit.7): which batch size
// and how many samples each worker takes per round, so that every round takes the same
// predicted time (K.-W. Lu et al., COMPSAC 2022, Eq. 8; algorithms.md §3.2).
//
// A device's time model is t(x) = a x + b seconds per batch of x samples; a round of d samples
// at batch x takes about (a + b / x) d (Eq. 3). With N training samples, n workers of which
// n_S are small, base batch B_L and extra time k >= 1, equal devices give (Eq. 8):
//   d_L = int(k N / n),  d_S = int((N - d_L n_L) / n_S),  B_S = int(b / ((a + b/B_L) d_L/d_S - a)).
//
// Unequal devices (each worker its own a_i, b_i), beyond the paper: the all-large round time
// T0 is the one at which the workers together take N samples at B_L,
//   T0 = N / sum_i 1 / (a_i + b_i / B_L),  and T = k T0;
// a large worker takes d_i = int(T / (a_i + b_i / B_L)) samples; the samples left,
// R = N - sum_large d_i, go to the small workers in proportion to 1 / a_j (what each could
// take in T at an unbounded batch), d_j = int(R (1/a_j) / sum_small 1/a), and each small worker
// gets the batch that makes its round take T: B_j = int(b_j / (T / d_j - a_j)). With equal
// devices every step is Eq. 8's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mbkit/train/time_model.hpp"

namespace mbkit::train {

/// A round of `samples` at `batch` on `model`, as the plan predicts it (Eq. 3: (a + b / x) d).
inline double round_time(const TimeModel& model, double samples, double batch) {
  return (model.a + model.b / batch) * samples;
}

/// What the plan is made from.
struct DbslPlanInput {
  std::int64_t samples = 0;  ///< N: training samples of an epoch
  int workers = 0;           ///< n
  int small_workers = 0;     ///< n_S: the last n_S workers are the small ones
  int base_batch = 0;        ///< B_L
  double extra_time = 1;     ///< k
  /// One model for every worker, or one per worker (workers entries).
  std::vector<TimeModel> models;
};

/// One worker's share of a round.
struct DbslWorkerPlan {
  bool small = false;
  int batch = 0;              ///< B_L or its B_S
  std::int64_t samples = 0;   ///< d_L or its d_S
  double factor = 1;          ///< d / d_L of a small worker (1 for large): the update factor
  double predicted_time = 0;  ///< (a + b / batch) samples, seconds
};

struct DbslPlan {
  std::vector<DbslWorkerPlan> workers;
  double base_time = 0;            ///< T0: the all-large round time
  double target_time = 0;          ///< T = k T0
  std::int64_t large_samples = 0;  ///< d_L (of the first large worker; 0 when all are small)
  /// --calibrate: each worker's measured model and the r^2 of its fit (empty otherwise).
  std::vector<TimeModel> calibrated;
  std::vector<double> r_squared;
  /// Samples of a round of every worker (about N).
  std::int64_t total_samples() const;
};

/// Eq. 8 with equal devices, exactly as the original computes it. Impossible plans (k < 1,
/// more small workers than workers, a small batch of 0 or less) are usage errors that say why.
DbslPlan eq8_plan(const DbslPlanInput& input);

/// The plan for per-worker models (the generalisation above); equal models give eq8_plan's.
DbslPlan dbsl_plan(const DbslPlanInput& input);

/// "A,B" (seconds per sample, seconds per batch) as --time-model-ab takes it; a usage error
/// naming `flag` when it is not two finite numbers with a >= 0, b >= 0, a + b > 0.
TimeModel parse_time_model_ab(const std::string& text, const std::string& flag);

/// The plan as a table for people (one row per worker) or as JSON.
std::string plan_table(const DbslPlan& plan, const DbslPlanInput& input);
std::string plan_json(const DbslPlan& plan, const DbslPlanInput& input);

}  // namespace mbkit::train
