// AMB-DG (Al-Lawati & Draper, "Anytime Minibatch with Delayed Gradients", ICASSP 2020) as a
// policy of mb-train-amb's synchronous ps step: `mb-train-amb --delayed-gradients TAU`.
//
// In the paper each worker computes for the fixed time T every round and never waits for the
// master: it sends its round's gradient sum and starts the next round at once on the newest
// parameters it holds; the master applies each round's sums as they arrive. Where the round trip
// (sums up, parameters down) takes up to TAU rounds, round t is computed at the parameters of
// update t - TAU, and the master's update t is x(t + 1) = x(t) - lr * g(x(t - TAU)).
//
// mbkit takes TAU as given (or, with auto, from the message model: ceil(round trip / T)) and
// keeps the steps synchronous in the data they exchange, so every transport and --emulate add
// the same values in the same order: every rank keeps the parameter versions the coming rounds
// still compute at (ParameterVersions) and a round computes at version max(0, t - TAU); the
// virtual clock times the rounds as the paper's workers would run them (DelayedTimeline).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/comm/in_flight.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// --delayed-gradients auto: the rounds of `time_limit` seconds that a round trip of
/// `round_trip` seconds spans, rounded up (0 for no round trip), at most kMaxDelayRounds.
int delay_rounds_for(double round_trip, double time_limit);

/// The parameter versions (version v: the parameters after v updates) that the coming rounds
/// still compute at: the newest kept and the `delay` before it (fewer at the start).
class ParameterVersions {
 public:
  explicit ParameterVersions(int delay) : delay_(delay) {}
  int delay() const { return delay_; }

  /// At the start of step `step`: `latest` is version `step`. Keeps it, forgets the versions
  /// no round from `step` on computes at.
  void keep(std::int64_t step, std::span<const float> latest);
  /// The version step `step`'s round computes at: step - delay, or the oldest kept (version 0
  /// at the start; the first kept after a resume from a checkpoint without versions).
  std::int64_t version_for(std::int64_t step) const;
  std::span<const float> parameters_of(std::int64_t version) const;
  std::span<const float> latest() const { return versions_.back().second; }

  /// For a checkpoint at step `step` (versions up to step - 1 kept): the versions rounds from
  /// `step` on still compute at, oldest first, named "version_V".
  std::vector<NamedArray> saved(std::int64_t step) const;
  /// The reverse on resume at `step`: a data error naming `path` when they are not versions
  /// max(0, step - delay) to step - 1 of `parameters` values each. None: the window starts
  /// over at the resumed parameters.
  void restore(const std::vector<NamedArray>& arrays, std::int64_t step, std::size_t parameters,
               const std::string& path);
  /// The versions kept, oldest first (what resume broadcasts to the other ranks).
  const std::deque<std::pair<std::int64_t, std::vector<float>>>& versions() const {
    return versions_;
  }
  void set_versions(std::deque<std::pair<std::int64_t, std::vector<float>>> versions) {
    versions_ = std::move(versions);
  }

 private:
  int delay_;
  std::deque<std::pair<std::int64_t, std::vector<float>>> versions_;
};

/// A worker's versions on the wall clock (delayed_exchange.hpp): those it held at the start
/// (version `first` on), then the master's as they come, in order. Round t computes at version
/// max(first, t - delay), and may start once that version has come; the older ones are then
/// forgotten. The values are the exchange's (a version's message), kept as they came.
class WorkerVersions {
 public:
  /// A version's message as received (comm/in_flight.hpp: its receive may outlive the exchange).
  using Values = comm::MessageBuffer<float>;

  explicit WorkerVersions(int delay) : delay_(delay) {}

  /// The next version, `version`: the one after the newest held (any, when none is).
  void add(std::int64_t version, Values values);
  /// The version round `round` computes at (a version must be held).
  std::int64_t version_for(std::int64_t round) const;
  /// Whether round `round`'s version has come.
  bool ready(std::int64_t round) const;
  /// Round `round`'s version (ready), the older ones forgotten.
  std::span<const float> take(std::int64_t round);
  std::int64_t newest() const { return held_.back().first; }
  std::span<const float> newest_values() const { return held_.back().second; }
  std::size_t held() const { return held_.size(); }

 private:
  int delay_;
  std::int64_t first_ = 0;  ///< the oldest version held at the start
  std::deque<std::pair<std::int64_t, Values>> held_;
};

/// Rank 0's timeline of AMB-DG's rounds on the virtual clock (ps, one server). Worker w's link
/// to the master costs link_w per message (CommModel::message of the gradient's bytes). Worker
/// w starts round t when it has ended round t - 1 and holds the version the round computes at,
/// which reached it link_w after the master made it (version 0: held from the start); it is
/// ready delay + compute later and its sum reaches the master link_w after that, while it goes
/// on with round t + 1. The master applies round t's sums once all have arrived and update
/// t - 1 is done, in `update` seconds: that is when version t + 1 is made. A step's time is
/// from update t - 1's end to update t's; the communication is hidden except where a round
/// trip exceeds the delay's rounds. Times are kept relative to the last update's end.
class DelayedTimeline {
 public:
  DelayedTimeline(int delay, std::vector<double> links);

  /// Step `step`'s round, its version `version` (ParameterVersions::version_for): the workers'
  /// induced delays and compute. end: the step's virtual seconds; wait: per worker the idle
  /// time before its round (waiting for its version); sends and receives: link_w each.
  SyncStepTime step(std::int64_t step, std::int64_t version,
                    const std::vector<SyncWorkerTime>& workers, double update);

  /// [workers, each worker's end of its last round, versions, (version, made) per version]
  /// for a checkpoint; restore() takes it back (a different number of workers, or none saved:
  /// every worker starts free and holds the versions kept).
  std::vector<double> saved() const;
  void restore(const std::vector<double>& values, const std::string& path);

 private:
  int delay_;
  std::vector<double> links_;
  std::vector<double> free_;  ///< per worker: when its last round ended
  /// (version, when the master made it); -infinity: every worker holds it from the start.
  std::deque<std::pair<std::int64_t, double>> made_;
};

}  // namespace mbkit::train
