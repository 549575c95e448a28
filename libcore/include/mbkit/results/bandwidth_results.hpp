// mb-bench-bandwidth's results: the rows it prints (a '#'-headed table) and the file of
// --append (mbkit-formats.5, "Bandwidth results"), which mb-report and mb-plot read. A module of
// its own, as metrics/ is for the metric log, so that the readers need none of the benchmark.
// What the columns measure is told in mbkit/bench/bandwidth.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mbkit::results {

/// One line of the table.
struct Row {
  std::string op;  ///< the operation, or exchange-MODE
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string type;
  double avg_us = 0, min_us = 0, max_us = 0;  ///< one iteration, over ranks
  double algbw_gbps = 0, busbw_gbps = 0;      ///< from the average time
  std::int64_t wrong = 0;                     ///< wrong elements over all ranks
};

/// The columns, one word each (the last '#' line before the rows).
const char* column_header();
/// One row, in the columns of column_header().
std::string format_row(const Row& row);

/// A run of the benchmark, as --append stores it.
struct Run {
  int ranks = 1;
  std::string op;  ///< the --op given (every exchange mode is stored under "exchange")
  std::string dtype;
  int iters = 0, warmup_iters = 0;
  /// From large_from bytes on, large_iters timed iterations (0, 0: iters at every size).
  int large_iters = 0;
  std::uint64_t large_from = 0;
  std::string hosts;    ///< the ranks' hosts, "name" or "name x3, other"
  std::string created;  ///< UTC time of the run
  std::vector<Row> rows;
};

/// Adds `run` to the results file `path` (created when missing) as /np<ranks>/<op>, replacing
/// an earlier run with the same key; the file is rewritten under a temporary name.
void append_run(const std::string& path, const Run& run);
/// Every run of a results file (data error when it is not one), by key order.
std::vector<Run> read_runs(const std::string& path);

}  // namespace mbkit::results
