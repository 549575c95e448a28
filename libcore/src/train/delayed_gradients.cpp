// AMB-DG's parameter versions and virtual timeline (delayed_gradients.hpp).
#include "mbkit/train/delayed_gradients.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mbkit/train/options.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

int delay_rounds_for(double round_trip, double time_limit) {
  MBKIT_CHECK(time_limit > 0, "delay_rounds_for: time limit ", time_limit);
  if (!(round_trip > 0)) return 0;
  const double rounds = std::ceil(round_trip / time_limit);
  return rounds >= kMaxDelayRounds ? kMaxDelayRounds : static_cast<int>(rounds);
}

void ParameterVersions::keep(std::int64_t step, std::span<const float> latest) {
  MBKIT_CHECK(versions_.empty() || versions_.back().first == step - 1,
              "ParameterVersions: version ", step, " after ", versions_.back().first);
  versions_.emplace_back(step, std::vector<float>(latest.begin(), latest.end()));
  while (versions_.front().first < step - delay_) versions_.pop_front();
}

std::int64_t ParameterVersions::version_for(std::int64_t step) const {
  MBKIT_CHECK(!versions_.empty(), "ParameterVersions: no version kept");
  return std::max(versions_.front().first, step - delay_);
}

std::span<const float> ParameterVersions::parameters_of(std::int64_t version) const {
  MBKIT_CHECK(
      !versions_.empty() && version >= versions_.front().first && version <= versions_.back().first,
      "ParameterVersions: version ", version, " is not kept");
  return versions_[static_cast<std::size_t>(version - versions_.front().first)].second;
}

std::vector<NamedArray> ParameterVersions::saved(std::int64_t step) const {
  std::vector<NamedArray> arrays;
  for (const auto& [version, values] : versions_) {
    if (version < step - delay_ || version >= step) continue;
    arrays.push_back(
        {cat("version_", version), {static_cast<std::int64_t>(values.size())}, values});
  }
  return arrays;
}

void ParameterVersions::restore(const std::vector<NamedArray>& arrays, std::int64_t step,
                                std::size_t parameters, const std::string& path) {
  versions_.clear();
  if (arrays.empty()) return;
  const std::int64_t first = std::max<std::int64_t>(0, step - delay_);
  if (static_cast<std::int64_t>(arrays.size()) != step - first) {
    data_error(cat(path, ": holds ", arrays.size(), " parameter versions for --delayed-gradients ",
                   delay_, " at step ", step, ", not ", step - first));
  }
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::int64_t version = first + static_cast<std::int64_t>(i);
    if (arrays[i].name != cat("version_", version) || arrays[i].values.size() != parameters) {
      data_error(cat(path, ": parameter version '", arrays[i].name, "' (", arrays[i].values.size(),
                     " values) is not version_", version, " of ", parameters, " parameters"));
    }
    versions_.emplace_back(version, arrays[i].values);
  }
}

void WorkerVersions::add(std::int64_t version, Values values) {
  MBKIT_CHECK(held_.empty() || version == held_.back().first + 1, "WorkerVersions: version ",
              version, " after ", held_.empty() ? -1 : held_.back().first);
  if (held_.empty()) first_ = version;
  held_.emplace_back(version, std::move(values));
}

std::int64_t WorkerVersions::version_for(std::int64_t round) const {
  MBKIT_CHECK(!held_.empty(), "WorkerVersions: no version held");
  return std::max(first_, round - delay_);
}

bool WorkerVersions::ready(std::int64_t round) const {
  return newest() >= version_for(round);
}

std::span<const float> WorkerVersions::take(std::int64_t round) {
  const std::int64_t version = version_for(round);
  MBKIT_CHECK(ready(round) && held_.front().first <= version, "WorkerVersions: version ", version,
              " of round ", round, " is not held");
  while (held_.front().first < version) held_.pop_front();
  return held_.front().second;
}

namespace {

constexpr double kHeldFromStart = -std::numeric_limits<double>::infinity();

}  // namespace

DelayedTimeline::DelayedTimeline(int delay, std::vector<double> links)
    : delay_(delay), links_(std::move(links)), free_(links_.size(), 0.0) {
  made_.emplace_back(0, kHeldFromStart);
}

SyncStepTime DelayedTimeline::step(std::int64_t step, std::int64_t version,
                                   const std::vector<SyncWorkerTime>& workers, double update) {
  MBKIT_CHECK(workers.size() == links_.size(), "DelayedTimeline: ", workers.size(),
              " workers' times for ", links_.size(), " workers");
  double made = kHeldFromStart;  // a version not in the timeline (resumed): held by all
  for (const auto& [v, at] : made_) {
    if (v == version) made = at;
  }
  SyncStepTime time;
  std::vector<double> ready(workers.size());
  for (std::size_t w = 0; w < workers.size(); ++w) {
    const double start = std::max(free_[w], made + links_[w]);
    ready[w] = start + workers[w].delay + workers[w].compute;
    // The master applies the sums in round order: after update t - 1 (now, 0).
    time.gather = std::max(time.gather, ready[w] + links_[w]);
    time.wait.push_back(start - free_[w]);
    time.sends.push_back(links_[w]);
    time.receives.push_back(links_[w]);
    time.send = std::max(time.send, links_[w]);
  }
  time.end = time.gather + update;
  // Now is update t's end: version t + 1 is made; each worker goes on when it was ready.
  for (std::size_t w = 0; w < workers.size(); ++w) free_[w] = ready[w] - time.end;
  for (auto& entry : made_) entry.second -= time.end;
  made_.emplace_back(step + 1, 0.0);
  while (made_.size() > 1 && made_.front().first < step + 1 - delay_) made_.pop_front();
  return time;
}

std::vector<double> DelayedTimeline::saved() const {
  std::vector<double> values{static_cast<double>(free_.size())};
  values.insert(values.end(), free_.begin(), free_.end());
  values.push_back(static_cast<double>(made_.size()));
  for (const auto& [version, at] : made_) {
    values.push_back(static_cast<double>(version));
    values.push_back(at);
  }
  return values;
}

void DelayedTimeline::restore(const std::vector<double>& values, const std::string& path) {
  std::fill(free_.begin(), free_.end(), 0.0);
  made_.clear();
  if (values.empty()) return;
  const auto bad = [&] {
    data_error(cat(path, ": its delayed_timeline (", values.size(),
                   " values) is not a timeline of AMB-DG's rounds"));
  };
  const auto count = [&](std::size_t at) {
    if (at >= values.size() || !(values[at] >= 0) || values[at] > 1e9) bad();
    return static_cast<std::size_t>(values[at]);
  };
  const std::size_t workers = count(0);
  const std::size_t versions = count(1 + workers);
  if (values.size() != 2 + workers + 2 * versions) bad();
  if (workers == free_.size()) {
    std::copy_n(values.begin() + 1, workers, free_.begin());
  }
  for (std::size_t i = 0; i < versions; ++i) {
    made_.emplace_back(static_cast<std::int64_t>(values[2 + workers + 2 * i]),
                       values[3 + workers + 2 * i]);
  }
}

}  // namespace mbkit::train
