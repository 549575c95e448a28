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
/// mb-train-dbsl's defaults where they differ from mb-train-fmb's: the DBSL original's
/// momentum SGD (0.9) at lr 0.1, times 0.2 at epochs 80 and 120.
TrainOptions dbsl_defaults();
/// With options.dbsl.enabled set: --plan prints the plan and returns 0; otherwise dual batch
/// size learning (mb-train-dbsl), with run_train_fmb's exit statuses.
int run_train_dbsl(TrainOptions options);

}  // namespace mbkit::tools::train
