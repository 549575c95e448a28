// Straggler induction, as in the Anytime Mini-Batch experiments: each worker sleeps before each
// step for a delay drawn from a mixture of folded normals (--induce), and chosen workers are
// made slower by a constant factor (--slowdown).
//
//   delay = min(cap, |N(mean, std)|), the component picked with probability weight,
//           or min(cap, Exp(mean)) for an exponential component (exp:MEAN:WEIGHT),
//   cap   = min(1024, max over the components of mean + 5 std, or 30 means for an
//           exponential one: a draw reaches it with probability e^-30, so that even the
//           largest of 10,000 workers' delays keeps its expectation, H_N x mean)
//
// Named profiles (mean:std:weight):
//   niagara  0:0:0.4, 0:0.4:0.3, 2:0.3:0.2, 5:0.3:0.1           (cap 6.5 s, mean about 1.0 s)
//   cedar    0:0:0.4, 0.05:0.04:0.3, 0.15:0.03:0.2, 0.25:0.03:0.1 (cap 0.4 s, mean about 0.07 s)
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/util/random.hpp"

namespace mbkit::emulation {

/// One folded normal of a straggler mixture, in seconds, or an exponential of that mean.
struct StragglerComponent {
  double mean = 0;
  double std = 0;  ///< 0 for an exponential component
  double weight = 0;
  bool exponential = false;
  bool operator==(const StragglerComponent&) const = default;
};

struct StragglerProfile {
  std::string name;                            ///< "niagara", "cedar", or "custom"
  std::vector<StragglerComponent> components;  ///< weights normalised to sum 1

  /// min(1024, max over the components of mean + 5 std): the longest delay drawn.
  double cap() const;
  /// E[min(cap, |N(mean, std)|)] (or E[min(cap, Exp(mean))]) over the mixture, in closed form.
  double expected_delay() const;
  /// P(delay <= x): the mixture's distribution function (1 from the cap on).
  double cdf(double x) const;
  /// E[max of n independent delays] = the integral over [0, cap] of 1 - cdf(x)^n: what a
  /// synchronous step of n workers waits for (H_n x mean for exponential delays).
  double expected_max(int n) const;
  /// One line: "niagara: 0:0:0.4, 0:0.4:0.3, 2:0.3:0.2, 5:0.3:0.1 (cap 6.5 s, mean 0.996 s)".
  std::string describe() const;
  /// MEAN:STD:WEIGHT,... text that parse_straggler_profile reads back to the same components.
  std::string spec() const;
  bool operator==(const StragglerProfile&) const = default;
};

/// --induce: "" gives no profile; otherwise a known name, MEAN:STD:WEIGHT,... (numbers in
/// full, mean, std and weight >= 0, some weight > 0; an item exp:MEAN:WEIGHT is an exponential
/// component) or exp:MEAN alone (exponential delays of that mean). Throws a usage error naming
/// --induce.
std::optional<StragglerProfile> parse_straggler_profile(const std::string& text);
/// "niagara, cedar".
std::string known_straggler_profiles();

/// Where a worker's induced delays come from, one per step: a profile's draws
/// (StragglerSampler) or a replayed trace (delay_trace.hpp's TraceReplay).
class DelaySource {
 public:
  virtual ~DelaySource() = default;
  /// Seconds to wait before the next step, >= 0.
  virtual double next() = 0;
};

/// The delays of one worker, step after step: deterministic in (seed, rank), drawn from
/// Rng(seed ^ 0x5712a66e5, rank), a stream apart from the run's other Rng(seed, ...) ones.
class StragglerSampler final : public DelaySource {
 public:
  /// The profile must have come from parse_straggler_profile; rank >= 0.
  StragglerSampler(StragglerProfile profile, std::uint64_t seed, int rank);
  /// Seconds to sleep before the next step, in [0, cap].
  double next() override;
  const StragglerProfile& profile() const { return profile_; }

 private:
  StragglerProfile profile_;
  std::vector<double> cumulative_;  ///< running sums of the weights
  double cap_;
  Rng rng_;
};

/// The AMB original's communication straggler (--async_delay_std, its RecvStraggler): the delay
/// of worker `worker`'s message of round `round` (both from 0), std |N(0, 1)| seconds, the
/// normal being the first Rng(seed ^ 0xc0de1a7, worker << 32 | round).normal().
double message_delay(double std, std::uint64_t seed, int worker, std::int64_t round);

/// --slowdown RANK=FACTOR,...: a worker with factor f sleeps (f - 1) times its compute time
/// more at each step.
struct Slowdown {
  std::map<int, double> factors;  ///< rank -> factor >= 1

