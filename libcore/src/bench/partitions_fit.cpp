#include "mbkit/bench/partitions_fit.hpp"

#include <map>
#include <set>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::bench {

void check_fit_splits(const std::vector<Split>& splits) {
  std::set<int> batches;
  for (const Split& split : splits) {
    if (split.partitions == 1) batches.insert(split.batch);
  }
  if (batches.size() < 2) {
    usage_error("--fit needs at least two --batch-sizes timed whole (--partitions must include 1)");
  }
}

std::vector<train::TimeModelRecord> fit_time_models(const PartitionsRun& run,
                                                    const std::vector<RankDevice>& devices) {
  std::map<int, std::map<int, double>> medians;  // rank -> batch -> median seconds
  for (const auto& row : run.rows) {
    if (row.split.partitions == 1)
      medians[row.rank][row.split.batch] = results::spread_of(row.seconds).median;
  }
  std::vector<train::TimeModelRecord> records;
  for (const auto& [rank, points] : medians) {
    const RankDevice& device = devices.at(static_cast<std::size_t>(rank));
    train::TimeModelRecord record;
    record.rank = rank;
    record.host = device.host;
    record.model = run.model;
    record.threads = device.threads;
    record.device = device.device;
    record.cpu_model = run.cpu_model;
    record.library_versions = library_versions();
    for (const auto& [batch, seconds] : points) {
      record.batch_sizes.push_back(batch);
      record.seconds.push_back(seconds);
    }
    record.fit = train::fit_time_model(record.batch_sizes, record.seconds);
    records.push_back(std::move(record));
  }
  return records;
}

void write_fits(std::ostream& out, const std::vector<train::TimeModelRecord>& records) {
  out << "# time model t(B) = a B + b, least squares over the median step time at P = 1:\n";
  for (const auto& r : records) {
    out << strprintf(
        "# rank %lld: a = %.6g s per sample, b = %.6g s, r^2 = %.6f, "
        "largest relative residual = %.4f (%zu batch sizes)\n",
        static_cast<long long>(r.rank), r.fit.model.a, r.fit.model.b, r.fit.r_squared,
        r.fit.max_relative_residual, r.batch_sizes.size());
  }
}

}  // namespace mbkit::bench
