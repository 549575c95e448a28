#include "mbkit/train/k_batch_sync.hpp"

#include <algorithm>
#include <cstddef>
#include <tuple>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

KBatchStep plan_k_batch_step(int k, std::span<const std::vector<double>> completions) {
  MBKIT_CHECK(k >= 1 && !completions.empty(), "K-batch-sync with K = ", k, " over ",
              completions.size(), " workers");
  struct Done {
    double time;
    int worker;
    int batch;
  };
  std::vector<Done> done;
  for (std::size_t w = 0; w < completions.size(); ++w) {
    const auto& times = completions[w];
    MBKIT_CHECK(std::is_sorted(times.begin(), times.end()), "worker ", w,
                "'s completion times out of order");
    for (std::size_t j = 0; j < times.size(); ++j) {
      done.push_back({times[j], static_cast<int>(w), static_cast<int>(j)});
    }
  }
  MBKIT_CHECK(done.size() >= static_cast<std::size_t>(k), done.size(), " batches for K = ", k);
  // The first K in time; equal times to the lower worker, then its earlier batch.
  const auto first = [](const Done& a, const Done& b) {
    return std::tie(a.time, a.worker, a.batch) < std::tie(b.time, b.worker, b.batch);
  };
  std::partial_sort(done.begin(), done.begin() + k, done.end(), first);
  KBatchStep step;
  step.batches.assign(completions.size(), 0);
  for (int i = 0; i < k; ++i) ++step.batches[static_cast<std::size_t>(done[i].worker)];
  step.end = done[static_cast<std::size_t>(k - 1)].time;
  return step;
}

KBatchArrivals::KBatchArrivals(int k, int workers)
    : k_(k), batches_(static_cast<std::size_t>(workers), 0) {
  MBKIT_CHECK(k >= 1 && workers >= 1, "K-batch-sync with K = ", k, " over ", workers, " workers");
}

void KBatchArrivals::begin(std::int64_t step) {
  step_ = step;
  taken_ = 0;
  std::fill(batches_.begin(), batches_.end(), 0);
}

bool KBatchArrivals::take(int worker, std::int64_t of) {
  MBKIT_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < batches_.size(), "worker ", worker,
              " of ", batches_.size());
  MBKIT_CHECK(of <= step_, "worker ", worker, " sent a batch of step ", of + 1, " during step ",
              step_ + 1);
  if (of < step_ || complete()) return false;
  ++taken_;
  ++batches_[static_cast<std::size_t>(worker)];
  return true;
}

}  // namespace mbkit::train
