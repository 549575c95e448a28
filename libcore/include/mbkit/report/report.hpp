// Summaries of training runs from their metric logs, for mb-report(1): one row per run (what
// ran, how far, how fast, how accurate) and, given a target test accuracy, the time each run
// took to reach it and the ratio of those times between tools, seed by seed.
//
// Logs are read through plot::RunLog (SWMR-safe: finished, live or left by a killed writer).
// Times are the log's clock: emulated seconds for runs on the virtual clock.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::plot {
class RunLog;
}

namespace mbkit::report {

/// One run, as read from its log.
struct RunSummary {
  std::string log;  ///< the path as given
  std::string tool;
  std::string model;
  int workers = 1;  ///< workers that computed gradients (config "workers", else world_size)
  std::uint64_t seed = 0;
  std::string clock;                     ///< "wall" or "virtual"
  std::string device;                    ///< config "device" ("cpu" in logs without it)
  std::string precision;                 ///< root attribute "precision" (fp32, tf32, bf16)
  std::int64_t steps = 0;                ///< rows of /steps
  double samples = 0;                    ///< sum of /steps/samples
  double samples_per_worker = 0;         ///< per worker and step: mean of /workers/samples
                                         ///< (/worker_summary's when the log has one), else of
                                         ///< /steps/samples / workers; NaN without steps
  double time = 0;                       ///< /steps/time of the last step (0 without steps)
  double samples_per_second = 0;         ///< samples / time; NaN when time is 0
  std::int64_t evaluations = 0;          ///< rows of /eval
  double final_accuracy = 0;             ///< last /eval/accuracy; NaN without evaluations
  double best_accuracy = 0;              ///< highest /eval/accuracy; NaN without evaluations
  std::optional<double> time_to_target;  ///< /eval/time of the first evaluation >= target
  std::optional<std::int64_t> step_to_target;  ///< its /eval/step
  /// Index (into Report::runs, from 0) of the run whose time to target this one is compared
  /// with; nullopt without a target or when there is none (see Report).
  std::optional<std::size_t> base;
  /// time_to_target / the base's; nullopt unless both reached the target.
  std::optional<double> ratio_to_base;
};

/// The ratio of one tool's time to target to the base tool's, for one seed.
struct SeedRatio {
  std::uint64_t seed = 0;
  std::optional<std::size_t> base_run;   ///< the first run of the base tool with this seed
  std::optional<std::size_t> other_run;  ///< the first run of the other tool with this seed
  std::optional<double> ratio;           ///< other / base, when both reached the target
};

/// One tool against the base tool, over the seeds.
struct Comparison {
  std::string base_tool;
  std::string tool;
  std::vector<SeedRatio> seeds;  ///< every seed of the two tools' logs, in increasing order
  /// Over the seeds with a ratio: how many, and the ratios' mean, min and max (NaN when none).
  int compared = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
};

/// The report of several runs.
///
/// With a target, each run's time to target is compared with a base run's. When the logs hold
/// more than one tool, the base tool is the tool of the first log and a run's base is the first
/// run of the base tool with the run's seed (none: no base), and each other tool gets a
/// Comparison over the seeds. When all the logs are of one tool, every run's base is the first
/// log, and there are no Comparisons.
struct Report {
  std::optional<double> target;  ///< test accuracy, in (0, 1]
  std::vector<RunSummary> runs;
  std::vector<Comparison> comparisons;
};

/// Reads one run's summary from its log (`target`: for time_to_target).
RunSummary summarize_run(const plot::RunLog& log, std::optional<double> target);

/// Opens the logs (a missing file, or one that is not an mbkit metric log, is a data error
/// naming it) and builds the report. `target` must be in (0, 1] (else a usage error).
Report build_report(const std::vector<std::string>& logs, std::optional<double> target);

/// The default output: a '#'-headed table with units in the header, columns aligned, a row per
/// run; then, with a target and several tools, a ratio per seed and their mean, min and max.
void write_table(const Report& report, std::ostream& out);
/// The report as one JSON object: {"target": ..., "runs": [...], "comparisons": [...]}.
void write_json(const Report& report, std::ostream& out);
/// The runs as CSV (RFC 4180), a header row and a row per run; missing values are empty.
void write_csv(const Report& report, std::ostream& out);

/// A column of mb-report's tables.
struct TableColumn {
  std::string name;
  std::string unit;   ///< second header row, "" for none
  bool left = false;  ///< text columns are left-aligned, numbers right-aligned
};

/// The columns' names (and units, when a column has one) on '#' lines, then the rows, each
/// column as wide as its widest cell, two spaces apart.
void write_aligned(const std::vector<TableColumn>& columns,
                   const std::vector<std::vector<std::string>>& rows, std::ostream& out);

/// "80%" for 0.8: the target as the table and the messages show it.
std::string percent_text(double fraction);

}  // namespace mbkit::report
