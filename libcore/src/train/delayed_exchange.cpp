// AMB-DG's exchange on the wall clock (delayed_exchange.hpp).
#include "mbkit/train/delayed_exchange.hpp"

#include "exchange_internal.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "mbkit/train/delayed_gradients.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {
namespace {

using namespace exchange_detail;

// Beside exchange_internal.hpp's tags, the loops' (11-18) and the selecting exchange's (31, 32).
constexpr int kDelayedSumTag = 41;
constexpr int kDelayedVersionTag = 42;

// A worker's message: its round, the version it computed at; round -1: done (header alone).
constexpr std::size_t kSumHeader = 2 * kStepFloats;
constexpr std::int64_t kDoneRound = -1;
// The master's message: the version, then the StopCode (a stop: header alone).
constexpr std::size_t kVersionHeader = kStepFloats + 1;

using Buffer = WorkerVersions::Values;

// The master's message: version `version` (its parameters and state), or a stop (`code`).
Buffer version_message(std::int64_t version, int code, std::span<const float> parameters,
                       std::span<const float> state) {
  std::array<float, kVersionHeader> header{};
  put_step(header.data(), version);
  header[kStepFloats] = static_cast<float>(code);
  Buffer message(header.begin(), header.end());
  message.insert(message.end(), parameters.begin(), parameters.end());
  message.insert(message.end(), state.begin(), state.end());
  return message;
}

}  // namespace

struct DelayedExchange::Impl {
  Impl(const comm::World& w, int n, std::size_t p, std::size_t s)
      : world(w), workers(n), parameters(p), state(s), slots(report_slot_floats(true)) {}

  const comm::World& world;
  int workers;
  std::size_t parameters, state, slots;
  std::size_t sum_floats() const { return kSumHeader + parameters + state + slots; }
  std::size_t version_floats() const { return kVersionHeader + parameters + state; }

  // The master: per worker a receive always posted, the sums that came (oldest first), the
  // versions still being sent (a buffer shared by the workers' sends).
  bool started = false;
  std::vector<Buffer> posted;
  std::vector<comm::Request> receiving;
  std::vector<std::deque<Buffer>> came;
  std::vector<std::deque<std::pair<comm::Request, std::shared_ptr<const Buffer>>>> sending;
  std::vector<bool> done;
  std::vector<Buffer> spare;  ///< received buffers, reused
  Buffer sum;

  // A worker: the versions held, its receive, its last sum in flight.
  std::optional<WorkerVersions> held;
  Buffer incoming, outgoing;
  comm::Request receive, sent;
  int stop = kContinue;

  void start() {
    if (started) return;
    started = true;
    const auto n = static_cast<std::size_t>(workers);
    posted.assign(n, Buffer());
    receiving.assign(n, {});
    came.assign(n, {});
    sending.assign(n, {});
    done.assign(n, false);
    for (int w = 0; w < workers; ++w) post(w);
  }

  void post(int w) {
    const auto i = static_cast<std::size_t>(w);
    if (!spare.empty()) {
      posted[i] = std::move(spare.back());
      spare.pop_back();
    }
    posted[i].resize(sum_floats());
    receiving[i] = world.irecv(posted[i].data(), bytes(sum_floats()), w + 1, kDelayedSumTag);
  }

  // The master's poll: the sums that came (each receive posted again at once), the sends done.
  void poll() {
    for (int w = 0; w < workers; ++w) {
      const auto i = static_cast<std::size_t>(w);
      while (!done[i] && receiving[i].pending() && world.test(receiving[i])) {
        if (get_step(posted[i].data()) == kDoneRound) {
          done[i] = true;
          spare.push_back(std::move(posted[i]));
          break;
        }
        came[i].push_back(std::move(posted[i]));
        post(w);
      }
      auto& queue = sending[i];
      while (!queue.empty() && world.test(queue.front().first)) queue.pop_front();
    }
  }

  // A worker's poll: the versions (or the stop) that came, in order.
  void take_in() {
    while (stop == kContinue && receive.pending() && world.test(receive)) {
      const std::int64_t version = get_step(incoming.data());
      const int code = static_cast<int>(incoming[kStepFloats]);
      if (code != kContinue) {
        stop = code;
        return;
      }
      held->add(version, std::move(incoming));
      incoming.assign(version_floats(), 0.0f);
      receive = world.irecv(incoming.data(), bytes(version_floats()), 0, kDelayedVersionTag);
    }
  }
};

