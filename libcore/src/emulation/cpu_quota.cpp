// --cpu-quota on the virtual clock: the CFS bandwidth quota's window and budget (the model
// that checks the budget continuously) and, under --cpu-quota-tick, the kernel's mechanism
// itself (kernel/sched/fair.c: the group's pool, the CPU's slices, the checks at ticks and
// waits). See straggler.hpp for what each models.
#include <algorithm>
#include <cmath>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::emulation {

namespace {

// Times a rounding error away from a window's end count as at its end: compute that ends
// there, however rounded, is done by then and the worker stopped at once. A nanosecond per
// second of period, and more where the time's own rounding is larger (long runs).
double window_slack(double period, double time) {
  return period * 1e-9 + std::abs(time) * 1e-14;
}

}  // namespace

double QuotaWindow::runnable_from(double time) const {
  const double k = std::floor(time / period);
  return time - k * period < quota - window_slack(period, time) ? time : (k + 1) * period;
}

double QuotaWindow::compute_end(double start, double seconds) const {
  double now = runnable_from(start);
  double left = seconds;
  // Period by period; each period's start is k * period, not a running sum, so that rounding
  // does not drift over a long run.
  double k = std::floor(now / period);
  if (now >= (k + 1) * period) k += 1;  // runnable_from rounded onto the next period
  while (true) {
    const double window_end = k * period + quota;
    const double runnable = window_end - now;
    if (left <= runnable + window_slack(period, now)) return now + left;
    left -= runnable;
    k += 1;
    now = k * period;
    // The whole windows in between at once (a tiny quota must not loop for ever); the last
    // one or two are walked, so that compute ending at a window's end is found as above.
    const double whole = std::floor(left / quota);
    if (whole > 1) {
      k += whole - 1;
      left -= (whole - 1) * quota;
      now = k * period;
    }
  }
}

void QuotaBudget::enter(double to) {
  const double k = std::floor(to / limit.period);
  if (k > period) {
    // Each period's refill pays what ran beside the worker past the last one's quota.
    spent = std::max(0.0, spent - (k - period) * limit.quota);
    period = k;
  }
}

double QuotaBudget::runnable() {
  if (tick > 0) {
    // A computing worker runs on unchecked (its gradient leaves as it ends); only a stop is
    // waited out here.
    return time;
  }
  enter(time);
  if (spent >= limit.quota - window_slack(limit.period, time)) {
    const double from = time;
    // Stopped until a period's refill leaves budget: the next one's, or as many more as the
    // CPU run beside it past the quota takes (only then: a quota under the slack's rounding
    // counts as spent at once, and the next period is all it waits for).
    const double owed = spent - limit.quota;
    double periods = 1, left = 0;
    if (owed > 0) {
      const double more = std::floor(owed / limit.quota);
      periods += more;
      left = owed - more * limit.quota;
      if (left >= limit.quota - window_slack(limit.period, time)) {
        periods += 1;
        left = 0;
      }
    }
    period += periods;
    spent = left;
    time = period * limit.period;
    stopped += time - from;
    stops += 1;
  }
  return time;
}

void QuotaBudget::beside(double seconds) {
  if (!(seconds > 0)) return;
  charged += seconds;
  if (tick > 0) {
    unaccounted += seconds;
    return;
  }
  enter(time);
  spent += seconds;
}

double QuotaBudget::wait(double until) {
  if (tick > 0) return kernel_wait(until);
  if (until > time) {
    // On the CPU for its first busy_wait seconds (stopped ones included), asleep after.
    const double busy_until = std::min(until, time + busy_wait);
    const double spent_before = spent, period_before = period;
    if (busy_until > time) {
      const double k = std::floor(busy_until / limit.period);
      if (k > period) {
        // The rest of its period's budget, each whole period's between, and the last's.
        charged += std::clamp((period + 1) * limit.period - time, 0.0, limit.quota - spent) +
                   (k - period - 1) * limit.quota;
        // Refilled at the period's start, from which it has spun without a pause.
        period = k;
        spent = std::clamp(busy_until - k * limit.period, 0.0, limit.quota);
      } else {
        spent = std::min(limit.quota, spent + (busy_until - time));
      }
      charged += period > period_before ? spent : spent - spent_before;
    }
    enter(until);
    time = until;
  }
  return runnable();
}

