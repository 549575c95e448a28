// DBSL's parameter-server messages (mbkit/train/dbsl_exchange.hpp).
#include "mbkit/train/dbsl_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>

#include "exchange_internal.hpp"
#include "mbkit/comm/peer_silence.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {

using namespace exchange_detail;

namespace {

// A push: the worker's round, then its parameters and state.
struct PushHeader {
  double samples = 0, loss_sum = 0, correct = 0;
  double compute_time = 0, sleep_time = 0, send_time = 0, wait_time = 0;
  double based_on = 0, stop = 0, batches = 0;
};

// A reply: the next round, then the server's parameters and state (none with a stop).
struct ReplyHeader {
  double step = 0, lr = 0, stop = 0;
};

using Bytes = comm::MessageBuffer<unsigned char>;

}  // namespace

struct DbslServer::Impl {
  const comm::World& world;
  std::size_t floats;  // parameters + state
  enum State { kComputing, kReceived, kTaken, kStopped };
  struct Worker {
    State state = kTaken;  // until the first reply posts its receive
    Bytes received;
    comm::Request receive;
    Bytes sending;
    comm::Request send;
  };
  std::vector<Worker> workers;
  std::deque<std::size_t> order;  // wall clock: received pushes, in arrival order
  std::optional<DbslVirtualClock> clock;
  // A push is due from each computing worker: one that stays silent past --comm-timeout ends
  // the run naming it, though the others' pushes keep the server's waits short.
  comm::PeerSilence silence;

  Impl(const comm::World& w, std::size_t f)
      : world(w),
        floats(f),
        silence(static_cast<std::size_t>(std::max(w.size() - 1, 0)), &Impl::rank_of) {}
  static int rank_of(std::size_t w) { return static_cast<int>(w) + 1; }

  void post_receive(std::size_t w) {
    Worker& worker = workers[w];
    worker.received.resize(sizeof(PushHeader) + floats * sizeof(float));
    worker.state = kComputing;
    silence.expect(w);
    worker.receive =
        world.irecv(worker.received.data(), worker.received.size(), rank_of(w), kGradientTag);
  }

  // Sends worker w a reply (the header, then the model unless it says stop).
  void send(std::size_t w, const ReplyHeader& header, std::span<const float> parameters,
            std::span<const float> state) {
    Worker& worker = workers[w];
    world.wait(worker.send, cat("replying to rank ", rank_of(w)));
    const bool model = header.stop == 0;
    worker.sending.resize(sizeof header + (model ? floats * sizeof(float) : 0));
    std::memcpy(worker.sending.data(), &header, sizeof header);
    if (model) {
      std::memcpy(worker.sending.data() + sizeof header, parameters.data(),
                  parameters.size_bytes());
      std::memcpy(worker.sending.data() + sizeof header + parameters.size_bytes(), state.data(),
                  state.size_bytes());
    }
    worker.send =
        world.isend(worker.sending.data(), worker.sending.size(), rank_of(w), kParametersTag);
  }

  // Marks the pushes that came in; true when any did.
  bool poll() {
    bool any = false;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      Worker& worker = workers[w];
      if (worker.state != kComputing || !world.test(worker.receive)) continue;
      worker.state = kReceived;
      silence.heard(w);
      any = true;
      if (clock) {
        const PushHeader header = header_of(w);
        clock->arrived(static_cast<int>(w), header.sleep_time + header.compute_time);
      } else {
        order.push_back(w);
      }
    }
    return any;
  }

  PushHeader header_of(std::size_t w) const {
    PushHeader header;
    std::memcpy(&header, workers[w].received.data(), sizeof header);
    return header;
  }

  // Takes worker w's push: its model into `model`, its report out.
  WorkerReport take(std::size_t w, std::span<float> model, std::int64_t step) {
    Worker& worker = workers[w];
    const PushHeader header = header_of(w);
    std::memcpy(model.data(), worker.received.data() + sizeof header, model.size_bytes());
    worker.state = kTaken;
    WorkerReport report;
    report.rank = rank_of(w);
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
    report.micro_batches = static_cast<std::int64_t>(header.batches);
    if (clock) clock->take(static_cast<int>(w), report);
    return report;
  }

  std::vector<int> silent() const {
    std::vector<int> ranks;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (workers[w].state == kComputing) ranks.push_back(rank_of(w));
    }
    return ranks;
  }
};

DbslServer::DbslServer(const comm::World& world, std::size_t parameters, std::size_t state)
    : impl_(new Impl(world, parameters + state)) {
  if (world.size() < 2)
    usage_error("mb-train-dbsl needs a server and workers: mpirun -n 2 or more");
  impl_->workers.resize(static_cast<std::size_t>(world.size() - 1));
}

DbslServer::~DbslServer() {
  delete impl_;
}

void DbslVirtualClock::take(int w, WorkerReport& report) {
  const double arrival = arrivals_.take(w);
  now_ = std::max(now_, arrival);
  report.send_time = 2 * arrivals_.message();  // the push and the reply
  report.wait_time = now_ - arrival;           // queued behind earlier pushes
}

void DbslServer::use_virtual_clock(double message, double now) {
  impl_->clock.emplace(static_cast<int>(impl_->workers.size()), message, now);
}

double DbslServer::virtual_now() const {
  return impl_->clock ? impl_->clock->now() : 0.0;
}

