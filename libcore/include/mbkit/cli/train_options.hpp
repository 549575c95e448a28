// The command-line options every training tool shares (mb-train-fmb now; the AMB and DBSL
// trainers later), as one CLI11 option group per topic.
#pragma once

#include <CLI/CLI.hpp>

#include "mbkit/train/options.hpp"

namespace mbkit::cli {

/// Declares the data, model, optimiser, schedule, length, evaluation and run options.
void add_train_options(CLI::App& app, train::TrainOptions& options);
/// Declares the options of data-parallel runs (stragglers, timeouts, the virtual clock) and,
/// with straggler_methods, the gradient exchange's (--comm, --allreduce, --bucket-mb, --servers,
/// --compress), --async and its rules and the straggler methods (--backup-workers,
/// --local-steps, ...): mb-train-dbsl refuses those, so does not declare them.
void add_distribution_options(CLI::App& app, train::TrainOptions& options,
                              bool straggler_methods = true);
/// Declares the options of anytime mini-batch training (--time-limit, --partitions).
void add_amb_options(CLI::App& app, train::TrainOptions& options);
/// Declares the options of dual batch size learning (--plan, the time model, --base-batch,
/// --extra-time, --small-workers, --update-factor, --sync) and sets the DBSL original's
/// defaults of the shared ones (momentum 0.9, lr 0.1 times 0.2 at epochs 80 and 120); --data
/// is not required (--plan needs none).
void add_dbsl_options(CLI::App& app, train::TrainOptions& options);
/// After parsing: parses the options given as text into their typed fields (straggler profile,
/// slowdown, cluster models, time limit, ...) and routes the options whose meaning depends on
/// the optimiser (--momentum and --epsilon for rmsprop and adam). A usage error names the flag.
void finish_train_options(const CLI::App& app, train::TrainOptions& options);

}  // namespace mbkit::cli