void QuotaBudget::sleep(double until) {
  if (tick > 0) return kernel_sleep(until);
  if (!(until > time)) return;
  enter(until);
  time = until;
}

double QuotaBudget::run(double seconds) {
  if (tick > 0) return kernel_run(seconds);
  charged += seconds;
  const double quota = limit.quota;
  double left = seconds;
  while (true) {
    runnable();
    // Until the budget is spent or the period ends (then it runs on, refilled).
    const double room = std::max(0.0, std::min(quota - spent, (period + 1) * limit.period - time));
    if (left <= room + window_slack(limit.period, time)) {
      time += left;
      // The slack (rounding of times near a period's end) may exceed a tiny quota: never
      // more than the quota spent.
      spent = std::min(quota, spent + left);
      return time;
    }
    left -= room;
    const double stopped_from = time + room;
    period += 1;
    time = period * limit.period;  // not a running sum: no drift over a long run
    spent = 0;
    if (time > stopped_from) {
      stopped += time - stopped_from;
      stops += 1;
    }
    // Whole periods at once (a tiny quota must not loop for ever); the last one or two are
    // walked, so that compute ending at the budget's end is found as above.
    const double whole = std::floor(left / quota);
    if (whole > 1) {
      period += whole - 1;
      left -= (whole - 1) * quota;
      time = period * limit.period;
      stopped += (whole - 1) * (limit.period - quota);
      if (limit.period > quota) stops += whole - 1;
    }
  }
}

std::vector<double> QuotaBudget::saved() const {
  if (tick > 0) return {time, period, pool, local, unaccounted};
  return {time, period, spent};
}

void QuotaBudget::restore(const std::vector<double>& values, const std::string& where) {
  const std::size_t size = state_size(tick);
  const char* layout = tick > 0 ? "5 values under --cpu-quota-tick (time, period, pool, local, "
                                  "unaccounted)"
                                : "3 values (time, period, spent)";
  if (values.size() != size) {
    data_error(cat(where, ": a CPU quota's state is ", layout, ", not ", values.size()));
  }
  const double saved_time = values[0], saved_period = values[1];
  bool valid = std::isfinite(saved_time) && saved_time >= 0 && saved_period >= 0 &&
               saved_period == std::floor(saved_period);
  if (tick > 0) {
    // The pool holds at most the quota and what a sleeping CPU gave back (under a slice); the
    // local budget at most a slice, and below 0 an overrun of finite length.
    valid = valid && values[2] >= 0 && values[2] <= limit.quota + kSliceSeconds &&
            std::isfinite(values[3]) && values[3] <= kSliceSeconds && values[4] >= 0 &&
            std::isfinite(values[4]);
  } else {
    valid = valid && values[2] >= 0 && values[2] <= limit.quota;
  }
  if (!valid) {
    std::vector<std::string> shown;
    for (const double value : values) shown.push_back(shortest_decimal(value));
    data_error(cat(where, ": (", join(shown, ", "), ") is not a state of a CPU quota of ",
                   shortest_decimal(limit.quota), " s per ", shortest_decimal(limit.period), " s",
                   tick > 0 ? cat(" checked at a tick of ", shortest_decimal(tick), " s") : ""));
  }
  time = saved_time;
  period = saved_period;
  if (tick > 0) {
    pool = values[2];
    local = values[3];
    unaccounted = values[4];
  } else {
    spent = values[2];
  }
}

// ---- The kernel's mechanism (tick > 0) ----

void QuotaBudget::kernel_enter(double to) {
  const double k = std::floor(to / limit.period);
  if (k > period) {
    period = k;
    pool = limit.quota;  // refilled to at most the quota (no burst): the rest is lost
  }
}

bool QuotaBudget::kernel_check() {
  local -= unaccounted;
  unaccounted = 0;
  if (local > 0) return true;
  // A slice, or what the pool has: enough to bring the local budget to a slice above 0.
  const double taken = std::min(kSliceSeconds - local, pool);
  pool -= taken;
  local += taken;
  return local > 0;
}

