// The asynchronous parameter server (AsyncMaster, AsyncWorker in mbkit/train/exchange.hpp), one
// server or several, each with its shard: the same engine, one shard being the whole buffer.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <tuple>

#include "exchange_internal.hpp"
#include "mbkit/comm/peer_silence.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

using namespace exchange_detail;
using Clock = SteadyClock;

namespace {

// Header of a worker's message: what it did, then its gradient (sum over its samples) and
// state. A message of kind kDone carries the header only, with the StopCode it was stopped with
// (a server that did not stop the run itself learns from it why the run ended).
struct GradientHeader {
  double kind = 0;  // kGradient or kDone
  double samples = 0, loss_sum = 0, correct = 0;
  double compute_time = 0, sleep_time = 0, send_time = 0, wait_time = 0;
  double based_on = 0;
  double stop = 0;
  double micro_batches = 1, finished_early = 0;
  double recv_time = 0, exit_time = 0, queued_updates = 0;
  double comm_delay = 0;  // --async-delay-std: the master holds the message this long
};
constexpr double kGradient = 1, kDone = 2;

// Header of the master's message: the step of the parameters that follow, or stop.
struct ParametersHeader {
  double step = 0;
  double stop = 0;
};

using Bytes = std::vector<unsigned char>;

}  // namespace