DelayedExchange::DelayedExchange(const comm::World& world, int workers, std::size_t parameters,
                                 std::size_t state, int delay)
    : impl_(std::make_unique<Impl>(world, workers, parameters, state)) {
  impl_->held.emplace(delay);
  MBKIT_CHECK(world.size() == workers + 1, "a delayed exchange of ", workers, " workers on ",
              world.size(), " ranks");
}

DelayedExchange::~DelayedExchange() = default;

CombinedStep DelayedExchange::collect(std::span<float> gradients, std::span<float> state,
                                      std::int64_t step, std::int64_t nominal) {
  Impl& m = *impl_;
  MBKIT_CHECK(gradients.size() == m.parameters && state.size() == m.state,
              "collect() with buffers of another model");
  m.start();
  const auto n = static_cast<std::size_t>(m.workers);
  const auto missing = [&] {
    std::vector<int> ranks;
    for (int w = 0; w < m.workers; ++w) {
      if (m.came[static_cast<std::size_t>(w)].empty()) ranks.push_back(w + 1);
    }
    return ranks;
  };
  const auto start = SteadyClock::now();
  m.world.wait_until(
      [&] {
        m.poll();
        for (std::size_t i = 0; i < n; ++i) {
          MBKIT_CHECK(!m.done[i], "rank ", i + 1, " ended before step ", step + 1);
        }
        return missing().empty();
      },
      cat("master waiting for the sums of step ", step + 1), missing);
  CombinedStep result;
  result.wait_time = seconds_since(start);
  // In worker order from zeros (add_worker_to_sum): the sum is a function of the sums alone.
  m.sum.assign(m.parameters + m.state + n * m.slots, 0.0f);
  for (int w = 0; w < m.workers; ++w) {
    const auto i = static_cast<std::size_t>(w);
    Buffer message = std::move(m.came[i].front());
    m.came[i].pop_front();
    const std::int64_t round = get_step(message.data());
    const std::int64_t version = get_step(message.data() + kStepFloats);
    MBKIT_CHECK(round == step, "rank ", w + 1, " sent the sum of round ", round + 1, " for step ",
                step + 1);
    const float* values = message.data() + kSumHeader;
    WorkerReport report = get_report(values + m.parameters + m.state, w + 1, true);
    report.based_on = version;
    report.staleness = step - version;
    add_worker_to_sum(m.sum, std::span<const float>(values, m.parameters),
                      std::span<const float>(values + m.parameters, m.state), report, w, true);
    add_up(result, report);
    m.spare.push_back(std::move(message));
  }
  std::copy_n(m.sum.begin(), m.parameters, gradients.begin());
  const float inverse = 1.0f / static_cast<float>(m.workers);
  for (std::size_t k = 0; k < m.state; ++k) state[k] = m.sum[m.parameters + k] * inverse;
  finish_gradient(gradients, nominal, result.samples);
  ServerReport server;
  server.floats = static_cast<std::int64_t>(m.parameters);
  server.bytes_received = static_cast<std::int64_t>(bytes(m.sum_floats()) * n);
  server.recv_time = result.wait_time;
  result.servers.push_back(server);
  return result;
}

void DelayedExchange::publish(std::span<const float> parameters, std::span<const float> state,
                              std::int64_t version) {
  Impl& m = *impl_;
  MBKIT_CHECK(parameters.size() == m.parameters && state.size() == m.state,
              "publish() with buffers of another model");
  m.start();
  const auto message =
      std::make_shared<const Buffer>(version_message(version, kContinue, parameters, state));
  for (int w = 0; w < m.workers; ++w) {
    m.sending[static_cast<std::size_t>(w)].emplace_back(
        m.world.isend(message->data(), bytes(message->size()), w + 1, kDelayedVersionTag), message);
  }
  m.poll();
}

void DelayedExchange::finish(std::int64_t step, int stop) {
  Impl& m = *impl_;
  m.start();
  const int code = stop == kContinue ? kFinished : stop;
  const auto message = std::make_shared<const Buffer>(version_message(step, code, {}, {}));
  for (int w = 0; w < m.workers; ++w) {
    m.sending[static_cast<std::size_t>(w)].emplace_back(
        m.world.isend(message->data(), bytes(message->size()), w + 1, kDelayedVersionTag), message);
  }
  const auto outstanding = [&] {
    std::vector<int> ranks;
    for (int w = 0; w < m.workers; ++w) {
      const auto i = static_cast<std::size_t>(w);
      if (!m.done[i] || !m.sending[i].empty()) ranks.push_back(w + 1);
    }
    return ranks;
  };
  // The sums of the rounds computed past the end are received and dropped.
  m.world.wait_until(
      [&] {
        m.poll();
        for (auto& queue : m.came) {
          discarded_ += static_cast<std::int64_t>(queue.size());
          queue.clear();
        }
        return outstanding().empty();
      },
      cat("master ending the workers' rounds after step ", step), outstanding);
}

