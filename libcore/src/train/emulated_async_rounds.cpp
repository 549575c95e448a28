#include "mbkit/train/emulated_async_rounds.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

EmulatedAsyncRounds::EmulatedAsyncRounds(Parts parts)
    : parts_(std::move(parts)),
      workers_(static_cast<std::size_t>(parts_.workers.workers())),
      stopped_(static_cast<std::size_t>(parts_.servers), kContinue),
      phase_(stopped_.size(), Phase::kNotEntered),
      awaited_(stopped_.size(), 0),
      ahead_(parts_.ahead_bytes),
      spare_results_(kSpareResults) {
  for (Worker& worker : workers_) {
    worker.started.assign(stopped_.size(), 0);
    worker.taken.assign(stopped_.size(), 0);
  }
}

std::pair<std::size_t, std::size_t> EmulatedAsyncRounds::shard(int server) const {
  return server_shard(parts_.net.parameter_count(), server, parts_.servers);
}

bool EmulatedAsyncRounds::gone(const Worker& worker, std::int64_t r) const {
  for (std::size_t s = 0; s < stopped_.size(); ++s) {
    if (stopped_[s] != kContinue && worker.started[s] <= r) return true;
  }
  return false;
}

std::optional<EmulatedAsyncRounds::Started> EmulatedAsyncRounds::start(
    int server, int w, std::shared_ptr<const Snapshot> held, double start) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  const auto s = static_cast<std::size_t>(server);
  const std::int64_t r = worker.started[s]++;
  if (gone(worker, r)) return std::nullopt;
  while (worker.first + static_cast<std::int64_t>(worker.rounds.size()) <= r) {
    worker.rounds.emplace_back();
    worker.rounds.back().held.resize(stopped_.size());
  }
  Round& round = worker.rounds[static_cast<std::size_t>(r - worker.first)];
  if (round.given == 0) {
    // Predicted where the worker is hosted (its round's draws are there), then known to all.
    double ready = std::numeric_limits<double>::quiet_NaN();
    if (parts_.workers.hosts(w)) {
      WorkerRound& computing = parts_.workers.round(w);
      computing.set_round_start(start);  // --cpu-quota: its periods' phase
      if (const auto predicted = computing.predict_ready()) ready = *predicted;
    }
    ready_from_host(w, ready);
    if (std::isnan(ready)) {
      usage_error(cat("--emulate ", workers(), " --async: worker ", w, " (rank ",
                      parts_.workers.rank_of(w),
                      ") has no --compute-model: the master takes gradients in the order they "
                      "arrive, which must be known before they are computed"));
    }
    round.ready = ready;
    const TrainOptions& options = parts_.options;
    round.comm_delay = options.async_delay_std > 0
                           ? emulation::message_delay(options.async_delay_std, options.seed, w, r)
                           : 0.0;
  }
  round.held[s] = std::move(held);
  ++round.given;
  // Under shares its host may compute it from now on: every server gave it its parameters.
  if (round.given == parts_.servers && parts_.shares != nullptr && parts_.workers.hosts(w)) {
    ahead_.started(w, start + round.ready + round.comm_delay);
  }
  changed_.notify_all();
  return Started{round.ready, round.comm_delay};
}

std::shared_ptr<const EmulatedAsyncRounds::Computed> EmulatedAsyncRounds::take(
    int server, int w, std::unique_lock<std::mutex>& lock) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  const auto s = static_cast<std::size_t>(server);
  const std::int64_t r = worker.taken[s];
  MBKIT_CHECK(r < worker.started[s], "server ", server, " takes worker ", w,
              "'s round it did not start");
  std::shared_ptr<const Computed> computed;
  for (;;) {
    if (abandoned_) throw Error("another emulated server failed", ExitCode::kFailure);
    if (turn_ == server) {
      // A round this server started is kept until it took it.
      Round& round = worker.rounds[static_cast<std::size_t>(r - worker.first)];
      if (round.computed) {
        computed = round.computed;
        break;
      }
      if (round.given == parts_.servers) {
        computed = run_round(w, round, r);
        break;
      }
      if (gone(worker, r)) break;
      phase_[s] = Phase::kWaiting;
      awaited_[s] = w;
      pass_turn(server);
    }
    changed_.wait(lock);
  }
  phase_[s] = Phase::kRunning;
  ++worker.taken[s];
  forget_taken(worker);
  return computed;
}

