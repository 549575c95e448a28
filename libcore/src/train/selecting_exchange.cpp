#include "mbkit/train/selecting_exchange.hpp"

#include "exchange_internal.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "mbkit/comm/peer_silence.hpp"
#include "mbkit/train/k_batch_sync.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {
namespace {

using namespace exchange_detail;

// Beside exchange_internal.hpp's tags and the loops' (11-18).
constexpr int kSelectedGradientTag = 31;
constexpr int kSelectedParametersTag = 32;
constexpr int kSelectedNoticeTag = 33;  // notify_late(): a step, made without the worker's round

// The master's message: the step, then the StopCode.
constexpr std::size_t kAnswerHeader = kStepFloats + 1;
// K-batch-sync: a worker's goodbye is a step alone, this one.
constexpr std::int64_t kGoodbye = -1;
// K-batch-sync: no parameters waiting for the previous ones' delivery.
constexpr int kNothingDeferred = -1;

}  // namespace

struct SelectingExchange::Impl {
  Impl(const comm::World& w, const StepSelection& s, std::size_t p, std::size_t st)
      : world(w),
        selection(s),
        parameters(p),
        state(st),
        slots(report_slot_floats(true)),
        workers(s.workers()),
        silence(static_cast<std::size_t>(s.workers()),
                [](std::size_t worker) { return static_cast<int>(worker) + 1; }) {}

  const comm::World& world;
  StepSelection selection;
  std::size_t parameters, state, slots;
  int workers;
  std::size_t message_floats() const { return kStepFloats + parameters + state + slots; }
  std::size_t answer_floats() const { return kAnswerHeader + parameters + state; }

  // The master: a receive and an answer per worker.
  bool started = false;
  std::vector<Floats> inbox, outbox;
  std::vector<comm::Request> received, sent;
  std::vector<bool> done;          ///< told to stop: nothing more comes from it
  std::vector<bool> answer_after;  ///< came in time for the step: answered after its update
  std::vector<float> sum;
  int late_stop = kContinue;  ///< the largest StopCode of the discarded gradients' reports
  comm::PeerSilence silence;
  // K-batch-sync (take_batches()).
  std::optional<KBatchArrivals> arrivals;
  std::vector<int> deferred;  ///< the StopCode of parameters waiting for the previous ones
  std::vector<bool> left;     ///< said goodbye: nothing more comes from it
  // notify_late(): a notice per worker, sent when the previous one to it is delivered.
  std::vector<Floats> notices;
  std::vector<comm::Request> noticed;

  // A worker: its message and the master's answer.
  Floats message, reply;
  comm::Request message_sent;
  comm::Request reply_received;  ///< K-batch-sync: the receive poll() keeps posted
  bool listening = false;
  Floats notice;                    ///< notify_late(): the notice being received
  comm::Request notice_received;    ///< posted once overtaken() is first asked
  std::int64_t newest_notice = -1;  ///< the newest step a notice told of

  void start() {
    if (started) return;
    started = true;
    const auto n = static_cast<std::size_t>(workers);
    inbox.assign(n, Floats(message_floats()));
    outbox.assign(n, Floats(answer_floats()));
    received.assign(n, {});
    sent.assign(n, {});
    done.assign(n, false);
    answer_after.assign(n, false);
    deferred.assign(n, kNothingDeferred);
    left.assign(n, false);
    notices.assign(n, Floats(kStepFloats));
    noticed.assign(n, {});
    for (int w = 0; w < workers; ++w) post(w);
  }

  void post(int w) {
    const auto i = static_cast<std::size_t>(w);
    received[i] =
        world.irecv(inbox[i].data(), bytes(message_floats()), w + 1, kSelectedGradientTag);
    silence.expect(i);
  }

  // Parameters of `step` (none with a stop) to worker w, which is then expected again or done.
  void answer(int w, std::span<const float> p, std::span<const float> s, std::int64_t step,
              int stop) {
    const auto i = static_cast<std::size_t>(w);
    if (sent[i].pending()) world.wait(sent[i], cat("sending the parameters to rank ", w + 1));
    send_parameters(w, p, s, step, stop);
    if (stop == kContinue) {
      post(w);
    } else {
      done[i] = true;
    }
  }

