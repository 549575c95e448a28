// The asynchronous parameter server (AsyncMaster in mbkit/train/exchange.hpp; its workers are
// exchange_async_worker.cpp), one server or several, each with its shard: the same engine.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <tuple>

#include "exchange_internal.hpp"
#include "mbkit/comm/peer_silence.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

using namespace exchange_detail;
using Clock = SteadyClock;

struct AsyncMaster::Impl {
  const comm::World& world;
  std::size_t parameters, state;
  int servers;
  struct Worker {
    Bytes received;
    comm::Request receive;
    std::shared_ptr<const Bytes> sending;  // the snapshot a pending send reads
    comm::Request send;
    std::int64_t sent_step = -1;
    std::int64_t granted = 0;   // --staleness-bound: rounds the master let it start
    double blocked = 0;         // virtual clock: seconds its round in progress waited to start
    bool done = false;          // its kDone message arrived
    int done_code = kContinue;  // the StopCode its kDone carried
    bool told_to_stop = false;
    // Wall clock, --async-delay-std: when the master first saw the received message it holds.
    std::optional<SteadyClock::time_point> seen;
  };
  std::vector<Worker> workers;
  std::shared_ptr<const Bytes> latest;  // newest parameters message
  std::int64_t latest_step = -1;
  std::vector<std::shared_ptr<Bytes>> spare;  // snapshots no send reads any more
  bool stopping = false;
  ParametersHeader stop_header;
  double window = 0;   // --async-master-time-limit (0: the count rule)
  bool ended = false;  // the last collect() ended because every worker was done
  // Virtual clock: the event order, the master's time and the parameter sets a worker may
  // still be given (history[i] is publication arrivals->first_kept() + i).
  std::optional<VirtualArrivals> arrivals;
  double now = 0;
  std::deque<std::shared_ptr<const Bytes>> history;
  // A gradient is due from each worker whose receive is posted: one silent past --comm-timeout
  // ends the run naming it, though the others' gradients keep the master's waits short.
  std::optional<comm::PeerSilence> silence;
  // Which arrivals an update takes and when a worker may start (async_rule.hpp); the gradients
  // it holds for a later update, in order of arrival.
  AsyncRule rule;
  struct Held {
    std::size_t worker;
    Bytes message;
  };
  std::deque<Held> held_gradients;

  Impl(const comm::World& w, std::size_t p, std::size_t s, int n)
      : world(w), parameters(p), state(s), servers(n), rule(0, {}) {}

  std::size_t gradient_bytes() const {
    return sizeof(GradientHeader) + (parameters + state) * sizeof(float);
  }
  int rank_of(std::size_t w) const { return worker_rank(static_cast<int>(w), servers); }

  void post_receive(std::size_t w) {
    Worker& worker = workers[w];
    worker.received.resize(gradient_bytes());
    // A worker held back by a staleness bound owes nothing until its go.
    if (rule.may_start(static_cast<int>(w))) {
      silence->expect(w);
    } else {
      silence->heard(w);
    }
    worker.receive =
        world.irecv(worker.received.data(), worker.received.size(), rank_of(w), kGradientTag);
  }

  // Completes sends and gives every worker whose last send finished the newest parameters.
  void pump() {
    for (std::size_t w = 0; w < workers.size(); ++w) {
      Worker& worker = workers[w];
      if (!world.test(worker.send)) continue;
      worker.sending.reset();
      if (worker.told_to_stop) continue;
      if (stopping) {
        worker.send = world.isend(&stop_header, sizeof stop_header, rank_of(w), kParametersTag);
        worker.told_to_stop = true;
      } else if (!arrivals && latest &&
                 (rule.bounded() ? worker.granted <= rule.clock(static_cast<int>(w)) &&
                                       rule.may_start(static_cast<int>(w))
                                 : worker.sent_step < latest_step)) {
        ++worker.granted;
        if (!worker.done) silence->expect(w);
        worker.sending = latest;
        worker.send = world.isend(latest->data(), latest->size(), rank_of(w), kParametersTag);
        worker.sent_step = latest_step;
      }
    }
  }

