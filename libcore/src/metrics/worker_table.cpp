#include "mbkit/metrics/worker_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <variant>

#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::metrics {
namespace {

// A summarised column: where its values come from in a /workers row and where its statistics
// go in a /worker_summary row.
struct SummarisedColumn {
  std::variant<std::int64_t WorkerRecord::*, double WorkerRecord::*> source;
  double WorkerSummaryRecord::*min;
  double WorkerSummaryRecord::*p10;
  double WorkerSummaryRecord::*p50;
  double WorkerSummaryRecord::*p90;
  double WorkerSummaryRecord::*max;
  double WorkerSummaryRecord::*mean;
};

#define MBKIT_SUMMARISED_COLUMN(column)                \
  SummarisedColumn{&WorkerRecord::column,              \
                   &WorkerSummaryRecord::column##_min, \
                   &WorkerSummaryRecord::column##_p10, \
                   &WorkerSummaryRecord::column##_p50, \
                   &WorkerSummaryRecord::column##_p90, \
                   &WorkerSummaryRecord::column##_max, \
                   &WorkerSummaryRecord::column##_mean},
const std::vector<SummarisedColumn> kSummarised{
    MBKIT_SUMMARISED_WORKER_COLUMNS(MBKIT_SUMMARISED_COLUMN)};
#undef MBKIT_SUMMARISED_COLUMN

// The stream of the seed's random numbers that draws the sampled workers.
constexpr std::uint64_t kSampleStream = 0x776f726b65727331;  // "workers1"

}  // namespace

std::string WorkerTableChoice::text() const {
  switch (mode) {
    case Mode::kAll:
      return "all";
    case Mode::kSummary:
      return "summary";
    case Mode::kSample:
      return cat("sample:", sample);
  }
  return "all";
}

WorkerTableChoice parse_worker_table(const std::string& text) {
  if (text == "all") return {WorkerTableChoice::Mode::kAll, 0};
  if (text == "summary") return {WorkerTableChoice::Mode::kSummary, 0};
  if (text.starts_with("sample:")) {
    const std::string count = text.substr(7);
    long long k = 0;
    try {
      k = parse_int(count, "--worker-table sample:K");
    } catch (const Error&) {
      k = 0;
    }
    if (k >= 1 && k <= std::numeric_limits<int>::max()) {
      return {WorkerTableChoice::Mode::kSample, static_cast<int>(k)};
    }
    usage_error(cat("--worker-table ", text, ": K must be a whole number of workers, at least 1"));
  }
  usage_error(cat("--worker-table ", text, ": expected all, summary or sample:K"));
}

WorkerTableChoice default_worker_table(int workers) {
  return workers <= kAllWorkerRowsUpTo ? WorkerTableChoice{WorkerTableChoice::Mode::kAll, 0}
                                       : WorkerTableChoice{WorkerTableChoice::Mode::kSummary, 0};
}

WorkerTableChoice resolve_worker_table(const std::string& given, int workers) {
  return given.empty() ? default_worker_table(workers) : parse_worker_table(given);
}

double nearest_rank(const std::vector<double>& sorted, double p) {
  MBKIT_CHECK(!sorted.empty(), "nearest_rank of no values");
  const double n = static_cast<double>(sorted.size());
  // ceil(p n) counts from 1; the smallest rank is 1 (p = 0: the minimum).
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p * n)));
  return sorted[std::min(rank, sorted.size()) - 1];
}

std::set<std::int64_t> sample_workers(std::vector<std::int64_t> ranks, int count,
                                      std::uint64_t seed) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  Rng rng(seed, kSampleStream);
  rng.shuffle(ranks.begin(), ranks.end());
  const auto keep = std::min(ranks.size(), static_cast<std::size_t>(std::max(count, 0)));
  return {ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(keep)};
}

void WorkerSummary::add(const WorkerRecord& record) {
  values_.resize(kSummarised.size());
  for (std::size_t c = 0; c < kSummarised.size(); ++c) {
    std::visit([&](auto member) { values_[c].push_back(static_cast<double>(record.*member)); },
               kSummarised[c].source);
  }
  ++rows_;
}

WorkerSummaryRecord WorkerSummary::finish(std::int64_t step) {
  WorkerSummaryRecord summary;
  summary.step = step;
  summary.workers = rows_;
  for (std::size_t c = 0; c < values_.size(); ++c) {
    auto& values = values_[c];
    if (values.empty()) continue;
    const SummarisedColumn& column = kSummarised[c];
    // The mean in the order the rows came (the order of the /workers rows of `all`).
    summary.*column.mean =
        std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
    std::sort(values.begin(), values.end());
    summary.*column.min = values.front();
    summary.*column.p10 = nearest_rank(values, 0.1);
    summary.*column.p50 = nearest_rank(values, 0.5);
    summary.*column.p90 = nearest_rank(values, 0.9);
    summary.*column.max = values.back();
    values.clear();
  }
  rows_ = 0;
  return summary;
}

WorkerTable::WorkerTable(WorkerTableChoice choice, const std::vector<std::int64_t>& ranks,
                         std::uint64_t seed)
    : choice_(choice) {
  if (choice_.mode == WorkerTableChoice::Mode::kSample) {
    sampled_ = sample_workers(ranks, choice_.sample, seed);
  }
}

bool WorkerTable::add(const WorkerRecord& record) {
  if (choice_.mode == WorkerTableChoice::Mode::kAll) return true;
  summary_.add(record);
  return choice_.mode == WorkerTableChoice::Mode::kSample && sampled_.contains(record.rank);
}

std::optional<WorkerSummaryRecord> WorkerTable::end_step(std::int64_t step) {
  if (choice_.mode == WorkerTableChoice::Mode::kAll || summary_.empty()) return std::nullopt;
  return summary_.finish(step);
}

}  // namespace mbkit::metrics
