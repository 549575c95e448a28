// A real run against its emulation: a wall-clock run and a --clock virtual run of the same
// settings, for mb-report --compare and mb-plot --type clock-compare. What both need: whether
// two logs are such a pair, their steps matched by step number, and the training time at each
// evaluation.
//
// Training time is the sum of /steps/step_time over the steps so far. On the virtual clock it
// is the log's time; on the wall clock it leaves out what the emulated clock does not count:
// the start-up before the first step and the evaluations (and their flushes) between steps.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mbkit::plot {

class RunLog;

/// Why `real` and `emulated` are not a run and its emulation, as one line naming both files
/// ("" when they are): they must be on the wall and the virtual clock, in that order, and of the
/// same settings: the same tool, model, dataset, device, precision, workers and every option
/// of their configuration, but for those an emulation may set otherwise
/// (clock_compare_free_keys()). With `repeat_allowed`, two runs on the wall clock of the same
/// settings are a pair too: a real run and its repeat (how far real runs are apart).
std::string clock_compare_problem(const RunLog& real, const RunLog& emulated,
                                  bool repeat_allowed = false);

/// Configuration keys a run and its emulation may differ in: the clock and the emulation's
/// models (clock, comm_model, compute_model, emulate, world_size), where the data files are
/// (data, test_data: the dataset attribute is compared), comm_timeout, and slowdown (a slow
/// worker made for real, by a CPU quota, is emulated by --slowdown).
const std::vector<std::string>& clock_compare_free_keys();

/// The models the emulation ran on, and what it was set to that the real run was not: "comm
/// model 0.001,1e-09; compute model: CPU time; slowdown 1=2" (root attributes comm_model and
/// compute_model, numbers to 4 digits; config emulate and slowdown).
std::string emulation_settings(const RunLog& real, const RunLog& emulated);

/// The step times of two runs, matched by step number (steps only one run logged are left
/// out), in increasing step order.
struct AlignedSteps {
  std::vector<double> step;
  std::vector<double> real;      ///< seconds
  std::vector<double> emulated;  ///< seconds
};

/// Matches /steps/step and /steps/step_time of two runs, then leaves out the first `warmup`
/// matched steps.
AlignedSteps align_steps(const std::vector<double>& real_steps,
                         const std::vector<double>& real_times,
                         const std::vector<double>& emulated_steps,
                         const std::vector<double>& emulated_times, std::size_t warmup);

/// |emulated - real| / real of each matched step whose real time is above 0 and whose times are
/// finite.
std::vector<double> relative_step_errors(const AlignedSteps& steps);

/// The training time at each evaluation: the sum of step_time over the steps whose step
/// number is at most the evaluation's step.
std::vector<double> training_times(const std::vector<double>& steps,
                                   const std::vector<double>& step_times,
                                   const std::vector<double>& eval_steps);

/// training_times() of a log's /eval rows.
std::vector<double> training_times(const RunLog& log);

}  // namespace mbkit::plot
