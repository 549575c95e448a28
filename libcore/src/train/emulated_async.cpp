#include "mbkit/train/emulated_async.hpp"

#include <algorithm>

#include "exchange_internal.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

using namespace exchange_detail;

EmulatedAsyncMaster::EmulatedAsyncMaster(Parts parts)
    : parts_(std::move(parts)), in_flight_(static_cast<std::size_t>(parts_.workers.workers())) {}

void EmulatedAsyncMaster::use_virtual_clock(double message, double now) {
  arrivals_.emplace(parts_.workers.workers(), message);
  now_ = now;
}

void EmulatedAsyncMaster::start(std::span<const float> parameters, std::span<const float> state,
                                std::int64_t step) {
  MBKIT_CHECK(arrivals_.has_value(), "emulated asynchronous master without the virtual clock");
  publish(parameters, state, step);
  // Every worker starts once the first parameters reached it.
  for (int w = 0; w < parts_.workers.workers(); ++w) begin_round(w, now_ + arrivals_->message());
}

void EmulatedAsyncMaster::publish(std::span<const float> parameters, std::span<const float> state,
                                  std::int64_t step) {
  std::shared_ptr<Snapshot> snapshot;
  for (auto& spare : spare_) {
    if (spare.use_count() == 1) {
      snapshot = spare;
      break;
    }
  }
  if (!snapshot) {
    snapshot = std::make_shared<Snapshot>();
    spare_.push_back(snapshot);
  }
  snapshot->step = step;
  snapshot->values.assign(parameters.begin(), parameters.end());
  snapshot->values.insert(snapshot->values.end(), state.begin(), state.end());
  latest_ = snapshot;
  arrivals_->publish(now_);
  history_.push_back(snapshot);
}

void EmulatedAsyncMaster::begin_round(int w, double start) {
  InFlight& round = in_flight_[static_cast<std::size_t>(w)];
  arrivals_->start(w, start);
  const std::int64_t held = arrivals_->held_at(start);
  round.held = history_[static_cast<std::size_t>(held - arrivals_->first_kept())];
  const auto ready = parts_.workers.round(w).predict_ready();
  if (!ready) {
    usage_error(cat("--emulate ", parts_.workers.workers(), " --async: worker ", w, " (rank ",
                    parts_.workers.rank_of(w),
                    ") has no --compute-model: the master takes gradients in the order they "
                    "arrive, which must be known before they are computed"));
  }
  round.ready = *ready;
  const TrainOptions& options = parts_.options;
  round.comm_delay =
      options.async_delay_std > 0
          ? emulation::message_delay(options.async_delay_std, options.seed, w, round.rounds)
          : 0.0;
  arrivals_->arrived(w, round.ready, round.comm_delay);
}

WorkerReport EmulatedAsyncMaster::run_round(int w, std::span<float> gradients,
                                            std::span<float> state, std::int64_t step) {
  InFlight& round = in_flight_[static_cast<std::size_t>(w)];
  nn::Network& net = parts_.net;
  const std::size_t parameter_floats = net.parameter_count();
  const std::vector<float>& held = round.held->values;
  std::copy(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            net.parameters().begin());
  std::copy(held.begin() + static_cast<std::ptrdiff_t>(parameter_floats), held.end(),
            net.state().begin());
  WorkerRound& worker = parts_.workers.round(w);
  // As run_async_worker: no send of its own to wait for, the parameters' modelled receive.
  worker.set_previous_exchange(0, 0, parts_.modelled_receive);
  WorkerReport report = worker.run(round.held->step + round.rounds, 1.0);
  MBKIT_CHECK(report.sleep_time + report.compute_time == round.ready, "worker ", w,
              "'s round was ready at ", report.sleep_time + report.compute_time, " s, predicted ",
              round.ready, " s");
  report.stop = parts_.stop_of();
  report.based_on = round.held->step;
  report.comm_delay = round.comm_delay;
  ++round.rounds;
  if (parts_.worker_line) parts_.worker_line(round.rounds, report);
  // The master's sums, in the order it takes the gradients (AsyncMaster's additions).
  const std::span<const float> computed = net.gradients();
  for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] += computed[i];
  const std::span<const float> computed_state = net.state();
  for (std::size_t i = 0; i < state.size(); ++i) state[i] += computed_state[i];
  // What the master reads from a worker's message: the fields it carries, and no others.
  WorkerReport taken;
  taken.rank = parts_.workers.rank_of(w);
  taken.samples = report.samples;
  taken.loss_sum = report.loss_sum;
  taken.correct = report.correct;
  taken.compute_time = report.compute_time;
  taken.sleep_time = report.sleep_time;
  taken.send_time = arrivals_->message();
  taken.wait_time = 0;
  taken.based_on = report.based_on;
  taken.staleness = step - report.based_on;
  taken.stop = report.stop;
  taken.micro_batches = report.micro_batches;
  taken.finished_early = report.finished_early;
  taken.recv_time = report.recv_time;
  taken.exit_time = report.exit_time;
  taken.queued_updates = 0;  // one parameter set a round: none is overtaken
  taken.comm_delay = report.comm_delay;
  return taken;
}

CombinedStep EmulatedAsyncMaster::collect(std::span<float> gradients, std::span<float> state,
                                          int min_gradients, std::int64_t step) {
  CombinedStep result;
  std::fill(gradients.begin(), gradients.end(), 0.0f);
  std::fill(state.begin(), state.end(), 0.0f);
  int count = 0;
  const double virtual_start = now_;
  const bool timed = window_ > 0;
  const double deadline = virtual_start + window_;
  while (takes_another(*arrivals_, count, timed, deadline, min_gradients)) {
    const auto next = arrivals_->next();
    MBKIT_CHECK(next.has_value(), "no emulated worker is computing");
    const int w = *next;
    const double arrival = arrivals_->take(w);
    add_up(result, run_round(w, gradients, state, step));
    ++count;
    now_ = std::max(now_, arrival);
    begin_round(w, arrivals_->round_start(w));
    // Later rounds start no earlier than this one's: older publications can go (rounds in
    // flight keep what they started from).
    const std::int64_t forgotten = arrivals_->forget_before(arrivals_->round_start(w));
    history_.erase(history_.begin(), history_.begin() + forgotten);
  }
  // The network is the master's again: its parameters (the newest published) for the update.
  const std::size_t parameter_floats = parts_.net.parameter_count();
  std::copy(latest_->values.begin(),
            latest_->values.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            parts_.net.parameters().begin());
  std::copy(latest_->values.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            latest_->values.end(), parts_.net.state().begin());
  if (timed) now_ = std::max(now_, deadline);
  result.wait_time = now_ - virtual_start;
  average_async_sums(result, count, gradients, state);
  return result;
}

void EmulatedAsyncMaster::finish(std::int64_t, int) {
  // Every worker has a round in flight whose gradient would arrive after the end.
  discarded_ += parts_.workers.workers();
}

}  // namespace mbkit::train