  // The message itself; the previous one to w is delivered.
  void send_parameters(int w, std::span<const float> p, std::span<const float> s, std::int64_t step,
                       int stop) {
    const auto i = static_cast<std::size_t>(w);
    Floats& out = outbox[i];
    put_step(out.data(), step);
    out[kStepFloats] = static_cast<float>(stop);
    std::size_t floats = kAnswerHeader;
    if (stop == kContinue) {
      std::copy(p.begin(), p.end(), out.begin() + kAnswerHeader);
      std::copy(s.begin(), s.end(),
                out.begin() + static_cast<std::ptrdiff_t>(kAnswerHeader + p.size()));
      floats = answer_floats();
    }
    sent[i] = world.isend(out.data(), bytes(floats), w + 1, kSelectedParametersTag);
  }

  // K-batch-sync: parameters of `step` (or a stop) to worker w now, or, while the previous
  // ones are not delivered (it is inside a batch), once they are (flush()), newest then.
  // Its receive stays posted: its batches go on coming until its goodbye.
  void deliver(int w, std::span<const float> p, std::span<const float> s, std::int64_t step,
               int stop) {
    const auto i = static_cast<std::size_t>(w);
    deferred[i] = stop;
    flush(w, p, s, step);
  }

  void flush(int w, std::span<const float> p, std::span<const float> s, std::int64_t step) {
    const auto i = static_cast<std::size_t>(w);
    if (deferred[i] == kNothingDeferred || !world.test(sent[i])) return;
    const int stop = std::exchange(deferred[i], kNothingDeferred);
    send_parameters(w, p, s, step, stop);
    if (stop != kContinue) done[i] = true;
  }

  // K-batch-sync's end: every worker is sent the stop and says goodbye after its last batch
  // (received and discarded, as are the batches before it).
  void finish_batches(std::int64_t step, int code, std::int64_t& discarded) {
    for (int w = 0; w < workers; ++w) {
      if (!done[static_cast<std::size_t>(w)]) deferred[static_cast<std::size_t>(w)] = code;
    }
    const std::string what = cat("master waiting for the workers' goodbyes after step ", step);
    world.wait_until(
        [&] {
          bool all = true;
          for (int w = 0; w < workers; ++w) {
            const auto i = static_cast<std::size_t>(w);
            flush(w, {}, {}, step);
            if (deferred[i] != kNothingDeferred) all = false;
            if (left[i]) continue;
            all = false;
            if (!world.test(received[i])) continue;
            silence.heard(i);
            if (get_step(inbox[i].data()) == kGoodbye) {
              left[i] = true;
            } else {
              ++discarded;
              post(w);
            }
          }
          silence.check(world, what);
          return all;
        },
        what,
        [&] {
          std::vector<int> ranks;
          for (int w = 0; w < workers; ++w) {
            if (!left[static_cast<std::size_t>(w)]) ranks.push_back(w + 1);
          }
          return ranks;
        });
  }

  // A step's end, once m.sum holds the `count` taken messages' sum: the gradient out of it
  // (scaled for `nominal`), their state's average, the late reports' stop and the /servers row.
  void finish_step(CombinedStep& result, std::span<float> gradients, std::span<float> out_state,
                   std::int64_t nominal, int count) {
    result.stop = std::max(result.stop, std::exchange(late_stop, kContinue));
    std::copy_n(sum.begin(), parameters, gradients.begin());
    const float inverse = 1.0f / static_cast<float>(count);
    for (std::size_t k = 0; k < state; ++k) out_state[k] = sum[parameters + k] * inverse;
    finish_gradient(gradients, nominal, result.samples);
    ServerReport server;
    server.floats = static_cast<std::int64_t>(parameters);
    server.bytes_received = static_cast<std::int64_t>(bytes(message_floats())) * count;
    server.recv_time = result.wait_time;
    result.servers.push_back(server);
  }