void DbslServer::advance(double seconds) {
  if (impl_->clock) impl_->clock->advance(seconds);
}

void DbslServer::start(std::span<const float> parameters, std::span<const float> state,
                       const DbslRound& round) {
  Impl& m = *impl_;
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    reply(Impl::rank_of(w), parameters, state, round);
  }
}

WorkerReport DbslServer::next_push(std::span<float> model, std::int64_t step) {
  Impl& m = *impl_;
  std::optional<std::size_t> next;
  const std::string what = cat("server waiting for a push for step ", step + 1);
  m.world.wait_until(
      [&] {
        m.poll();
        m.silence.check(m.world, what);
        if (m.clock) {
          if (const auto w = m.clock->next()) next = static_cast<std::size_t>(*w);
        } else if (!m.order.empty()) {
          next = m.order.front();
          m.order.pop_front();
        }
        return next.has_value();
      },
      what, [&] { return m.silent(); });
  return m.take(*next, model, step);
}

std::vector<WorkerReport> DbslServer::all_pushes(const PushTaker& take, std::int64_t step) {
  Impl& m = *impl_;
  m.world.wait_until(
      [&] {
        m.poll();
        return m.silent().empty();
      },
      cat("server waiting for every worker's push for step ", step + 1),
      [&] { return m.silent(); });
  m.order.clear();
  std::vector<float> model(m.floats);
  std::vector<WorkerReport> reports;
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    reports.push_back(m.take(w, model, step));
    take(static_cast<int>(w), model);
  }
  return reports;
}

void DbslServer::reply(int rank, std::span<const float> parameters, std::span<const float> state,
                       const DbslRound& round) {
  Impl& m = *impl_;
  const auto w = static_cast<std::size_t>(rank - 1);
  m.post_receive(w);
  m.send(w, ReplyHeader{static_cast<double>(round.step), round.lr, 0}, parameters, state);
  if (m.clock) m.clock->replied(static_cast<int>(w));
}

void DbslServer::finish(std::int64_t step, int code) {
  Impl& m = *impl_;
  const ReplyHeader stop{static_cast<double>(step), 0, static_cast<double>(code)};
  m.world.wait_until(
      [&] {
        m.poll();
        bool all = true;
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          Impl::Worker& worker = m.workers[w];
          if (worker.state == Impl::kReceived) ++discarded_;
          if (worker.state == Impl::kReceived || worker.state == Impl::kTaken) {
            m.send(w, stop, {}, {});
            worker.state = Impl::kStopped;
          }
          all = all && worker.state == Impl::kStopped && m.world.test(worker.send);
        }
        return all;
      },
      cat("server ending the run after step ", step), [&] { return m.silent(); });
}

struct DbslWorker::Impl {
  const comm::World& world;
  std::size_t parameters, state;
  Bytes incoming, outgoing;
  comm::Request send;
  Impl(const comm::World& w, std::size_t p, std::size_t s) : world(w), parameters(p), state(s) {}
};

DbslWorker::DbslWorker(const comm::World& world, std::size_t parameters, std::size_t state)
    : impl_(new Impl(world, parameters, state)) {}

DbslWorker::~DbslWorker() {
  delete impl_;
}

bool DbslWorker::pull(std::span<float> parameters, std::span<float> state, DbslRound& round) {
  Impl& k = *impl_;
  const auto start = SteadyClock::now();
  k.incoming.resize(sizeof(ReplyHeader) + (k.parameters + k.state) * sizeof(float));
  comm::Request receive = k.world.irecv(k.incoming.data(), k.incoming.size(), 0, kParametersTag);
  k.world.wait(receive, "waiting for the server's model");
  k.world.wait(k.send, "sending the model to the server");
  last_wait_ = seconds_since(start);
  ReplyHeader header;
  std::memcpy(&header, k.incoming.data(), sizeof header);
  round.step = static_cast<std::int64_t>(header.step);
  round.lr = header.lr;
  round.stop = static_cast<int>(header.stop);
  if (round.stop != kContinue) return false;
  const float* values = reinterpret_cast<const float*>(k.incoming.data() + sizeof header);
  std::copy(values, values + parameters.size(), parameters.begin());
  std::copy(values + parameters.size(), values + parameters.size() + state.size(), state.begin());
  return true;
}

void DbslWorker::push(std::span<const float> parameters, std::span<const float> state,
                      const WorkerReport& report) {
  Impl& k = *impl_;
  PushHeader header;
  header.samples = static_cast<double>(report.samples);
  header.loss_sum = report.loss_sum;
  header.correct = static_cast<double>(report.correct);
  header.compute_time = report.compute_time;
  header.sleep_time = report.sleep_time;
  header.send_time = report.send_time;
  header.wait_time = report.wait_time;
  header.based_on = static_cast<double>(report.based_on);
  header.stop = report.stop;
  header.batches = static_cast<double>(report.micro_batches);
  k.outgoing.resize(sizeof header + parameters.size_bytes() + state.size_bytes());
  std::memcpy(k.outgoing.data(), &header, sizeof header);
  std::memcpy(k.outgoing.data() + sizeof header, parameters.data(), parameters.size_bytes());
  std::memcpy(k.outgoing.data() + sizeof header + parameters.size_bytes(), state.data(),
              state.size_bytes());
  k.send = k.world.isend(k.outgoing.data(), k.outgoing.size(), 0, kGradientTag);
}

}  // namespace mbkit::train