  // Virtual clock: sends worker w the parameter set it holds when its round starts at `start`.
  void send_held(std::size_t w, double start) {
    Worker& worker = workers[w];
    world.wait(worker.send, cat("sending parameters to rank ", rank_of(w)));
    const std::int64_t held = arrivals->held_at(start);
    worker.sending = history[static_cast<std::size_t>(held - arrivals->first_kept())];
    worker.send =
        world.isend(worker.sending->data(), worker.sending->size(), rank_of(w), kParametersTag);
  }

  static GradientHeader header_of(const Worker& worker) {
    GradientHeader header;
    std::memcpy(&header, worker.received.data(), sizeof header);
    return header;
  }

  void mark_done(Worker& worker, const GradientHeader& header) {
    rule.retire(static_cast<int>(&worker - workers.data()));
    worker.done = true;
    worker.done_code = static_cast<int>(header.stop);
  }

  bool all_done() const {
    return std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.done; });
  }

  std::vector<int> silent_workers() const {
    std::vector<int> ranks;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (!workers[w].done) ranks.push_back(rank_of(w));
    }
    return ranks;
  }
};

AsyncMaster::AsyncMaster(const comm::World& world, std::size_t parameters, std::size_t state,
                         int servers)
    : impl_(new Impl(world, parameters, state, servers)) {
  if (world.size() < 2) usage_error("--comm ps --async needs at least 2 ranks");
  MBKIT_CHECK(servers >= 1 && servers < world.size(), "servers ", servers, " of ", world.size());
  impl_->workers.resize(static_cast<std::size_t>(worker_count(world.size(), servers)));
  impl_->rule = AsyncRule(static_cast<int>(impl_->workers.size()), {});
  impl_->silence.emplace(impl_->workers.size(),
                         [impl = impl_](std::size_t w) { return impl->rank_of(w); });
  for (std::size_t w = 0; w < impl_->workers.size(); ++w) impl_->post_receive(w);
}

AsyncMaster::~AsyncMaster() {
  delete impl_;
}

void AsyncMaster::start(std::span<const float> parameters, std::span<const float> state,
                        std::int64_t step) {
  publish(parameters, state, step);
  Impl& m = *impl_;
  if (!m.arrivals) return;
  // Every worker starts once the first parameters reached it.
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    const double start = m.now + m.arrivals->message();
    m.arrivals->start(static_cast<int>(w), start);
    m.send_held(w, start);
  }
}

bool AsyncMaster::workers_done() const {
  return impl_->ended;
}

int AsyncMaster::workers_stop() const {
  int code = kContinue;
  for (const auto& worker : impl_->workers) {
    if (worker.done) code = std::max(code, worker.done_code);
  }
  return code;
}

void AsyncMaster::use_time_window(double seconds) {
  impl_->window = seconds;
}

void AsyncMaster::use_rule(const AsyncRuleSettings& settings) {
  impl_->rule = AsyncRule(static_cast<int>(impl_->workers.size()), settings);
}

void AsyncMaster::use_virtual_clock(double message, double sender, double now) {
  impl_->arrivals.emplace(static_cast<int>(impl_->workers.size()), message, sender);
  impl_->now = now;
}

double AsyncMaster::virtual_now() const {
  return impl_->now;
}

void AsyncMaster::advance(double seconds) {
  impl_->now += seconds;
}

