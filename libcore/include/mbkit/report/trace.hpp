// A timeline of a training run from its metric log, in the Chrome trace format (the Trace
// Event Format that Perfetto and chrome://tracing read), for mb-report --trace: one track per
// worker rank with its sleep, compute, send and wait spans, and a track of rank 0's steps with
// the update and the evaluations, on the run's clock (emulated seconds under --clock virtual).
//
// The log holds durations, not start times, so the spans are laid out: a step ends at
// /steps/time and lasts /steps/step_time; in it a worker sleeps (induced delays), computes,
// sends and waits, one after the other from the step's start. On the wall clock a /workers
// row's send and wait are those of the worker's previous step (mbkit-formats(5)), so they are
// taken from its next row; under the virtual clock from the row itself. The update is the
// rest of the step after rank 0 had the gradients (/collect/wait_time). An evaluation starts at
// /eval/time and, on the wall clock, lasts until its /eval/wall_time (the emulated clock does
// not advance while evaluating: 0 there).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::plot {
class RunLog;
}

namespace mbkit::report {

struct TraceSpan {
  std::string name;  ///< sleep, compute, send, wait, step, update, evaluation
  int track = 0;     ///< a rank, or Trace::step_track
  std::int64_t step = 0;
  double start = 0;     ///< seconds on the run's clock
  double duration = 0;  ///< seconds
};

struct TraceTrack {
  int id = 0;
  std::string name;
};

struct Trace {
  std::string title;               ///< the process name: tool, model, workers, clock
  std::string clock;               ///< "wall" or "virtual"
  int step_track = 0;              ///< the steps' track: the world size, after every rank
  std::vector<TraceTrack> tracks;  ///< the steps' track first, then the ranks in order
  std::vector<TraceSpan> spans;    ///< by table: steps, updates, evaluations, then workers
};

/// Lays out the spans of a log (see above). Worker spans of no duration are left out.
Trace build_trace(const plot::RunLog& log);

/// The trace as one JSON object: "traceEvents" (metadata events naming the process and the
/// tracks, then a complete event, "ph":"X", per span, ts and dur in microseconds, pid 1, tid
/// the track, args the step and rank), "displayTimeUnit" "ms" and "otherData" (log, clock).
void write_trace(const Trace& trace, const std::string& log_path, std::ostream& out);

}  // namespace mbkit::report
