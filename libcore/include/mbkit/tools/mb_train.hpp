// mb-train-fmb: fixed mini-batch training, on one process or data-parallel under mpirun/srun
// (exchanges in mbkit/train/exchange.hpp), the library side of the tool: main() parses options
// into TrainOptions and calls run_train_fmb.
#pragma once

#include "mbkit/train/options.hpp"

namespace mbkit::tools::train {

using mbkit::train::AmbOptions;
using mbkit::train::TrainOptions;

/// Runs the training; returns the exit status: 0 when the run completed, 6 when a signal stopped
/// it after its state was saved (130/143 when there was no --checkpoint to save it to).
int run_train_fmb(const TrainOptions& options);
/// The same with options.amb.enabled set: anytime mini-batch training (mb-train-amb).
int run_train_amb(TrainOptions options);

}  // namespace mbkit::tools::train
