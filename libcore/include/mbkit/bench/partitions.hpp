// mb-bench-partitions: what micro-batching costs. For a batch of B samples split into P
// micro-batches of B/P, a step is the AMB worker's round without a deadline (every micro-batch
// computed, gradients accumulated: train::WorkerRound with the anytime rule) and one optimizer
// update, as the AMB original's test_perf_partitions.py times it (algorithms.md 1.12). Steps
// are timed after warm-up steps; a configuration's row gives the time per step and per sample,
// min/median/max over its steps, for each rank.
#pragma once

#include <string>
#include <vector>

#include "mbkit/results/partition_timings.hpp"

namespace mbkit::bench {

/// The splits, timings and their files are results' (mbkit/results/partition_timings.hpp).
using results::PartitionsRun;
using results::Split;
using results::SplitTimes;

/// "16,32,64" into numbers >= 1 (a usage error naming `flag`).
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);
/// Every batch size with every partition count; usage errors for a count that does not divide
/// a batch size.
std::vector<Split> grid_splits(const std::vector<int>& batches, const std::vector<int>& partitions);
/// The original's sweep: B = 2^i for i = 2 ... log2(max_batch), P = 2^j for j = 0 ... i-1.
std::vector<Split> sweep_splits(int max_batch);

}  // namespace mbkit::bench