  std::vector<int> ranks_waited_for(const std::vector<bool>& came) const {
    std::vector<int> ranks;
    for (int w = 0; w < workers; ++w) {
      const auto i = static_cast<std::size_t>(w);
      if (!came[i] && !done[i]) ranks.push_back(w + 1);
    }
    return ranks;
  }
};

SelectingExchange::SelectingExchange(const comm::World& world, const StepSelection& selection,
                                     std::size_t parameters, std::size_t state)
    : impl_(std::make_unique<Impl>(world, selection, parameters, state)) {
  MBKIT_CHECK(world.size() == selection.workers() + 1, "a selecting exchange of ",
              selection.workers(), " workers on ", world.size(), " ranks");
}

SelectingExchange::~SelectingExchange() = default;

CombinedStep SelectingExchange::collect(std::span<float> gradients, std::span<float> state,
                                        std::span<const float> parameters, std::int64_t step,
                                        std::int64_t nominal, std::vector<bool>& used) {
  Impl& m = *impl_;
  MBKIT_CHECK(gradients.size() == m.parameters && state.size() == m.state &&
                  parameters.size() == m.parameters,
              "collect() with buffers of another model");
  m.start();
  const auto n = static_cast<std::size_t>(m.workers);
  std::vector<bool> taken(n, false), came(n, false);
  std::vector<WorkerReport> reports(n);
  for (int w = 0; w < m.workers; ++w) reports[static_cast<std::size_t>(w)].rank = w + 1;
  const std::string what = cat("master waiting for the gradients of step ", step + 1);
  const auto start = SteadyClock::now();
  // Each poll takes what came in worker order: arrivals seen by one poll are simultaneous.
  m.world.wait_until(
      [&] {
        for (int w = 0; w < m.workers; ++w) {
          const auto i = static_cast<std::size_t>(w);
          std::size_t got = 0;
          if (m.done[i] || !m.received[i].pending() || !m.world.test(m.received[i], &got)) {
            continue;
          }
          m.silence.heard(i);
          const float* message = m.inbox[i].data();
          const std::int64_t of = get_step(message);
          const bool abandoned = got < bytes(m.message_floats());  // abandon(): no gradient
          const WorkerReport report = get_report(
              message + kStepFloats + (abandoned ? 0 : m.parameters + m.state), w + 1, true);
          if (of < step) {  // its step was made without it: the newest parameters, at once
            ++(abandoned ? abandoned_ : discarded_);
            if (abandoned) abandoned_micro_batches_ += report.micro_batches;
            m.late_stop = std::max(m.late_stop, report.stop);
            m.answer(w, parameters, state, step, kContinue);
            continue;
          }
          MBKIT_CHECK(of == step && !abandoned, "rank ", w + 1, " sent a gradient of step ", of + 1,
                      abandoned ? " (abandoned)" : "", " during step ", step + 1);
          came[i] = true;
          reports[i] = report;
          if (m.selection.takes(taken, w)) taken[i] = true;
        }
        m.silence.check(m.world, what);
        return m.selection.complete(taken);
      },
      what, [&] { return m.ranks_waited_for(came); });
  CombinedStep result;
  result.wait_time = seconds_since(start);
  // The chosen ones' sum in worker order from zeros: the additions of ps's in-process and
  // shared-memory sums (add_worker_to_sum), a function of the choice alone.
  m.sum.assign(m.parameters + m.state + n * m.slots, 0.0f);
  int count = 0;
  for (int w = 0; w < m.workers; ++w) {
    const auto i = static_cast<std::size_t>(w);
    WorkerReport& report = reports[i];
    if (taken[i]) {
      const float* values = m.inbox[i].data() + kStepFloats;
      add_worker_to_sum(m.sum, std::span<const float>(values, m.parameters),
                        std::span<const float>(values + m.parameters, m.state), report, w, true);
      ++count;
    } else {
      report.samples = 0;
      report.loss_sum = 0;
      report.correct = 0;
      // A late round (its row made before its worker knows): none of it reached the step. Its
      // micro-batches, if abandoned, are counted with abandoned_micro_batches_.
      if (!came[i]) report.micro_batches = 0;
    }
    add_up(result, report);
  }
  m.finish_step(result, gradients, state, nominal, count);
  used = taken;
  m.answer_after = came;
  return result;
}

