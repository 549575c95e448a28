#include "mbkit/train/step_selection.hpp"

#include <algorithm>
#include <numeric>

#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

void drop_contribution(WorkerReport& report, std::span<float> gradients, std::span<float> state) {
  std::fill(gradients.begin(), gradients.end(), 0.0f);
  std::fill(state.begin(), state.end(), 0.0f);
  report.samples = 0;
  report.loss_sum = 0;
  report.correct = 0;
}

StepSelection StepSelection::from_options(const TrainOptions& options, int workers) {
  if (options.backup_workers > 0) {
    if (options.backup_workers >= workers) {
      usage_error(cat("--backup-workers ", options.backup_workers, " must be below the ", workers,
                      " workers: at least one gradient must count"));
    }
    return first_arrivals(workers - options.backup_workers, workers);
  }
  if (options.k_sync > 0) {
    if (options.k_sync > workers) {
      usage_error(cat("--k-sync ", options.k_sync, " must be at most the ", workers, " workers"));
    }
    return first_arrivals(options.k_sync, workers);
  }
  if (options.gradient_coding > 0) {
    const int group = options.gradient_coding + 1;
    if (workers % group != 0 || workers == group) {
      usage_error(cat("--gradient-coding ", options.gradient_coding, ": the ", workers,
                      " workers must form at least two groups of ", group,
                      " (s + 1) that hold the same data"));
    }
    return first_of_groups(group, workers);
  }
  return first_arrivals(workers, workers);
}

StepSelection StepSelection::first_of_groups(int group, int workers) {
  MBKIT_CHECK(group >= 1 && workers % group == 0, "groups of ", group, " of ", workers, " workers");
  StepSelection selection;
  selection.workers_ = workers;
  selection.used_ = workers / group;
  selection.group_ = group;
  return selection;
}

StepSelection StepSelection::first_arrivals(int count, int workers) {
  MBKIT_CHECK(count >= 1 && count <= workers, "the first ", count, " of ", workers, " gradients");
  StepSelection selection;
  selection.workers_ = workers;
  selection.used_ = count;
  return selection;
}

std::vector<bool> StepSelection::select(std::span<const double> ready) const {
  MBKIT_CHECK(ready.size() == static_cast<std::size_t>(workers_), ready.size(), " ready times for ",
              workers_, " workers");
  std::vector<bool> used(ready.size(), true);
  if (!drops()) return used;
  if (group_ > 1) {
    // Each group's first (the lowest worker among equals).
    std::fill(used.begin(), used.end(), false);
    for (int first = 0; first < workers_; first += group_) {
      int best = first;
      for (int w = first + 1; w < first + group_; ++w) {
        if (ready[static_cast<std::size_t>(w)] < ready[static_cast<std::size_t>(best)]) best = w;
      }
      used[static_cast<std::size_t>(best)] = true;
    }
    return used;
  }
  std::vector<int> order(ready.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable: equal times keep the lower worker first.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return ready[static_cast<std::size_t>(a)] < ready[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = static_cast<std::size_t>(used_); i < order.size(); ++i) {
    used[static_cast<std::size_t>(order[i])] = false;
  }
  return used;
}

bool StepSelection::takes(const std::vector<bool>& taken, int worker) const {
  MBKIT_CHECK(
      taken.size() == static_cast<std::size_t>(workers_) && worker >= 0 && worker < workers_,
      "worker ", worker, " of ", taken.size(), " taken flags for ", workers_, " workers");
  if (taken[static_cast<std::size_t>(worker)] || complete(taken)) return false;
  if (group_ == 1) return true;
  const int first = worker / group_ * group_;  // its group's: none taken yet?
  return std::none_of(taken.begin() + first, taken.begin() + first + group_,
                      [](bool t) { return t; });
}

bool StepSelection::complete(const std::vector<bool>& taken) const {
  return std::count(taken.begin(), taken.end(), true) >= used_;
}

std::string StepSelection::describe() const {
  if (!drops()) return "all";
  if (group_ > 1) return cat("the first of each group of ", group_, " (", used_, " groups)");
  return cat("first ", used_, " of ", workers_);
}

}  // namespace mbkit::train
