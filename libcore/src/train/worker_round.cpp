#include "mbkit/train/worker_round.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/anytime.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::train {
namespace {

void sleep_for(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// A round under --cpu-quota on the virtual clock, in absolute virtual time (the quota's periods
// start at the run's time 0), on a copy of the worker's budget. The round starts when the
// worker can run, after the wait for it (the budget spent there if it spins), and never before
// the last round's gradient left; its induced delay and --slowdown sleeps spend no budget; its
// compute runs only while budget is left; its gradient leaves when it can run. As it takes its
// batch, the loader's thread prepares the next one beside it (`loader_cpu`), from its budget.
class QuotaTimeline {
 public:
  QuotaTimeline(const emulation::QuotaBudget& budget, double start, double delay, double loader_cpu)
      : budget_(budget), start_(start) {
    // Under the kernel's model the parameters' copy is CPU: the last `receive` seconds of the
    // wait (as far as it goes) are run, stopped where the budget is spent.
    const double copy = std::clamp(start - budget_.time, 0.0, budget_.receive);
    double ready = budget_.wait(start - copy);
    if (copy > 0) ready = budget_.run(copy);
    budget_.sleep(ready + delay);
    budget_.beside(loader_cpu);
  }

  void compute(double cost, double extra) { budget_.sleep(budget_.run(cost) + extra); }
  /// Seconds since the round's start (AMB's time limit counts them).
  double elapsed() const { return budget_.time - start_; }
  /// The round's seconds until its gradient can leave, less `compute`: its delay. The budget
  /// is then the worker's as its gradient leaves.
  double finish(double compute) { return budget_.runnable() - start_ - compute; }
  const emulation::QuotaBudget& budget() const { return budget_; }

 private:
  emulation::QuotaBudget budget_;
  double start_;
};

}  // namespace

double quota_busy_wait(const std::string& comm_wait) {
  return comm_wait == "spin" ? emulation::kWaitsOnCpu : comm::kYieldWaitSeconds;
}

WorkerRound::WorkerRound(Parts parts)
    : parts_(std::move(parts)),
      budget_(parts_.cpu_quota),
      warmup_left_(parts_.compute_model ? parts_.compute_model->warmup : 0.0) {
  if (parts_.trace) {
    sampler_ = std::make_unique<emulation::TraceReplay>(parts_.trace, parts_.worker);
  } else if (parts_.stragglers) {
    sampler_ =
        std::make_unique<emulation::StragglerSampler>(*parts_.stragglers, parts_.seed, parts_.rank);
  }
}

double WorkerRound::loader_cpu() const {
  // The model's (the emulated worker's loader, not this process's, which may load inline).
  return parts_.compute_model ? parts_.compute_model->loader_cpu(parts_.loader.batch_size_ahead(0))
                              : 0.0;
}

void WorkerRound::skip_rounds(std::int64_t rounds) {
  if (!sampler_) return;
  for (std::int64_t r = 0; r < rounds; ++r) sampler_->next();
}

WorkerReport WorkerRound::run(std::int64_t at_step, double loss_scale) {
  const bool virtual_clock = parts_.clock.is_virtual();
  abandoned_ = false;
  WorkerReport report;
  report.rank = parts_.rank;
  const auto round_start = SteadyClock::now();
  if (exchange_end_ && !virtual_clock) {
    report.exit_time = std::chrono::duration<double>(round_start - *exchange_end_).count();
  }
  report.recv_time = previous_recv_;
  double emulated = 0;  // virtual clock: seconds since the round started
  const bool continues = std::exchange(continues_, false);
  // A continued round's batch j of the step draws the masks of the virtual clock's j-th.
  continued_batches_ = continues ? continued_batches_ + 1 : 0;
  if (sampler_ && !continues) {
    report.sleep_time =
        predrawn_delay_ ? *std::exchange(predrawn_delay_, std::nullopt) : sampler_->next();
    if (!virtual_clock) sleep_for(report.sleep_time);
    emulated += report.sleep_time;
  }
  std::optional<QuotaTimeline> quota;
  if (virtual_clock && budget_) {
    const double start = round_start_.value_or(parts_.clock.virtual_now());
    quota.emplace(*budget_, start, report.sleep_time, loader_cpu());
  }
  round_start_.reset();
  auto elapsed = [&] {
    if (quota) return quota->elapsed();
    return virtual_clock ? emulated : seconds_since(round_start);
  };
  const RoundRule& rule = parts_.rule;
  // K-batch-sync: the planned count of whole batches, each a micro-batch of the anytime round.
  const int whole_batches = rule.whole_batches ? std::exchange(next_batches_, -1) : 0;
  MBKIT_CHECK(!rule.whole_batches || whole_batches >= 0, "a K-batch-sync round without its plan");
  report.send_time = previous_send_;
  report.wait_time = previous_wait_;
  if (rule.whole_batches && whole_batches == 0) {
    report.micro_batches = 0;
    return report;
  }
  const data::Batch* batch = &parts_.loader.next();
  last_drawn_ = batch->size;
  // FMB: one micro-batch, the whole batch, with no time limit.
  const auto plan = rule.whole_batches
                        ? MicroBatches{batch->size, whole_batches}
                        : split_batch(batch->size, rule.anytime ? rule.micro_size : batch->size);
  const double scale = loss_scale > 0 ? loss_scale : 1.0 / batch->size;
  const std::size_t image = batch->images.size() / static_cast<std::size_t>(batch->size);
  // Dropout masks differ between workers; worker 0 draws those of a single-process run.
  const std::uint64_t step_seed =
      Rng(parts_.seed,
          0x57e9 + static_cast<std::uint64_t>(at_step) +
              (static_cast<std::uint64_t>(parts_.masks_of >= 0 ? parts_.masks_of : parts_.worker)
               << 40))
          .next_u64();
  double exchange_in_backward = 0;
  std::function<void(std::size_t)> ready;
  if (gradients_ready) {
    ready = [&](std::size_t from) { exchange_in_backward = gradients_ready(from); };
  }
  WorkTimer timer(parts_.clock, parts_.net.backend());
  auto run_micro_batch = [&](int k) {
    // Whole batches: the loader's next for each after the first (an epoch's last may be short).
    if (rule.whole_batches && k > 0) batch = &parts_.loader.next();
    const int size = rule.whole_batches ? batch->size : plan.size;
    timer.restart();
    const std::size_t offset =
        rule.whole_batches ? 0 : static_cast<std::size_t>(k) * static_cast<std::size_t>(plan.size);
    exchange_in_backward = 0;
    // Forward and backward: one replayed CUDA graph under --cuda-graphs.
    const auto outcome = parts_.net.train(
        batch->images.data() + offset * image, batch->labels.data() + offset, size,
        step_seed + static_cast<std::uint64_t>(k + continued_batches_) * 0x9e3779b97f4a7c15ULL,
        scale, k > 0, ready);
    const double measured = timer.seconds();  // a GPU's queued work belongs to this micro-batch
    // A device's time overlaps part of the host's exchange: never below zero.
    const double cost = virtual_clock && parts_.compute_model
                            ? parts_.compute_model->cost(size) + (k == 0 ? warmup_left_ : 0.0)
                            : std::max(0.0, measured - exchange_in_backward);
    const double extra = parts_.slowdown.extra_delay(parts_.rank, cost);
    if (!virtual_clock) sleep_for(extra);
    emulated += cost + extra;
    if (quota) quota->compute(cost, extra);
    report.compute_time += cost;
    report.sleep_time += extra;
    report.samples += size;
    report.loss_sum += outcome.loss_sum;
    report.correct += outcome.correct;
  };
  const auto round = run_anytime_round(
      plan, rule.anytime ? rule.time_limit : std::numeric_limits<double>::infinity(), elapsed,
      run_micro_batch, between_micro_batches, abandon_round);
  abandoned_ = round.cut;
  report.micro_batches = round.done;
  if (round.done > 0) warmup_left_ = 0;
  report.finished_early = rule.anytime && round.finished_early;
  if (quota) {
    report.sleep_time = quota->finish(report.compute_time);
    budget_ = quota->budget();
  }
  return report;
}

std::optional<double> WorkerRound::predict_ready() {
  if (!parts_.clock.is_virtual() || !parts_.compute_model) return std::nullopt;
  if (sampler_ && !predrawn_delay_) predrawn_delay_ = sampler_->next();
  double emulated = predrawn_delay_.value_or(0.0);
  // Summed as run() sums its report's, so that the ready time is the report's to the bit.
  double sleep = emulated, compute = 0;
  std::optional<QuotaTimeline> quota;
  if (budget_) {
    quota.emplace(*budget_, round_start_.value_or(parts_.clock.virtual_now()), emulated,
                  loader_cpu());
  }
  const RoundRule& rule = parts_.rule;
  const int size = parts_.loader.next_batch_size();
  const auto plan = split_batch(size, rule.anytime ? rule.micro_size : size);
  // run()'s rule over the model's costs instead of the micro-batches themselves.
  run_anytime_round(
      plan, rule.anytime ? rule.time_limit : std::numeric_limits<double>::infinity(),
      [&] { return quota ? quota->elapsed() : emulated; },
      [&](int k) {
        const double cost = parts_.compute_model->cost(plan.size) + (k == 0 ? warmup_left_ : 0.0);
        const double extra = parts_.slowdown.extra_delay(parts_.rank, cost);
        emulated += cost + extra;
        if (quota) quota->compute(cost, extra);
        compute += cost;
        sleep += extra;
      });
  if (quota) sleep = quota->finish(compute);
  return sleep + compute;
}

std::optional<std::vector<double>> WorkerRound::predict_completions(int count) {
  if (!parts_.clock.is_virtual() || !parts_.compute_model) return std::nullopt;
  if (sampler_ && !predrawn_delay_) predrawn_delay_ = sampler_->next();
  // Summed as run() sums its report's, so that the last batch's time is the report's to the bit.
  double sleep = predrawn_delay_.value_or(0.0), compute = 0;
  std::vector<double> completions;
  completions.reserve(static_cast<std::size_t>(std::max(count, 0)));
  for (int j = 0; j < count; ++j) {
    const double cost = parts_.compute_model->cost(parts_.loader.batch_size_ahead(j)) +
                        (j == 0 ? warmup_left_ : 0.0);
    const double extra = parts_.slowdown.extra_delay(parts_.rank, cost);
    compute += cost;
    sleep += extra;
    completions.push_back(sleep + compute);
  }
  return completions;
}

std::optional<double> WorkerRound::predict_samples_ready(std::int64_t samples) {
  if (!parts_.clock.is_virtual() || !parts_.compute_model) return std::nullopt;
  if (sampler_ && !predrawn_delay_) predrawn_delay_ = sampler_->next();
  // Summed as run_samples() sums its report's, so that the ready time is the report's to the bit.
  double sleep = predrawn_delay_.value_or(0.0), compute = 0;
  std::int64_t done = 0;
  for (std::int64_t j = 0; done < samples; ++j) {
    const std::int64_t size =
        std::min<std::int64_t>(parts_.loader.batch_size_ahead(j), samples - done);
    const double cost = parts_.compute_model->cost(size) + (j == 0 ? warmup_left_ : 0.0);
    compute += cost;
    sleep += parts_.slowdown.extra_delay(parts_.rank, cost);
    done += size;
  }
  return sleep + compute;
}

WorkerReport WorkerRound::run_samples(std::int64_t at_step, std::int64_t samples,
                                      const std::function<void()>& update) {
  const bool virtual_clock = parts_.clock.is_virtual();
  WorkerReport report;
  report.rank = parts_.rank;
  report.micro_batches = 0;
  if (predrawn_delay_) {
    report.sleep_time = *std::exchange(predrawn_delay_, std::nullopt);
  } else if (sampler_) {
    report.sleep_time = sampler_->next();
    if (!virtual_clock) sleep_for(report.sleep_time);
  }
  const std::uint64_t round_seed =
      Rng(parts_.seed, 0xdb51 + static_cast<std::uint64_t>(at_step) +
                           (static_cast<std::uint64_t>(parts_.worker) << 40))
          .next_u64();
  WorkTimer timer(parts_.clock, parts_.net.backend());
  while (report.samples < samples) {
    const data::Batch& batch = parts_.loader.next();
    const int size = static_cast<int>(std::min<std::int64_t>(batch.size, samples - report.samples));
    timer.restart();
    const auto outcome = parts_.net.train(
        batch.images.data(), batch.labels.data(), size,
        round_seed + static_cast<std::uint64_t>(report.micro_batches) * 0x9e3779b97f4a7c15ULL,
        1.0 / size);
    update();
    const double measured = timer.seconds();  // a GPU's queued work belongs to this round
    const double cost =
        virtual_clock && parts_.compute_model
            ? parts_.compute_model->cost(size) + (report.micro_batches == 0 ? warmup_left_ : 0.0)
            : measured;
    const double extra = parts_.slowdown.extra_delay(parts_.rank, cost);
    if (!virtual_clock) sleep_for(extra);
    report.compute_time += cost;
    report.sleep_time += extra;
    report.samples += size;
    report.loss_sum += outcome.loss_sum;
    report.correct += outcome.correct;
    ++report.micro_batches;
  }
  if (report.micro_batches > 0) warmup_left_ = 0;
  last_drawn_ = static_cast<int>(report.samples);
  report.send_time = previous_send_;
  report.wait_time = previous_wait_;
  return report;
}

}  // namespace mbkit::train