void SelectingExchange::take_batches(int k) {
  impl_->arrivals.emplace(k, impl_->workers);
}

CombinedStep SelectingExchange::collect_batches(std::span<float> gradients, std::span<float> state,
                                                std::span<const float> parameters,
                                                std::int64_t step, std::int64_t nominal,
                                                std::vector<int>& batches) {
  Impl& m = *impl_;
  MBKIT_CHECK(m.arrivals.has_value(), "collect_batches() without take_batches()");
  MBKIT_CHECK(gradients.size() == m.parameters && state.size() == m.state &&
                  parameters.size() == m.parameters,
              "collect_batches() with buffers of another model");
  m.start();
  KBatchArrivals& arrivals = *m.arrivals;
  arrivals.begin(step);
  const auto n = static_cast<std::size_t>(m.workers);
  std::vector<WorkerReport> reports(n);
  std::vector<bool> came(n, false);
  const std::size_t values = m.parameters + m.state;
  m.sum.assign(values, 0.0f);
  const std::string what = cat("master waiting for the batches of step ", step + 1);
  const auto start = SteadyClock::now();
  // Each poll takes what came in worker order: arrivals seen by one poll are simultaneous.
  m.world.wait_until(
      [&] {
        for (int w = 0; w < m.workers && !arrivals.complete(); ++w) {
          const auto i = static_cast<std::size_t>(w);
          m.flush(w, parameters, state, step);
          if (m.left[i] || !m.world.test(m.received[i])) continue;
          m.silence.heard(i);
          const float* message = m.inbox[i].data();
          const std::int64_t of = get_step(message);
          MBKIT_CHECK(of != kGoodbye, "rank ", w + 1, " left during step ", step + 1);
          const WorkerReport report = get_report(message + kStepFloats + values, w + 1, true);
          if (arrivals.take(w, of)) {
            // Added as it is taken: the sum's order is the arrivals'.
            const float* value = message + kStepFloats;
            for (std::size_t k = 0; k < values; ++k) m.sum[k] += value[k];
            WorkerReport& mine = reports[i];
            if (!came[i]) {
              mine = report;
              came[i] = true;
            } else {
              mine.samples += report.samples;
              mine.loss_sum += report.loss_sum;
              mine.correct += report.correct;
              mine.compute_time += report.compute_time;
              mine.sleep_time += report.sleep_time;
              mine.micro_batches += report.micro_batches;
              mine.stop = std::max(mine.stop, report.stop);
            }
          } else {  // of an earlier step: its worker has the newer parameters or soon will
            ++discarded_;
            m.late_stop = std::max(m.late_stop, report.stop);
          }
          m.post(w);  // its next batch
        }
        m.silence.check(m.world, what);
        return arrivals.complete();
      },
      what,
      [&] {
        std::vector<int> ranks;
        for (int w = 0; w < m.workers; ++w) ranks.push_back(w + 1);
        return ranks;
      });
  CombinedStep result;
  result.wait_time = seconds_since(start);
  for (int w = 0; w < m.workers; ++w) {
    const auto i = static_cast<std::size_t>(w);
    if (!came[i]) {
      reports[i].rank = w + 1;
      reports[i].micro_batches = 0;
    }
    add_up(result, reports[i]);
  }
  m.finish_step(result, gradients, state, nominal, arrivals.taken());
  batches = arrivals.batches();
  return result;
}

