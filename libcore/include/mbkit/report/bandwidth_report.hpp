// mb-report on mb-bench-bandwidth --append files: a row per run and size, so that runs at
// several numbers of ranks read side by side (the original's communication time against the
// number of workers, as numbers).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "mbkit/results/bandwidth_results.hpp"

namespace mbkit::report {

/// True when `path` is an HDF5 file of format "mbkit-bandwidth" (false for anything else,
/// missing files included: the metric-log reader then names what is wrong).
bool is_bandwidth_file(const std::string& path);

/// Every run of the files, in the order given, each file's by key.
std::vector<results::Run> read_bandwidth_runs(const std::vector<std::string>& paths);

/// Columns: ranks op mode size type time_us min_us max_us algbw_GBps busbw_GBps wrong.
void write_bandwidth_table(const std::vector<results::Run>& runs, std::ostream& out);
void write_bandwidth_csv(const std::vector<results::Run>& runs, std::ostream& out);
void write_bandwidth_json(const std::vector<results::Run>& runs, std::ostream& out);

}  // namespace mbkit::report
