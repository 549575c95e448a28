// mb-bench-partitions --fit: the DBSL time model t(B) = a B + b of every rank (the lead's
// train/time_model.hpp fits and stores it), from the median step time at P = 1 of each batch
// size, as mb-train-dbsl reads it with --time-model.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "mbkit/bench/partitions.hpp"
#include "mbkit/train/time_model.hpp"

namespace mbkit::bench {

/// What each rank measured on (by rank).
struct RankDevice {
  std::string host;
  int threads = 0;
  std::string device;  ///< the backend's description
};

/// A usage error naming --fit unless `splits` time at least two batch sizes at P = 1.
void check_fit_splits(const std::vector<Split>& splits);

/// A record per rank: its points (batch size, median seconds per step at P = 1) and their fit.
std::vector<train::TimeModelRecord> fit_time_models(const PartitionsRun& run,
                                                    const std::vector<RankDevice>& devices);

/// '#' lines: a, b, r^2 and the largest relative residual of each rank's fit.
void write_fits(std::ostream& out, const std::vector<train::TimeModelRecord>& records);

}  // namespace mbkit::bench