void SelectingExchange::publish(std::span<const float> parameters, std::span<const float> state,
                                std::int64_t step, int stop) {
  Impl& m = *impl_;
  if (m.arrivals) {
    for (int w = 0; w < m.workers; ++w) {
      if (!m.done[static_cast<std::size_t>(w)]) m.deliver(w, parameters, state, step, stop);
    }
    return;
  }
  for (int w = 0; w < m.workers; ++w) {
    const auto i = static_cast<std::size_t>(w);
    if (m.answer_after[i]) {
      m.answer(w, parameters, state, step, stop);
    } else if (notify_late_ && stop == kContinue && !m.done[i] && m.world.test(m.noticed[i])) {
      // Still computing an earlier step; a notice not yet delivered tells it already.
      put_step(m.notices[i].data(), step);
      m.noticed[i] =
          m.world.isend(m.notices[i].data(), bytes(kStepFloats), w + 1, kSelectedNoticeTag);
    }
  }
  std::fill(m.answer_after.begin(), m.answer_after.end(), false);
}

void SelectingExchange::finish(std::int64_t step, int stop) {
  Impl& m = *impl_;
  if (!m.started) return;  // the start's verdict reached every worker through the broadcast
  const int code = stop == kContinue ? kFinished : stop;
  if (m.arrivals) {
    m.finish_batches(step, code, discarded_);
  } else {
    finish_rounds(step, code);
  }
  m.world.wait_until(
      [&] {
        bool all = true;
        for (auto& s : m.sent) all = m.world.test(s) && all;
        for (auto& s : m.noticed) all = m.world.test(s) && all;
        return all;
      },
      "master sending the stop to the workers",
      [&] {
        std::vector<int> ranks;
        for (const auto& s : m.sent) {
          if (s.pending()) ranks.push_back(s.peer);
        }
        for (const auto& s : m.noticed) {
          if (s.pending()) ranks.push_back(s.peer);
        }
        return ranks;
      });
}

void SelectingExchange::finish_rounds(std::int64_t step, int code) {
  Impl& m = *impl_;
  const std::string what = cat("master waiting for the last gradients after step ", step);
  const auto outstanding = [&] {
    std::vector<int> ranks;
    for (int w = 0; w < m.workers; ++w) {
      if (!m.done[static_cast<std::size_t>(w)]) ranks.push_back(w + 1);
    }
    return ranks;
  };
  // Every round in progress ends with a gradient: received, discarded and answered with the stop.
  m.world.wait_until(
      [&] {
        bool all = true;
        for (int w = 0; w < m.workers; ++w) {
          const auto i = static_cast<std::size_t>(w);
          if (m.done[i]) continue;
          std::size_t got = 0;
          if (!m.world.test(m.received[i], &got)) {
            all = false;
            continue;
          }
          m.silence.heard(i);
          if (got < bytes(m.message_floats())) {  // abandon(): its report alone
            ++abandoned_;
            abandoned_micro_batches_ +=
                get_report(m.inbox[i].data() + kStepFloats, w + 1, true).micro_batches;
          } else {
            ++discarded_;
          }
          m.answer(w, {}, {}, step, code);
        }
        m.silence.check(m.world, what);
        return all;
      },
      what, outstanding);
}

void SelectingExchange::send(std::span<const float> gradients, std::span<const float> state,
                             const WorkerReport& report, std::int64_t step) {
  Impl& m = *impl_;
  MBKIT_CHECK(gradients.size() == m.parameters && state.size() == m.state,
              "send() with buffers of another model");
  const auto start = SteadyClock::now();
  if (m.message_sent.pending()) {
    m.world.wait(m.message_sent, cat("sending the gradient of step ", step, " to the master"));
  }
  m.message.resize(m.message_floats());
  put_step(m.message.data(), step);
  float* values = m.message.data() + kStepFloats;
  std::copy(gradients.begin(), gradients.end(), values);
  std::copy(state.begin(), state.end(), values + m.parameters);
  put_report(report, values + m.parameters + m.state, true);
  m.message_sent =
      m.world.isend(m.message.data(), bytes(m.message.size()), 0, kSelectedGradientTag);
  send_time_ = seconds_since(start);
}

