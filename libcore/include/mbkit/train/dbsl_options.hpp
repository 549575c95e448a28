// From mb-train-dbsl's options to its plan (mbkit/train/dbsl_plan.hpp): the workers' time
// models and --plan's output.
#pragma once

#include <cstdint>
#include <vector>

#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/options.hpp"

namespace mbkit::train {

/// The workers' time models the options give: --time-model FILE (a record per rank, or one for
/// all: mbkit/train/time_model.hpp), --time-model-ab (every worker), or per-rank
/// --compute-model entries under --clock virtual (the same model: seconds per sample and per
/// batch), each multiplied by its rank's --slowdown factor (a slowed worker takes FACTOR times
/// as long). One entry when every worker's is the same, else one per worker (rank w + 1).
/// Empty when the options give none (--calibrate).
std::vector<TimeModel> time_models_from_options(const TrainOptions& options, int workers);

/// The plan: Eq. 8, operation for operation, for one model; the unequal-device plan else.
DbslPlan make_dbsl_plan(const TrainOptions& options, std::int64_t samples, int workers,
                        const std::vector<TimeModel>& models);

/// --plan: N from --train-samples or --data's train split, n from --workers or the launcher
/// (mpirun's or srun's world size, less the server); prints the table (or --json) on stdout.
/// Returns 0; a usage error when something is missing or the plan is impossible.
int print_dbsl_plan(const TrainOptions& options);

}  // namespace mbkit::train