void QuotaBudget::kernel_stop(double wants_from) {
  const double from = time;
  // Each period's refill is handed to the stopped CPU, up to what brings its budget to 1 ns
  // above 0; the period where that happens is when it runs again, with the pool's rest.
  const double owed = kUnthrottledSeconds - local;
  const double quota = limit.quota;
  double refills = std::max(1.0, std::ceil(owed / quota));
  // The last refill pays what the whole ones before it did not (rounding kept in range).
  double last = owed - (refills - 1) * quota;
  if (last > quota) {
    refills += 1;
    last -= quota;
  }
  period += refills;
  time = period * limit.period;
  pool = std::clamp(quota - last, 0.0, quota);
  local = kUnthrottledSeconds;
  // Only the time it would have run counts as stopped (a sleeping worker's is its sleep).
  const double kept_from = std::max(from, wants_from);
  if (time > kept_from) {
    stopped += time - kept_from;
    stops += 1;
  }
}

namespace {

// The scheduler's first tick after `time`, at (k + 0.618...) ticks (the golden ratio's
// fraction): no tick falls on the start of a period of a whole number of ticks or of half a tick
// (as 2 ms periods at a 4 ms tick). On the kernel measured here a spinning worker at 1 ms per
// 2 ms got 0.34-0.48 of a core, by where the cgroup's periods start against the ticks (which
// differs from cgroup to cgroup, not modelled); at this phase it gets 0.43.
double tick_after(double time, double tick) {
  constexpr double kPhase = 0.6180339887498949;
  double next = (std::floor(time / tick - kPhase) + 1 + kPhase) * tick;
  if (!(next > time)) next += tick;
  return next;
}

}  // namespace

double QuotaBudget::kernel_run(double seconds) {
  charged += seconds;
  double left = seconds;
  while (true) {
    const double next_tick = tick_after(time, tick);
    if (time + left <= next_tick) {
      time += left;
      unaccounted += left;
      kernel_enter(time);
      return time;
    }
    left -= next_tick - time;
    unaccounted += next_tick - time;
    time = next_tick;
    kernel_enter(time);
    if (!kernel_check()) kernel_stop();
  }
}

void QuotaBudget::kernel_spin(double to) {
  while (time < to) {
    const double period_end = (period + 1) * limit.period;
    const double end = std::min(to, period_end);
    const double want = end - time;
    const double need = want - std::max(local, 0.0);
    if (need <= 0) {
      local -= want;
    } else {
      // Spent, the local budget takes whole slices from the pool, as far as it has them.
      const double taken = std::min(std::ceil(need / kSliceSeconds) * kSliceSeconds, pool);
      if (taken < need) {
        const double ran = std::max(local, 0.0) + taken;
        charged += ran;
        time += ran;
        pool -= taken;
        local = 0;
        kernel_stop();
        continue;
      }
      pool -= taken;
      local = std::max(local, 0.0) + taken - want;
    }
    charged += want;
    time = end;
    kernel_enter(time);
  }
}

double QuotaBudget::kernel_wait(double until) {
  // A message already there ends the wait at its first poll: no check, the run goes on.
  if (!(until > time)) return time;
  if (busy_wait == kWaitsOnCpu) {
    // Spinning is running: checked at the ticks only, as compute is.
    while (time < until) {
      const double next_tick = tick_after(time, tick);
      const double end = std::min(until, next_tick);
      charged += end - time;
      unaccounted += end - time;
      time = end;
      kernel_enter(time);
      if (time == next_tick && !kernel_check()) kernel_stop();
    }
    return time;
  }
  const double busy_until = time + busy_wait;
  // Its first sched_yield checks the run so far; from then on each does.
  kernel_enter(time);
  if (!kernel_check()) kernel_stop();
  kernel_spin(std::min(until, busy_until));
  if (until > time) kernel_sleep(until);
  // Woken (or still yielding) with its budget spent: a slice from the pool, or stopped.
  if (!(local > 0) && !kernel_check()) kernel_stop();
  return time;
}

void QuotaBudget::kernel_sleep(double until) {
  if (!(until > time)) return;
  kernel_enter(time);
  if (!kernel_check()) {
    // Stopped as it went to sleep: the refills repay it while it sleeps; it wakes at `until`
    // or, not repaid by then, when it is.
    kernel_stop(until);
    if (time >= until) return;
  } else if (local > kMinLocalSeconds) {
    // A CPU left with nothing to run gives its budget above 1 ms back to the pool.
    pool += local - kMinLocalSeconds;
    local = kMinLocalSeconds;
  }
  kernel_enter(until);
  time = until;
}

}  // namespace mbkit::emulation
