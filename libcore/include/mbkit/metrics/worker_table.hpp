// What a run's /workers table holds (--worker-table): every worker's row of every step (all),
// a row per step of quantiles over the workers in /worker_summary (summary), or the rows of K
// workers drawn from the seed beside that summary (sample:K). An emulated run of 10,000 workers
// would otherwise log 10,000 rows a step.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mbkit/metrics/metric_log.hpp"

namespace mbkit::metrics {

/// The choice of --worker-table.
struct WorkerTableChoice {
  enum class Mode { kAll, kSummary, kSample };
  Mode mode = Mode::kAll;
  int sample = 0;  ///< kSample: the workers logged in full

  /// "all", "summary" or "sample:K", as parsed.
  std::string text() const;
  bool operator==(const WorkerTableChoice&) const = default;
};

/// Up to this many workers, --worker-table defaults to all; above, to summary.
inline constexpr int kAllWorkerRowsUpTo = 64;

/// Parses all|summary|sample:K (K >= 1); anything else is a usage error naming --worker-table.
WorkerTableChoice parse_worker_table(const std::string& text);
/// --worker-table when not given: all up to kAllWorkerRowsUpTo workers, summary above.
WorkerTableChoice default_worker_table(int workers);
/// --worker-table as given (parsed), or its default for `workers` when not given ("").
WorkerTableChoice resolve_worker_table(const std::string& given, int workers);

/// The nearest-rank quantile of sorted values: the smallest value with at least the fraction p
/// (0 <= p <= 1) of the values at or below it, x[ceil(p n)] counting from 1 (x[1] for p = 0).
/// An element of the data, never an interpolation. `sorted` is not empty.
double nearest_rank(const std::vector<double>& sorted, double p);

/// `count` of `ranks`, drawn from `seed` (the same for every run with that seed and those
/// ranks; all of them when count >= their number).
std::set<std::int64_t> sample_workers(std::vector<std::int64_t> ranks, int count,
                                      std::uint64_t seed);

/// The summary of one step's worker rows, fed a row at a time: it keeps the step's values of
/// the summarised columns (one double per worker and column), not the rows.
class WorkerSummary {
 public:
  void add(const WorkerRecord& record);
  /// The step's row of /worker_summary; then empty for the next step.
  WorkerSummaryRecord finish(std::int64_t step);
  bool empty() const { return rows_ == 0; }

 private:
  std::vector<std::vector<double>> values_;  // per summarised column
  std::int64_t rows_ = 0;
};

/// Which worker rows a run's log keeps, as --worker-table chose (MetricLog::use_worker_table).
class WorkerTable {
 public:
  /// `ranks`: the ranks of the run's workers (for sample:K).
  WorkerTable(WorkerTableChoice choice, const std::vector<std::int64_t>& ranks, std::uint64_t seed);

  /// One worker's row of the current step: true when /workers keeps it.
  bool add(const WorkerRecord& record);
  /// After the step's rows: its /worker_summary row (summary, sample:K).
  std::optional<WorkerSummaryRecord> end_step(std::int64_t step);

  const WorkerTableChoice& choice() const { return choice_; }
  /// sample:K: the workers logged in full.
  const std::set<std::int64_t>& sampled() const { return sampled_; }

 private:
  WorkerTableChoice choice_;
  std::set<std::int64_t> sampled_;
  WorkerSummary summary_;
};

}  // namespace mbkit::metrics
