// mb-report --compare REAL.h5 EMULATED.h5: how well an emulation (a --clock virtual run)
// agrees with the real run of the same settings on the wall clock, against the goals of the
// emulator (mbkit issue V): the per-step time error, |emulated - real| / real of each step both
// runs logged (matched by step number), median at most 5% and 95th percentile at most 10%;
// the time to a target test accuracy, at most 5% off; and the final accuracies beside.
//
// Times to target are training times (plot/clock_compare.hpp): the steps' time up to the
// first evaluation at or above the target, which on the wall clock leaves out the start-up
// and the evaluations, as the virtual clock does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::report {

inline constexpr double kStepErrorMedianGoal = 0.05;
inline constexpr double kStepErrorP95Goal = 0.10;
inline constexpr double kTimeToTargetGoal = 0.05;

/// One of the two runs.
struct ComparedRun {
  std::string log;    ///< the path as given
  std::string clock;  ///< "wall" or "virtual"
  std::int64_t steps = 0;
  std::int64_t evaluations = 0;
  /// Over the compared steps (both runs', after the warm-up): seconds; NaN when none.
  double step_time_median = 0;
  double step_time_p95 = 0;
  /// The training time to the first evaluation at or above the target; nullopt without a
  /// target or when not reached.
  std::optional<double> time_to_target;
  /// That evaluation's /eval/time (the log's clock, start-up and evaluations included) and
  /// step.
  std::optional<double> clock_time_to_target;
  std::optional<std::int64_t> step_to_target;
  double final_accuracy = 0;  ///< last /eval/accuracy; NaN without evaluations
};

/// A figure against its goal.
struct GoalCheck {
  std::string name;  ///< "step_time_error_median", "step_time_error_p95", "time_to_target_error"
  double value = 0;  ///< NaN when it cannot be computed
  double goal = 0;   ///< the largest value that meets it
  /// nullopt when there is nothing to check (no steps compared, target not reached by both).
  std::optional<bool> met;
};

struct ClockComparison {
  ComparedRun real;
  /// The emulation; or, with `repeat`, a second real run of the same settings.
  ComparedRun emulated;
  /// Both runs on the wall clock: how far two real runs of the same settings are apart, the
  /// floor under what an emulation of them can reach. The errors, goals and verdicts are the
  /// same, of the repeat against the first run.
  bool repeat = false;
  /// What the emulation was set to that the real run was not (plot::emulation_settings).
  std::string emulation;
  int warmup_steps = 0;
  std::size_t steps_compared = 0;  ///< steps with a relative error
  double step_error_median = 0;    ///< of the per-step relative errors; NaN when none
  double step_error_p95 = 0;
  double step_time_median_error = 0;  ///< of the two medians: |e - r| / r
  double step_time_p95_error = 0;
  std::optional<double> target;
  std::optional<double> time_to_target_error;  ///< when both reached the target
  double final_accuracy_error = 0;             ///< |e - r| / r; NaN without evaluations
  std::vector<GoalCheck> checks;               ///< median, p95, then (with a target) time
};

/// Opens both logs (data errors name them), refuses runs that are not a real run and its
/// emulation, in that order, or two real runs (a repeat) of the same settings (usage error
/// naming both and what differs), and compares them.
/// `target` in (0, 1], `warmup_steps` 0 or more (usage errors otherwise).
ClockComparison compare_clocks(const std::string& real, const std::string& emulated,
                               std::optional<double> target, int warmup_steps);

/// '#' lines naming the runs and saying what the errors are, then a row per quantity:
/// quantity, real, emulated (or repeat), error (%), goal (%), verdict; then how many goals
/// were met.
void write_compare_table(const ClockComparison& comparison, std::ostream& out);
/// The comparison as one JSON object.
void write_compare_json(const ClockComparison& comparison, std::ostream& out);
/// The table's rows as CSV: quantity,unit,real,emulated,error,goal,met (fractions, seconds).
void write_compare_csv(const ClockComparison& comparison, std::ostream& out);

}  // namespace mbkit::report
