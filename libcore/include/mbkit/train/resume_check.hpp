// Whether a run may continue a checkpoint as the same training: --resume with another --seed,
// --batch-size, --lr, --threads or dataset would continue silently, and the result would no
// longer be that of an uninterrupted run. --resume-anyway continues all the same.
#pragma once

#include <string>
#include <string_view>

#include "mbkit/data/format.hpp"
#include "mbkit/train/checkpoint.hpp"

namespace mbkit::train {

/// The first option whose value this run (its resolved configuration `current`, config_json)
/// changes from the one `checkpoint` (read from `path`) was trained with, among those that
/// change the training (seed, batch size, learning rate and schedule, optimizer settings,
/// augmentation, threads, gradient compression, AMB and DBSL settings), then the dataset (its
/// name, pixel mean and std against `data`): one line naming the option and both values, or ""
/// when the run continues the same training. Options a checkpoint predates are not compared.
std::string changed_training(const Checkpoint& checkpoint, const std::string& path,
                             std::string_view current, const data::DatasetInfo& data);

/// A usage error (exit code 2) with changed_training's line and what to do, unless there is no
/// change; with `resume_anyway` a warning instead.
void require_same_training(const Checkpoint& checkpoint, const std::string& path,
                           std::string_view current, const data::DatasetInfo& data,
                           bool resume_anyway);

}  // namespace mbkit::train