void DelayedExchange::hold(std::int64_t version, std::span<const float> parameters,
                           std::span<const float> state) {
  Impl& k = *impl_;
  MBKIT_CHECK(parameters.size() == k.parameters && state.size() == k.state,
              "hold() with buffers of another model");
  k.held->add(version, version_message(version, kContinue, parameters, state));
}

int DelayedExchange::take(std::int64_t round, std::span<float> parameters, std::span<float> state) {
  Impl& k = *impl_;
  MBKIT_CHECK(parameters.size() == k.parameters && state.size() == k.state,
              "take() with buffers of another model");
  if (!k.receive.pending() && k.stop == kContinue) {  // the first take: the receive posted
    k.incoming.assign(k.version_floats(), 0.0f);
    k.receive = k.world.irecv(k.incoming.data(), bytes(k.version_floats()), 0, kDelayedVersionTag);
  }
  const auto start = SteadyClock::now();
  const auto arrived = [&] {
    k.take_in();
    return k.stop != kContinue || k.held->ready(round);
  };
  if (!arrived()) {
    // Past --comm-timeout the ranks that do not answer a ping are named (the master, or the
    // worker whose sum it waits for).
    k.world.wait_until(arrived,
                       cat("waiting for parameter version ", k.held->version_for(round),
                           " from the master for round ", round + 1),
                       {});
  }
  wait_time_ = seconds_since(start);
  if (k.stop != kContinue) return k.stop;
  version_ = k.held->version_for(round);
  const std::span<const float> values = k.held->take(round);
  std::copy_n(values.begin() + kVersionHeader, k.parameters, parameters.begin());
  const std::span<const float> newest = k.held->newest_values();
  std::copy_n(newest.begin() + static_cast<std::ptrdiff_t>(kVersionHeader + k.parameters), k.state,
              state.begin());
  return kContinue;
}

void DelayedExchange::send(std::span<const float> gradients, std::span<const float> state,
                           const WorkerReport& report, std::int64_t round, std::int64_t version) {
  Impl& k = *impl_;
  MBKIT_CHECK(gradients.size() == k.parameters && state.size() == k.state,
              "send() with buffers of another model");
  const auto start = SteadyClock::now();
  if (k.sent.pending()) {
    k.world.wait(k.sent, cat("sending the sum of round ", round, " to the master"));
  }
  k.outgoing.resize(k.sum_floats());
  put_step(k.outgoing.data(), round);
  put_step(k.outgoing.data() + kStepFloats, version);
  float* values = k.outgoing.data() + kSumHeader;
  std::copy(gradients.begin(), gradients.end(), values);
  std::copy(state.begin(), state.end(), values + k.parameters);
  put_report(report, values + k.parameters + k.state, true);
  k.sent = k.world.isend(k.outgoing.data(), bytes(k.outgoing.size()), 0, kDelayedSumTag);
  send_time_ = seconds_since(start);
}

void DelayedExchange::finish_worker() {
  Impl& k = *impl_;
  // Every version before the stop is taken in (the master waits for their sends).
  if (k.stop == kContinue) {
    if (!k.receive.pending()) {
      k.incoming.assign(k.version_floats(), 0.0f);
      k.receive =
          k.world.irecv(k.incoming.data(), bytes(k.version_floats()), 0, kDelayedVersionTag);
    }
    k.world.wait_until(
        [&] {
          k.take_in();
          return k.stop != kContinue;
        },
        "waiting for the end of the run from the master", {});
  }
  if (k.sent.pending()) k.world.wait(k.sent, "sending the last sum to the master");
  k.outgoing.assign(kSumHeader, 0.0f);
  put_step(k.outgoing.data(), kDoneRound);
  k.sent = k.world.isend(k.outgoing.data(), bytes(k.outgoing.size()), 0, kDelayedSumTag);
  k.world.wait(k.sent, "telling the master this worker is done");
}

}  // namespace mbkit::train