void AsyncMaster::publish(std::span<const float> parameters, std::span<const float> state,
                          std::int64_t step) {
  Impl& m = *impl_;
  std::shared_ptr<Bytes> snapshot;
  for (auto& spare : m.spare) {
    if (spare.use_count() == 1) {
      snapshot = spare;
      break;
    }
  }
  if (!snapshot) {
    snapshot = std::make_shared<Bytes>();
    m.spare.push_back(snapshot);
  }
  snapshot->resize(sizeof(ParametersHeader) + (parameters.size() + state.size()) * sizeof(float));
  const ParametersHeader header{static_cast<double>(step), 0};
  unsigned char* out = snapshot->data();
  std::memcpy(out, &header, sizeof header);
  out += sizeof header;
  std::memcpy(out, parameters.data(), parameters.size_bytes());
  out += parameters.size_bytes();
  std::memcpy(out, state.data(), state.size_bytes());
  m.latest = snapshot;
  m.latest_step = step;
  if (m.arrivals) {
    m.arrivals->publish(m.now);
    m.history.push_back(snapshot);
    // Workers past the staleness bound start now, from these parameters, once allowed.
    for (const ReleasedWorker& released : release_blocked(*m.arrivals, m.rule, m.now)) {
      const auto w = static_cast<std::size_t>(released.worker);
      m.workers[w].blocked = released.waited;
      m.silence->expect(w);
      m.send_held(w, released.start);
    }
  }
  m.pump();
}