  /// The factor of `rank`: 1 when it is not listed.
  double factor_for(int rank) const;
  /// (factor - 1) * compute_seconds: the extra sleep of `rank` after a step of that compute.
  double extra_delay(int rank, double compute_seconds) const;
  /// Throws a usage error naming --slowdown and the first listed rank >= world_size.
  void check_ranks(int world_size) const;
  /// "rank 2 x3, rank 4 x1.5", or "none".
  std::string describe() const;
  bool empty() const { return factors.empty(); }
};

/// "" gives no slowdown; otherwise RANK=FACTOR,... with ranks >= 0 given once and finite
/// factors >= 1. Throws a usage error naming --slowdown.
Slowdown parse_slowdown(const std::string& text);

/// A CFS bandwidth quota (--cpu-quota RANK=QUOTA/PERIOD): the worker gets `quota` seconds of a
/// core in each `period`, periods starting at time 0 of the run's virtual timeline. As a window:
/// a worker that always wants the CPU (it computes, or spins in its waits) is runnable during
/// [kP, kP + quota) of every period and stopped for the rest; QuotaBudget is the general case.
struct QuotaWindow {
  double quota = 0;   ///< seconds runnable per period, 0 < quota <= period
  double period = 0;  ///< seconds

  /// The first time at or after `time` at which the always-running worker is runnable.
  double runnable_from(double time) const;
  /// When compute of `seconds` that starts at `start` ends: once `seconds` of runnable time
  /// have passed (the stopped parts of the periods in between do not count).
  double compute_end(double start, double seconds) const;
};

/// The kernel's CFS bandwidth control of one worker (cgroup cpu.max): `quota` seconds of CPU
/// per period, refilled at each period's start (what a period leaves unused is lost), spent
/// only while the worker runs; once spent the worker is stopped until the next period. Its
/// state is the period it is in and the budget spent there, as of `time`. Computing spends
/// budget; sleeping (induced delays, --slowdown) does not; waiting for a message spends it
/// for as long as the worker stays on the CPU in it before it sleeps (`busy_wait`: all of it
/// under --comm-wait spin, and then, with no sleeps, the budget is the
/// window of QuotaWindow. The scheduler's tick (throttling noticed late by up to a tick) is
/// not modelled: periods of a few ticks or less overrun in a real cgroup.
/// QuotaBudget::busy_wait of a worker that spins in its waits (--comm-wait spin).
inline constexpr double kWaitsOnCpu = std::numeric_limits<double>::infinity();

struct QuotaBudget {
  QuotaWindow limit;
  /// Seconds of a wait for a message spent on the CPU (spending budget as compute does, the
  /// time stopped by the quota included) before the worker sleeps until the message:
  /// kWaitsOnCpu under --comm-wait spin; under yield comm::kYieldWaitSeconds (its wait spins,
  /// then calls sched_yield, which keeps an idle core, for 3 ms); 0 a worker that sleeps at once.
  double busy_wait = 0;
  double time = 0;    ///< the state's time, virtual seconds
  double period = 0;  ///< the index of the period `time` is in (an integer)
  double spent = 0;   ///< budget spent in that period, seconds
  /// Totals since the run's start or resume, for the end-of-run report only (not checkpointed:
  /// they change no emulated time): CPU seconds charged to the budget (compute and the busy
  /// part of waits), seconds stopped by the quota, and how many times it was stopped.
  double charged = 0;
  double stopped = 0;
  double stops = 0;

  /// Passes to `until` in a wait for a message (spending budget for its first `busy_wait`
  /// seconds; nothing when
  /// `until` is not later than `time`), then until it can run; returns that time.
  double wait(double until);
  /// Sleeps to `until` (no budget spent; nothing when `until` is not later than `time`).
  void sleep(double until);
  /// Runs `seconds` of CPU from `time`, stopped while its budget is spent; returns the end.
  double run(double seconds);
  /// The first time at or after `time` at which it can run (time itself, or the next
  /// period's start when the budget is spent); the state moves there.
  double runnable();

  /// time, period, spent: a checkpoint's values (restore() reads them back).
  std::vector<double> saved() const { return {time, period, spent}; }
  /// Throws a data error naming `where` when the values are not a state of this limit.
  void restore(const std::vector<double>& values, const std::string& where);

 private:
  /// Moves the state into the period of `to` (>= time): a later period starts unspent.
  void enter(double to);
};

/// --cpu-quota RANK=QUOTA/PERIOD,...: the ranks' quota windows on the virtual clock.
struct CpuQuota {
  std::map<int, QuotaWindow> windows;  ///< rank -> its quota

  /// The window of `rank`, if it has one.
  std::optional<QuotaWindow> for_rank(int rank) const;
  /// The budget of `rank` at the run's start, if it has a quota; `busy_wait`: QuotaBudget's.
  std::optional<QuotaBudget> budget_for(int rank, double busy_wait) const;
  /// Throws a usage error naming --cpu-quota and the first listed rank >= world_size.
  void check_ranks(int world_size) const;
  /// "rank 1 0.05 s per 0.1 s", or "none".
  std::string describe() const;
  bool empty() const { return windows.empty(); }
};

/// "" gives none; otherwise RANK=QUOTA/PERIOD,... in seconds, ranks >= 0 given once, finite
/// 0 < QUOTA <= PERIOD. Throws a usage error naming --cpu-quota.
CpuQuota parse_cpu_quota(const std::string& text);

}  // namespace mbkit::emulation
