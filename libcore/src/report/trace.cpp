#include "mbkit/report/trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "mbkit/plot/run_log.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::report {
namespace {

struct StepSpan {
  double start = 0;
  double end = 0;
};

// Microseconds, rounded to the nanosecond: sums of seconds such as 0.1 + 0.112 would otherwise
// print as 212000.00000000003.
double microseconds(double seconds) {
  return std::round(1e9 * seconds) / 1e3;
}

std::int64_t as_int(double value) {
  return static_cast<std::int64_t>(value);
}

// Appends the span unless it has no duration (a worker that slept nothing).
void add_positive(Trace& trace, const char* name, int track, std::int64_t step, double& at,
                  double duration) {
  if (!(duration > 0)) return;
  trace.spans.push_back({name, track, step, at, duration});
  at += duration;
}

}  // namespace

Trace build_trace(const plot::RunLog& log) {
  Trace trace;
  const metrics::RunInfo& info = log.info();
  trace.clock = info.clock.empty() ? "wall" : info.clock;
  const bool emulated = log.virtual_clock();
  const int workers = log.workers();
  trace.title = cat(info.tool, " ", info.model.empty() ? "-" : info.model, ", ", workers,
                    workers == 1 ? " worker" : " workers", ", ", trace.clock, " clock");
  trace.step_track = std::max(info.world_size, 1);

  std::map<std::int64_t, StepSpan> steps;
  if (log.rows("steps") > 0) {
    const auto& step = log.column("steps", "step");
    const auto& time = log.column("steps", "time");
    const auto& step_time = log.column("steps", "step_time");
    for (std::size_t i = 0; i < step.size(); ++i) {
      const StepSpan span{time[i] - step_time[i], time[i]};
      steps[as_int(step[i])] = span;
      trace.spans.push_back({"step", trace.step_track, as_int(step[i]), span.start, step_time[i]});
    }
  }
  if (log.rows("collect") > 0) {
    const auto& step = log.column("collect", "step");
    const auto& wait = log.column("collect", "wait_time");
    for (std::size_t i = 0; i < step.size(); ++i) {
      const auto found = steps.find(as_int(step[i]));
      if (found == steps.end()) continue;
      const StepSpan& span = found->second;
      // Kept inside its step so that the two nest on the track.
      const double gathered = std::clamp(span.start + wait[i], span.start, span.end);
      if (span.end > gathered) {
        trace.spans.push_back(
            {"update", trace.step_track, as_int(step[i]), gathered, span.end - gathered});
      }
    }
  }
  if (log.rows("eval") > 0) {
    const auto& step = log.column("eval", "step");
    const auto& time = log.column("eval", "time");
    const bool timed = !emulated && log.has_column("eval", "wall_time");
    for (std::size_t i = 0; i < step.size(); ++i) {
      const double duration =
          timed ? std::max(0.0, log.column("eval", "wall_time")[i] - time[i]) : 0.0;
      trace.spans.push_back({"evaluation", trace.step_track, as_int(step[i]), time[i], duration});
    }
  }

  std::set<int> ranks;
  if (log.rows("workers") > 0) {
    const auto& step = log.column("workers", "step");
    const auto& rank = log.column("workers", "rank");
    const auto& compute = log.column("workers", "compute_time");
    const auto& sleep = log.column("workers", "sleep_time");
    const auto& send = log.column("workers", "send_time");
    const auto& wait = log.column("workers", "wait_time");
    std::map<std::pair<std::int64_t, int>, std::size_t> row_of;
    for (std::size_t i = 0; i < step.size(); ++i) {
      row_of[{as_int(step[i]), static_cast<int>(rank[i])}] = i;
    }
    for (std::size_t i = 0; i < step.size(); ++i) {
      const std::int64_t s = as_int(step[i]);
      const int r = static_cast<int>(rank[i]);
      ranks.insert(r);
      const auto found = steps.find(s);
      if (found == steps.end()) continue;
      double at = found->second.start;
      add_positive(trace, "sleep", r, s, at, sleep[i]);
      add_positive(trace, "compute", r, s, at, compute[i]);
      // Measured send and wait end after the worker's report went out: its next row has them.
      std::optional<std::size_t> exchange = i;
      if (!emulated) {
        const auto next = row_of.find({s + 1, r});
        exchange = next == row_of.end() ? std::nullopt : std::optional(next->second);
      }
      if (!exchange) continue;
      add_positive(trace, "send", r, s, at, send[*exchange]);
      add_positive(trace, "wait", r, s, at, wait[*exchange]);
    }
  }
  trace.tracks.push_back({trace.step_track, "steps (rank 0)"});
  for (const int r : ranks) trace.tracks.push_back({r, cat("rank ", r)});
  return trace;
}

void write_trace(const Trace& trace, const std::string& log_path, std::ostream& out) {
  JsonWriter json(out, false);
  json.begin_object();
  json.key("traceEvents").begin_array();
  const auto metadata = [&](const char* name, int tid, auto value, const char* field) {
    json.begin_object();
    json.key("name").value(name);
    json.key("ph").value("M");
    json.key("pid").value(1);
    json.key("tid").value(tid);
    json.key("args").begin_object().key(field).value(value).end_object();
    json.end_object();
  };
  metadata("process_name", 0, trace.title, "name");
  for (std::size_t i = 0; i < trace.tracks.size(); ++i) {
    metadata("thread_name", trace.tracks[i].id, trace.tracks[i].name, "name");
    metadata("thread_sort_index", trace.tracks[i].id, static_cast<int>(i), "sort_index");
  }
  for (const TraceSpan& span : trace.spans) {
    const bool worker = span.track != trace.step_track;
    json.begin_object();
    json.key("name").value(span.name);
    json.key("cat").value(worker ? "worker" : "run");
    json.key("ph").value("X");
    json.key("ts").value(microseconds(span.start));
    json.key("dur").value(microseconds(span.duration));
    json.key("pid").value(1);
    json.key("tid").value(span.track);
    json.key("args").begin_object();
    json.key("step").value(span.step);
    if (worker) json.key("rank").value(span.track);
    json.end_object();
    json.end_object();
  }
  json.end_array();
  json.key("displayTimeUnit").value("ms");
  json.key("otherData").begin_object();
  json.key("log").value(log_path);
  json.key("clock").value(trace.clock);
  json.end_object();
  json.end_object();
  out << "\n";
}

}  // namespace mbkit::report
