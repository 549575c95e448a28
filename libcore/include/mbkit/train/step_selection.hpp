// Which workers' gradients a synchronous step takes: the straggler methods that drop late
// gradients (backup workers, K-sync) as one seam of the synchronous loop. Every worker computes
// its round at the step's parameters; the step takes the gradients this rule chooses from the
// workers' ready times (induced delay + compute, seconds after the step's start) and cancels the
// others, which send nothing and start the next step with everyone.
//
// Backup workers (Chen et al. 2016) with b of W workers and K-sync SGD (Dutta et al. 2018) with
// K = W - b are the same rule here: the first K gradients to be ready are used. Gradient coding
// (Tandon et al. 2017, fractional repetition) puts the workers in groups of s + 1 that hold the
// same data and compute the same gradient; the first of each group is used, so any s
// stragglers per group cost nothing. Ties in ready time go to the lower worker index, so the
// choice is a function of the times alone and every rank (and an emulation in one process)
// makes the same one.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

namespace mbkit::train {

struct TrainOptions;
struct WorkerReport;

/// What a dropped worker sends into the step's sum: zeros for its gradients and state, and a
/// report with its times and stop code but no samples, loss or correct answers. The zeros are
/// added as the others' values are, so the sum's bits do not depend on the transport.
void drop_contribution(WorkerReport& report, std::span<float> gradients, std::span<float> state);

class StepSelection {
 public:
  /// Every gradient (FMB, AMB).
  StepSelection() = default;
  /// The rule the options ask for, for a run of `workers` workers; a usage error names the
  /// flag when the count does not fit the workers.
  static StepSelection from_options(const TrainOptions& options, int workers);
  /// The first `count` of `workers` gradients to be ready.
  static StepSelection first_arrivals(int count, int workers);
  /// The first of each group of `group` workers (workers w with the same w / group).
  static StepSelection first_of_groups(int group, int workers);

  /// The slice of the training split worker w reads, of data_slices(): its own, or under
  /// gradient coding its group's (whose members also share their dropout masks' seed).
  int data_slice(int worker) const { return worker / group_; }
  int data_slices() const { return workers_ / group_; }

  /// Whether some gradients may be dropped (else every step uses all).
  bool drops() const { return used_ < workers_; }
  int workers() const { return workers_; }
  /// Gradients each step uses.
  int used_per_step() const { return used_; }
  /// used[w]: whether worker w's gradient joins the step; `ready[w]` is its ready time.
  std::vector<bool> select(std::span<const double> ready) const;
  /// The wall clock's form of the rule, as gradients really arrive one after another:
  /// whether `worker`'s, arriving after those marked in `taken`, joins the step.
  bool takes(const std::vector<bool>& taken, int worker) const;
  /// Whether the gradients in `taken` complete the step (no later one would join it).
  bool complete(const std::vector<bool>& taken) const;
  /// "all", or e.g. "first 6 of 8".
  std::string describe() const;

 private:
  int workers_ = 0;
  int used_ = 0;
  int group_ = 1;  ///< gradient coding: s + 1; else 1
};

}  // namespace mbkit::train