SelectingExchange::Parameters SelectingExchange::receive(std::span<float> parameters,
                                                         std::span<float> state) {
  Impl& m = *impl_;
  const auto start = SteadyClock::now();
  m.reply.resize(m.answer_floats());
  comm::Request reply =
      m.world.irecv(m.reply.data(), bytes(m.reply.size()), 0, kSelectedParametersTag);
  m.world.wait(reply, "waiting for the parameters from the master");
  // The answer follows the gradient's arrival: the send is complete.
  if (m.message_sent.pending()) m.world.wait(m.message_sent, "sending the gradient to the master");
  Parameters got;
  got.step = get_step(m.reply.data());
  got.stop = static_cast<int>(m.reply[kStepFloats]);
  if (got.stop == kContinue) {
    MBKIT_CHECK(parameters.size() == m.parameters && state.size() == m.state,
                "receive() with buffers of another model");
    const float* values = m.reply.data() + kAnswerHeader;
    std::copy_n(values, m.parameters, parameters.begin());
    std::copy_n(values + m.parameters, m.state, state.begin());
  }
  wait_time_ = seconds_since(start);
  return got;
}

bool SelectingExchange::overtaken(std::int64_t step) {
  Impl& m = *impl_;
  // Every notice that came; the newest counts.
  for (;;) {
    if (!m.notice_received.pending()) {
      m.notice.resize(kStepFloats);
      m.notice_received = m.world.irecv(m.notice.data(), bytes(kStepFloats), 0, kSelectedNoticeTag);
    }
    if (!m.world.test(m.notice_received)) break;
    m.newest_notice = std::max(m.newest_notice, get_step(m.notice.data()));
  }
  return m.newest_notice > step;
}

void SelectingExchange::abandon(const WorkerReport& report, std::int64_t step) {
  Impl& m = *impl_;
  const auto start = SteadyClock::now();
  if (m.message_sent.pending()) {
    m.world.wait(m.message_sent, cat("sending the gradient of step ", step, " to the master"));
  }
  m.message.resize(m.message_floats());
  put_step(m.message.data(), step);
  put_report(report, m.message.data() + kStepFloats, true);
  m.message_sent =
      m.world.isend(m.message.data(), bytes(kStepFloats + m.slots), 0, kSelectedGradientTag);
  send_time_ = seconds_since(start);
}

void SelectingExchange::stop_listening() {
  impl_->world.cancel(impl_->notice_received);
}

std::optional<SelectingExchange::Parameters> SelectingExchange::poll(std::span<float> parameters,
                                                                     std::span<float> state) {
  Impl& m = *impl_;
  MBKIT_CHECK(parameters.size() == m.parameters && state.size() == m.state,
              "poll() with buffers of another model");
  const auto start = SteadyClock::now();
  std::optional<Parameters> newest;
  // Every message that came, in order: the last is the newest.
  while (!newest || newest->stop == kContinue) {
    if (!m.listening) {
      m.reply.resize(m.answer_floats());
      m.reply_received =
          m.world.irecv(m.reply.data(), bytes(m.reply.size()), 0, kSelectedParametersTag);
      m.listening = true;
    }
    if (!m.world.test(m.reply_received)) break;
    m.listening = false;
    Parameters got;
    got.step = get_step(m.reply.data());
    got.stop = static_cast<int>(m.reply[kStepFloats]);
    if (got.stop == kContinue) {
      const float* values = m.reply.data() + kAnswerHeader;
      std::copy_n(values, m.parameters, parameters.begin());
      std::copy_n(values + m.parameters, m.state, state.begin());
    }
    newest = got;
  }
  wait_time_ = seconds_since(start);
  return newest;
}

void SelectingExchange::leave() {
  Impl& m = *impl_;
  if (m.message.empty()) return;  // sent nothing: the master never started either
  if (m.listening) {
    m.world.cancel(m.reply_received);
    m.listening = false;
  }
  if (m.message_sent.pending()) {
    m.world.wait(m.message_sent, "sending the last batch's gradient to the master");
  }
  put_step(m.message.data(), kGoodbye);
  m.message_sent = m.world.isend(m.message.data(), bytes(kStepFloats), 0, kSelectedGradientTag);
  m.world.wait(m.message_sent, "telling the master that no more batches follow");
}

}  // namespace mbkit::train