void EmulatedAsyncRounds::forget_taken(Worker& worker) {
  while (!worker.rounds.empty()) {
    bool needed = false;
    for (std::size_t s = 0; s < stopped_.size(); ++s) {
      // Server s may still take it: it runs and has not taken it (it started it, or may yet).
      needed = needed || (stopped_[s] == kContinue && worker.taken[s] <= worker.first);
    }
    if (needed) return;
    worker.rounds.pop_front();
    ++worker.first;
  }
}

void EmulatedAsyncRounds::enter(int server, std::unique_lock<std::mutex>& lock) {
  changed_.wait(lock, [&] { return turn_ == server || abandoned_; });
  if (abandoned_) throw Error("another emulated server failed", ExitCode::kFailure);
  phase_[static_cast<std::size_t>(server)] = Phase::kRunning;
}

void EmulatedAsyncRounds::stopped(int server, int code) {
  stopped_[static_cast<std::size_t>(server)] = std::max(code, static_cast<int>(kFinished));
  for (Worker& worker : workers_) {
    // Its rounds end at the first one this server did not start: this server's code ends it.
    if (worker.stop == kContinue) worker.stop = stopped_[static_cast<std::size_t>(server)];
    forget_taken(worker);
  }
  phase_[static_cast<std::size_t>(server)] = Phase::kStopped;
  pass_turn(server);
  changed_.notify_all();
}

bool EmulatedAsyncRounds::can_go_on(int server) const {
  const auto s = static_cast<std::size_t>(server);
  if (phase_[s] == Phase::kNotEntered) return true;
  if (phase_[s] != Phase::kWaiting) return false;
  const Worker& worker = workers_[static_cast<std::size_t>(awaited_[s])];
  const std::int64_t r = worker.taken[s];
  const Round& round = worker.rounds[static_cast<std::size_t>(r - worker.first)];
  return round.computed || round.given == parts_.servers || gone(worker, r);
}

void EmulatedAsyncRounds::pass_turn(int server) {
  for (int k = 1; k <= parts_.servers; ++k) {
    const int next = (server + k) % parts_.servers;
    if (can_go_on(next)) {
      turn_ = next;
      changed_.notify_all();
      return;
    }
  }
}

int EmulatedAsyncRounds::stop_of_worker(int w) const {
  return workers_[static_cast<std::size_t>(w)].stop;
}

void EmulatedAsyncRounds::abandon() {
  abandoned_ = true;
  changed_.notify_all();
}

void EmulatedAsyncRounds::ready_from_host(int w, double& ready) {
  if (parts_.shares == nullptr) return;
  broadcast_ready_time_computing_ahead(
      *parts_.shares, emulated_host(parts_.workers.workers(), parts_.shares->size(), w), ready,
      [&] { return compute_ahead(); });
}

std::shared_ptr<EmulatedAsyncRounds::Computed> EmulatedAsyncRounds::new_result() {
  // Once nothing holds it (the servers took it, a held K-async gradient was added), kept.
  return spare_results_.take();
}

std::shared_ptr<const EmulatedAsyncRounds::Computed> EmulatedAsyncRounds::run_round(
    int w, Round& round, std::int64_t r) {
  std::shared_ptr<Computed> computed;
  const bool hosted = parts_.workers.hosts(w);
  const bool was_ahead = round.ahead != nullptr;
  if (hosted) {
    if (was_ahead) {
      computed = std::move(round.ahead);
    } else {
      ahead_.drop(w);
      computed = compute(w, round, r);
    }
    computed->report.stop = parts_.stop_of();  // at its take, as when computed then
  } else {
    computed = new_result();  // every byte is the host's once broadcast
    computed->gradients.resize(parts_.net.gradients().size());
    computed->state.resize(parts_.net.state().size());
  }
  // Every rank takes the gradient, state and report the host computed.
  if (parts_.shares != nullptr) from_host(w, *computed);
  if (was_ahead) ahead_.released(result_bytes());
  // The host's log has its hosted workers' lines.
  if (parts_.worker_line && hosted) parts_.worker_line(r + 1, computed->report);
  round.computed = computed;
  return computed;
}