CombinedStep AsyncMaster::collect(std::span<float> gradients, std::span<float> state,
                                  int min_gradients, std::int64_t step) {
  Impl& m = *impl_;
  CombinedStep result;
  std::fill(gradients.begin(), gradients.end(), 0.0f);
  std::fill(state.begin(), state.end(), 0.0f);
  int count = 0;
  const auto start = Clock::now();
  const double virtual_start = m.now;
  std::vector<bool> heard(m.workers.size(), false);
  m.rule.begin_update(min_gradients);
  // Adds worker w's gradient (its message) to the step.
  auto take = [&](std::size_t w, const Bytes& message) {
    GradientHeader header;
    std::memcpy(&header, message.data(), sizeof header);
    const float* values = reinterpret_cast<const float*>(message.data() + sizeof header);
    for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] += values[i];
    for (std::size_t i = 0; i < state.size(); ++i) state[i] += values[gradients.size() + i];
    WorkerReport report;
    report.rank = m.rank_of(w);
    report.samples = static_cast<std::int64_t>(header.samples);
    report.loss_sum = header.loss_sum;
    report.correct = static_cast<std::int64_t>(header.correct);
    report.compute_time = header.compute_time;
    report.sleep_time = header.sleep_time;
    report.send_time = header.send_time;
    report.wait_time = header.wait_time;
    report.based_on = static_cast<std::int64_t>(header.based_on);
    report.staleness = step - report.based_on;
    report.stop = static_cast<int>(header.stop);
    report.micro_batches = static_cast<std::int64_t>(header.micro_batches);
    report.finished_early = header.finished_early != 0;
    report.recv_time = header.recv_time;
    report.exit_time = header.exit_time;
    report.queued_updates = static_cast<std::int64_t>(header.queued_updates);
    report.comm_delay = header.comm_delay;
    if (m.arrivals) {  // the message's modelled cost; the wait before its round started
      report.send_time = m.arrivals->message();
      report.wait_time = m.workers[w].blocked;
    }
    add_up(result, report);
    m.rule.took(static_cast<int>(w));
    heard[w] = true;
    ++count;
  };
  // A gradient that came in: the update takes it, or holds it for a later one.
  auto take_or_hold = [&](std::size_t w) {
    m.rule.completed_round(static_cast<int>(w));
    if (m.rule.takes(static_cast<int>(w))) {
      take(w, m.workers[w].received);
    } else {
      m.held_gradients.push_back({w, m.workers[w].received});
    }
  };
  // Held gradients first, oldest first, as the rule takes them.
  take_held(m.rule, m.held_gradients,
            [&](const Impl::Held& held) { take(held.worker, held.message); });
  // The time rule's window ends at `deadline` (master time); the count rule's never does.
  const bool timed = m.window > 0;
  const double deadline = virtual_start + m.window;
  // Virtual clock: gradients wait until they are next in virtual time. The time rule takes
  // those that arrive by the deadline, or the first after it when none did.
  auto take_in_virtual_order = [&] {
    VirtualArrivals& arrivals = *m.arrivals;
    while (update_takes_another(m.rule, arrivals, count, timed, deadline, min_gradients)) {
      const auto next = arrivals.next();
      if (!next) return;
      const auto w = static_cast<std::size_t>(*next);
      const double arrival = arrivals.take(*next);
      take_or_hold(w);
      m.workers[w].blocked = 0;
      m.now = std::max(m.now, arrival);
      // A worker past the staleness bound is blocked: publish() starts it.
      if (starts_next_round(arrivals, m.rule, *next)) m.send_held(w, arrivals.round_start(*next));
      m.post_receive(w);
      // Later rounds start no earlier than this one's: older parameter sets can go.
      const std::int64_t forgotten = arrivals.forget_before(arrivals.round_start(*next));
      m.history.erase(m.history.begin(), m.history.begin() + forgotten);
    }
  };
  const std::string what = timed ? cat("master waiting for a gradient for step ", step + 1)
                                 : cat("master waiting for ", min_gradients, " gradient",
                                       min_gradients > 1 ? "s" : "", " for step ", step + 1);
  m.world.wait_until(
      [&] {
        m.pump();
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          Impl::Worker& worker = m.workers[w];
          if (worker.done) continue;
          if (m.arrivals && m.arrivals->waiting(static_cast<int>(w))) continue;
          if (!m.world.test(worker.receive)) continue;
          m.silence->heard(w);
          const GradientHeader header = Impl::header_of(worker);
          if (header.kind == kDone) {
            m.mark_done(worker, header);
            if (m.arrivals) m.arrivals->retire(static_cast<int>(w));
            continue;
          }
          if (m.arrivals) {
            m.arrivals->arrived(static_cast<int>(w), header.sleep_time + header.compute_time,
                                header.comm_delay);
            continue;
          }
          if (header.comm_delay > 0) {
            // Held until its delay has passed since the master first saw it.
            if (!worker.seen) worker.seen = Clock::now();
            if (seconds_since(*worker.seen) < header.comm_delay) continue;
            worker.seen.reset();
          }
          take_or_hold(w);
          m.post_receive(w);
        }
        m.silence->check(m.world, what);
        if (m.arrivals) {
          take_in_virtual_order();
          if (timed) return (count >= 1 && m.arrivals->none_until(deadline)) || m.all_done();
        } else if (timed) {
          return (count >= 1 && seconds_since(start) >= m.window) || m.all_done();
        }
        // Only another server's stop ends the workers while a master collects.
        return m.rule.complete() || m.all_done();
      },
      what,
      [&] {
        std::vector<int> silent;
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          const bool waiting = m.arrivals && m.arrivals->waiting(static_cast<int>(w));
          if (!heard[w] && !waiting) silent.push_back(m.rank_of(w));
        }
        return silent;
      });
  // Every worker done with too few gradients for a step (enough: a step, though all are done).
  m.ended = m.all_done() && (timed ? count == 0 : !m.rule.complete());
  if (m.ended) {
    discarded_ += count;
    return result;
  }
  // The time rule's master waits out its window.
  if (m.arrivals && timed) m.now = std::max(m.now, deadline);
  result.wait_time = m.arrivals ? m.now - virtual_start : seconds_since(start);
  average_async_sums(result, count, gradients, state);
  return result;
}

void AsyncMaster::finish(std::int64_t step, int code) {
  Impl& m = *impl_;
  discarded_ += static_cast<std::int64_t>(m.held_gradients.size());
  m.held_gradients.clear();
  m.stopping = true;
  m.stop_header = ParametersHeader{static_cast<double>(step), static_cast<double>(code)};
  m.world.wait_until(
      [&] {
        m.pump();
        bool all = true;
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          Impl::Worker& worker = m.workers[w];
          if (!worker.done && m.world.test(worker.receive)) {
            const GradientHeader header = Impl::header_of(worker);
            if (header.kind == kDone) {
              m.mark_done(worker, header);
            } else {
              ++discarded_;
              m.post_receive(w);
            }
          }
          all = all && worker.done && worker.told_to_stop && !worker.send.pending();
        }
        return all;
      },
      cat("master ending the run after step ", step), [&] { return m.silent_workers(); });
}

}  // namespace mbkit::train