bool takes_another(const VirtualArrivals& arrivals, int count, bool timed, double deadline,
                   int min_gradients) {
  return timed ? !(count >= 1 && arrivals.none_until(deadline)) : count < min_gradients;
}

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

  Impl(const comm::World& w, std::size_t p, std::size_t s, int n)
      : world(w), parameters(p), state(s), servers(n) {}

  std::size_t gradient_bytes() const {
    return sizeof(GradientHeader) + (parameters + state) * sizeof(float);
  }
  int rank_of(std::size_t w) const { return worker_rank(static_cast<int>(w), servers); }

  void post_receive(std::size_t w) {
    Worker& worker = workers[w];
    worker.received.resize(gradient_bytes());
    silence->expect(w);
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
      } else if (!arrivals && latest && worker.sent_step < latest_step) {
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

void AsyncMaster::use_virtual_clock(double message, double now) {
  impl_->arrivals.emplace(static_cast<int>(impl_->workers.size()), message);
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
  // Adds worker w's received gradient to the step.
  auto take = [&](std::size_t w) {
    Impl::Worker& worker = m.workers[w];
    const GradientHeader header = Impl::header_of(worker);
    const float* values = reinterpret_cast<const float*>(worker.received.data() + sizeof header);
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
    add_up(result, report);
    heard[w] = true;
    ++count;
  };
  // The time rule's window ends at `deadline` (master time); the count rule's never does.
  const bool timed = m.window > 0;
  const double deadline = virtual_start + m.window;
  // Virtual clock: gradients wait until they are next in virtual time. The time rule takes
  // those that arrive by the deadline, or the first after it when none did.
  auto take_in_virtual_order = [&] {
    VirtualArrivals& arrivals = *m.arrivals;
    while (takes_another(arrivals, count, timed, deadline, min_gradients)) {
      const auto next = arrivals.next();
      if (!next) return;
      const auto w = static_cast<std::size_t>(*next);
      const double arrival = arrivals.take(*next);
      take(w);
      result.workers.back().send_time = arrivals.message();
      result.workers.back().wait_time = 0;
      m.now = std::max(m.now, arrival);
      m.send_held(w, arrivals.round_start(*next));
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
          take(w);
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
        return count >= min_gradients || m.all_done();
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
  m.ended = m.all_done() && (timed ? count == 0 : count < min_gradients);
  if (m.ended) {
    discarded_ += count;
    return result;
  }
  // The time rule's master waits out its window.
  if (m.arrivals && timed) m.now = std::max(m.now, deadline);
  result.wait_time = m.arrivals ? m.now - virtual_start : seconds_since(start);
  if (result.samples > 0) {
    const float inverse = 1.0f / static_cast<float>(result.samples);
    for (float& g : gradients) g *= inverse;
  }
  const float state_inverse = 1.0f / static_cast<float>(count);
  for (float& s : state) s *= state_inverse;
  return result;
}

void AsyncMaster::finish(std::int64_t step, int code) {
  Impl& m = *impl_;
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

struct AsyncWorker::Impl {
  const comm::World& world;
  std::size_t parameters, state;
  // One stream of parameters from each server, and one of gradients to it.
  struct Server {
    std::size_t first = 0, last = 0;  // its shard
    std::size_t state = 0;            // state floats it carries (server 0's)
    Bytes incoming[2];
    int current = 0;  // the buffer with the posted receive
    comm::Request receive;
    Bytes outgoing;
    comm::Request send;
    bool received_any = false;
    bool stopped = false;  // its stop arrived
  };
  std::vector<Server> servers;
  bool stopped = false;

  Impl(const comm::World& w, std::size_t p, std::size_t s, int n)
      : world(w), parameters(p), state(s), servers(static_cast<std::size_t>(n)) {
    for (int server = 0; server < n; ++server) {
      Server& from = servers[static_cast<std::size_t>(server)];
      std::tie(from.first, from.last) = server_shard(p, server, n);
      from.state = server == 0 ? s : 0;
      for (auto& buffer : from.incoming) {
        buffer.resize(sizeof(ParametersHeader) +
                      (from.last - from.first + from.state) * sizeof(float));
      }
      post(server);
    }
  }
  void post(int server) {
    Server& from = servers[static_cast<std::size_t>(server)];
    from.receive = world.irecv(from.incoming[from.current].data(),
                               from.incoming[from.current].size(), server, kParametersTag);
  }
  // The watchdog's words for server s: "the master" when it is the only one.
  std::string name(int server) const {
    return servers.size() == 1 ? std::string("the master") : cat("server ", server);
  }
};

AsyncWorker::AsyncWorker(const comm::World& world, std::size_t parameters, std::size_t state,
                         int servers)
    : impl_(new Impl(world, parameters, state, servers)) {}

AsyncWorker::~AsyncWorker() {
  delete impl_;
}

bool AsyncWorker::refresh(std::span<float> parameters, std::span<float> state, bool wait,
                          std::int64_t& based_on) {
  Impl& k = *impl_;
  if (k.stopped) return false;
  for (int s = 0; s < static_cast<int>(k.servers.size()); ++s) {
    Impl::Server& from = k.servers[static_cast<std::size_t>(s)];
    if (wait || !from.received_any) {
      k.world.wait_until([&] { return !from.receive.pending() || k.world.test(from.receive); },
                         cat("waiting for parameters from ", k.name(s)),
                         [s] { return std::vector<int>{s}; });
    }
    // Take the newest that arrived: drain the stream, alternating between two buffers.
    const Bytes* newest = nullptr;
    while (k.world.test(from.receive)) {
      if (newest != nullptr) ++skipped_;
      newest = &from.incoming[from.current];
      ParametersHeader header;
      std::memcpy(&header, newest->data(), sizeof header);
      if (header.stop != 0) {
        k.stopped = from.stopped = true;
        stop_code_ = static_cast<int>(header.stop);
        return false;
      }
      from.current = 1 - from.current;
      k.post(s);
    }
    if (newest == nullptr) continue;
    ParametersHeader header;
    std::memcpy(&header, newest->data(), sizeof header);
    const float* values = reinterpret_cast<const float*>(newest->data() + sizeof header);
    const std::size_t shard = from.last - from.first;
    std::copy(values, values + shard, parameters.begin() + static_cast<std::ptrdiff_t>(from.first));
    std::copy(values + shard, values + shard + from.state, state.begin());
    if (s == 0) based_on = static_cast<std::int64_t>(header.step);
    from.received_any = true;
  }
  return true;
}

void AsyncWorker::send(std::span<const float> gradients, std::span<const float> state,
                       const WorkerReport& report) {
  Impl& k = *impl_;
  for (int s = 0; s < static_cast<int>(k.servers.size()); ++s) {
    k.world.wait(k.servers[static_cast<std::size_t>(s)].send,
                 cat("sending a gradient to ", k.name(s)));
  }
  GradientHeader header;
  header.kind = kGradient;
  header.samples = static_cast<double>(report.samples);
  header.loss_sum = report.loss_sum;
  header.correct = static_cast<double>(report.correct);
  header.compute_time = report.compute_time;
  header.sleep_time = report.sleep_time;
  header.send_time = report.send_time;
  header.wait_time = report.wait_time;
  header.based_on = static_cast<double>(report.based_on);
  header.stop = report.stop;
  header.micro_batches = static_cast<double>(report.micro_batches);
  header.finished_early = report.finished_early ? 1 : 0;
  header.recv_time = report.recv_time;
  header.exit_time = report.exit_time;
  header.queued_updates = static_cast<double>(report.queued_updates);
  header.comm_delay = report.comm_delay;
  for (int s = 0; s < static_cast<int>(k.servers.size()); ++s) {
    Impl::Server& to = k.servers[static_cast<std::size_t>(s)];
    const auto shard = gradients.subspan(to.first, to.last - to.first);
    const auto tail = state.first(to.state);
    to.outgoing.resize(sizeof header + shard.size_bytes() + tail.size_bytes());
    std::memcpy(to.outgoing.data(), &header, sizeof header);
    std::memcpy(to.outgoing.data() + sizeof header, shard.data(), shard.size_bytes());
    std::memcpy(to.outgoing.data() + sizeof header + shard.size_bytes(), tail.data(),
                tail.size_bytes());
    to.send = k.world.isend(to.outgoing.data(), to.outgoing.size(), s, kGradientTag);
  }
}

void AsyncWorker::finish() {
  Impl& k = *impl_;
  const int servers = static_cast<int>(k.servers.size());
  for (int s = 0; s < servers; ++s) {
    k.world.wait(k.servers[static_cast<std::size_t>(s)].send,
                 servers == 1 ? std::string("sending the last gradient")
                              : cat("sending the last gradient to server ", s));
  }
  GradientHeader header;
  header.kind = kDone;
  header.stop = stop_code_;
  for (int s = 0; s < servers; ++s) {
    Impl::Server& to = k.servers[static_cast<std::size_t>(s)];
    to.outgoing.assign(reinterpret_cast<const unsigned char*>(&header),
                       reinterpret_cast<const unsigned char*>(&header) + sizeof header);
    to.send = k.world.isend(to.outgoing.data(), to.outgoing.size(), s, kGradientTag);
  }
  if (servers == 1) {
    k.world.wait(k.servers[0].send, "telling the master it is done");
    return;
  }
  // The other servers go on until every worker is done: their parameters are drained (unused)
  // until each one's stop comes, so that none waits on a send this worker never takes.
  const auto settled = [&](Impl::Server& from) {
    while (!from.stopped && k.world.test(from.receive)) {
      ParametersHeader last;
      std::memcpy(&last, from.incoming[from.current].data(), sizeof last);
      if (last.stop != 0) {
        from.stopped = true;
      } else {
        from.current = 1 - from.current;
        k.post(static_cast<int>(&from - k.servers.data()));
      }
    }
    return k.world.test(from.send) && from.stopped;
  };
  k.world.wait_until(
      [&] {
        bool all = true;
        for (auto& server : k.servers) all = settled(server) && all;
        return all;
      },
      "telling the servers this worker is done and taking their stop",
      [&] {
        std::vector<int> waiting;
        for (int s = 0; s < servers; ++s) {
          if (!k.servers[static_cast<std::size_t>(s)].stopped) waiting.push_back(s);
        }
        return waiting;
      });
}

}  // namespace mbkit::train
