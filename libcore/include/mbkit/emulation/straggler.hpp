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

#include <cstddef>
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
/// under --comm-wait spin, and then, with no sleeps, the budget is the window of QuotaWindow).
///
/// With `tick` above 0 (--cpu-quota-tick, the scheduler's tick: 1/CONFIG_HZ) it is the
/// kernel's mechanism instead, which that model idealises (kernel/sched/fair.c, CFS
/// bandwidth): the group's runtime is a pool refilled to at most the quota at each period's
/// start; the worker's CPU takes it in slices of up to 5 ms into a local budget; running
/// spends the local budget, but it is checked only at accounting events: the ticks (at
/// (k + 0.618) ticks of the virtual timeline, apart from the periods' starts) while it computes
/// or spins, at once in a yielding wait (each sched_yield), and when it sleeps or wakes. So a
/// computing worker overruns its quota until the next check, and the refills that fall while
/// it runs unchecked are lost (the pool is full); the overrun is a debt that the next periods'
/// refills repay before it runs again (each to 1 ns above 0). A worker that sleeps gives its
/// local budget above 1 ms back to the pool.
/// The kernel's constants (tick > 0): the slice a CPU takes from the pool
/// (sched_cfs_bandwidth_slice_us, 5 ms by default), what a sleeping CPU keeps of its local
/// budget (min_cfs_rq_runtime), and what a refill leaves a stopped CPU above 0.
inline constexpr double kSliceSeconds = 5e-3;
inline constexpr double kMinLocalSeconds = 1e-3;
inline constexpr double kUnthrottledSeconds = 1e-9;
/// QuotaBudget::busy_wait of a worker that spins in its waits (--comm-wait spin).
inline constexpr double kWaitsOnCpu = std::numeric_limits<double>::infinity();

struct QuotaBudget {
  QuotaWindow limit;
  /// Seconds of a wait for a message spent on the CPU (spending budget as compute does, the
  /// time stopped by the quota included) before the worker sleeps until the message:
  /// kWaitsOnCpu under --comm-wait spin; under yield comm::kYieldWaitSeconds (its wait spins,
  /// then calls sched_yield, which keeps an idle core, for 3 ms); 0 a worker that sleeps at once.
  double busy_wait = 0;
  /// The scheduler's tick in seconds (--cpu-quota-tick): 0 checks the budget continuously
  /// (the window model), above 0 the kernel's pool, slices and ticks (see above).
  double tick = 0;
  /// tick > 0: the CPU seconds of a round's receive of its parameters (copying the message:
  /// the message model's per-byte part), run under the quota as the round's wait ends, so
  /// that a worker stopped while they arrived copies them once it runs again.
  double receive = 0;
  double time = 0;    ///< the state's time, virtual seconds
  double period = 0;  ///< the index of the period `time` is in (an integer)
  /// tick 0: budget spent in that period, seconds (above the quota: CPU run beside the worker
  /// that later periods pay)
  double spent = 0;
  double pool = 0;  ///< tick > 0: the group's runtime left in the pool, seconds
  /// tick > 0: the local budget as of the last check (below 0: an overrun to repay).
  double local = 0;
  double unaccounted = 0;  ///< tick > 0: CPU seconds run since the last check
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
  /// Sleeps to `until` (no budget spent; nothing when `until` is not later than `time`). Under
  /// a tick, a worker whose overrun is not repaid by `until` wakes later (`time` is then past
  /// `until`).
  void sleep(double until);
  /// Runs `seconds` of CPU from `time`, stopped while its budget is spent; returns the end.
  double run(double seconds);
  /// `seconds` of CPU that another thread of the worker runs from `time` (the loader's, which
  /// prepares the next batch beside the compute): the worker's time does not move, but the
  /// group's budget pays them. Past the quota they are a debt: the worker is stopped until
  /// later periods' budgets have paid it (tick 0), or they are taken at the next check as run
  /// by the worker (tick > 0).
  void beside(double seconds);
  /// The first time at or after `time` at which it can run (time itself, or the next
  /// period's start when the budget is spent); the state moves there.
  double runnable();

  /// The state as a checkpoint keeps it (restore() reads it back): time, period, spent; under
  /// a tick time, period, pool, local, unaccounted.
  std::vector<double> saved() const;
  /// How many values saved() gives for a tick of `tick` seconds (0: the continuous model).
  static std::size_t state_size(double tick) { return tick > 0 ? 5 : 3; }
  /// Throws a data error naming `where` when the values are not a state of this limit.
  void restore(const std::vector<double>& values, const std::string& where);

 private:
  /// Moves the state into the period of `to` (>= time): a later period starts unspent.
  void enter(double to);

  // The kernel's mechanism (tick > 0), cpu_quota.cpp.
  double kernel_wait(double until);
  void kernel_sleep(double until);
  double kernel_run(double seconds);
  /// Crosses the periods' starts up to `to` while the worker is not stopped: each refills the
  /// pool to the quota.
  void kernel_enter(double to);
  /// An accounting event at `time`: the unaccounted run is taken from the local budget, which,
  /// spent, takes a slice from the pool. Returns whether the worker may run on.
  bool kernel_check();
  /// Stopped at `time` with its local budget spent: the periods' refills repay it; `time`
  /// moves to the start of the period where it can run again. The time stopped counts from
  /// `wants_from` where that is later (a worker asleep until then).
  void kernel_stop(double wants_from = 0);
  /// On the CPU, checked continuously (a yielding wait), from `time` to `to`.
  void kernel_spin(double to);
};

/// --cpu-quota RANK=QUOTA/PERIOD,...: the ranks' quota windows on the virtual clock.
struct CpuQuota {
  std::map<int, QuotaWindow> windows;  ///< rank -> its quota
  double tick = 0;                     ///< --cpu-quota-tick: QuotaBudget::tick
  double receive = 0;                  ///< QuotaBudget::receive (the run's message model)

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