std::size_t EmulatedAsyncRounds::result_bytes() const {
  return (parts_.net.gradients().size() + parts_.net.state().size()) * sizeof(float) +
         sizeof(Computed);
}

std::shared_ptr<EmulatedAsyncRounds::Computed> EmulatedAsyncRounds::compute(int w,
                                                                            const Round& round,
                                                                            std::int64_t r) {
  nn::Network& net = parts_.net;
  // The servers' values stay theirs: aside while the round runs on their parameter sets.
  const std::span<float> parameters = net.parameters();
  const std::span<float> state = net.state();
  saved_parameters_.assign(parameters.begin(), parameters.end());
  saved_state_.assign(state.begin(), state.end());
  std::shared_ptr<Computed> computed = new_result();
  WorkerReport& report = computed->report;
  for (int s = 0; s < parts_.servers; ++s) {
    const auto [first, last] = shard(s);
    const std::vector<float>& held = round.held[static_cast<std::size_t>(s)]->values;
    std::copy(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(last - first),
              parameters.begin() + static_cast<std::ptrdiff_t>(first));
    if (s == 0) {
      std::copy(held.begin() + static_cast<std::ptrdiff_t>(last - first), held.end(),
                state.begin());
    }
  }
  WorkerRound& computing = parts_.workers.round(w);
  // As the asynchronous worker policy: no send of its own to wait for, the parameters'
  // modelled receive; its step is server 0's (the parameters it reports being based on).
  computing.set_previous_exchange(0, 0, parts_.modelled_receive);
  const std::int64_t based_on = round.held[0]->step;
  report = computing.run(based_on + r, 1.0);
  MBKIT_CHECK(report.sleep_time + report.compute_time == round.ready, "worker ", w,
              "'s round was ready at ", report.sleep_time + report.compute_time, " s, predicted ",
              round.ready, " s");
  report.based_on = based_on;
  report.comm_delay = round.comm_delay;
  computed->gradients.assign(net.gradients().begin(), net.gradients().end());
  computed->state.assign(state.begin(), state.end());
  std::copy(saved_parameters_.begin(), saved_parameters_.end(), parameters.begin());
  std::copy(saved_state_.begin(), saved_state_.end(), state.begin());
  return computed;
}

bool EmulatedAsyncRounds::compute_ahead() {
  const auto w = ahead_.next(result_bytes());
  if (!w) return false;
  Worker& worker = workers_[static_cast<std::size_t>(*w)];
  // Its round every server started, not yet computed: one at most (a server starts a worker's
  // next round once it took this one, computed by then).
  for (std::size_t i = 0; i < worker.rounds.size(); ++i) {
    Round& round = worker.rounds[i];
    if (round.given == parts_.servers && !round.computed && !round.ahead) {
      round.ahead = compute(*w, round, worker.first + static_cast<std::int64_t>(i));
      return true;
    }
  }
  MBKIT_CHECK(false, "worker ", *w, " has no round to compute ahead");
  return false;
}

void EmulatedAsyncRounds::from_host(int w, Computed& computed) {
  const comm::World& world = *parts_.shares;
  const int host = emulated_host(parts_.workers.workers(), world.size(), w);
  const auto bytes_of = [](auto& values) {
    return std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(values.data()),
                                   values.size() * sizeof(values[0]));
  };
  std::array<comm::Request, 3> pending{
      world.ibroadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&computed.report),
                                               sizeof computed.report),
                       host),
      world.ibroadcast(bytes_of(computed.gradients), host),
      world.ibroadcast(bytes_of(computed.state), host)};
  // While the others compute (the host this round, or a rank the broadcast waits for), this
  // rank computes its own started rounds.
  wait_computing_ahead(
      world, pending, [&] { return compute_ahead(); }, "an emulated worker's round");
}

}  // namespace mbkit::train
