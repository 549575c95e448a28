#include "mbkit/train/exchange.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {
namespace {

using Clock = SteadyClock;


// Message tags on MPI_COMM_WORLD (the ping communicator of comm::World is separate).
constexpr int kArrivalTag = 11;
constexpr int kGradientTag = 12;
constexpr int kParametersTag = 13;

// A worker's report travels as floats in the sync exchanges' small buffer (exact for counts
// below 2^24, which one worker's step never reaches) and as doubles in async messages.
constexpr std::size_t kReportSlots = 10;

void put_report(const WorkerReport& r, float* slot) {
  slot[0] = static_cast<float>(r.samples);
  slot[1] = static_cast<float>(r.loss_sum);
  slot[2] = static_cast<float>(r.correct);
  slot[3] = static_cast<float>(r.compute_time);
  slot[4] = static_cast<float>(r.sleep_time);
  slot[5] = static_cast<float>(r.send_time);
  slot[6] = static_cast<float>(r.wait_time);
  slot[7] = static_cast<float>(r.stop);
  slot[8] = static_cast<float>(r.micro_batches);
  slot[9] = r.finished_early ? 1.0f : 0.0f;
}

WorkerReport get_report(const float* slot, int rank) {
  WorkerReport r;
  r.rank = rank;
  r.samples = static_cast<std::int64_t>(slot[0]);
  r.loss_sum = slot[1];
  r.correct = static_cast<std::int64_t>(slot[2]);
  r.compute_time = slot[3];
  r.sleep_time = slot[4];
  r.send_time = slot[5];
  r.wait_time = slot[6];
  r.stop = static_cast<int>(slot[7]);
  r.micro_batches = static_cast<std::int64_t>(slot[8]);
  r.finished_early = slot[9] != 0;
  return r;
}

void add_up(CombinedStep& step, const WorkerReport& report) {
  step.samples += report.samples;
  step.loss_sum += report.loss_sum;
  step.correct += report.correct;
  step.stop = std::max(step.stop, report.stop);
  step.workers.push_back(report);
}

}  // namespace

void finish_gradient(std::span<float> gradients, std::int64_t nominal, std::int64_t total) {
  if (total == nominal || total <= 0) return;
  const float factor =
      static_cast<float>(static_cast<double>(nominal) / static_cast<double>(total));
  for (float& g : gradients) g *= factor;
}

// ---------------------------------------------------------------------------------------------
// Synchronous exchanges.

SyncExchange::SyncExchange(const comm::World& world, bool parameter_server, AllreduceVia via)
    : world_(world), parameter_server_(parameter_server && world.distributed()) {
  if (parameter_server_ && world.size() < 2) usage_error("--comm ps needs at least 2 ranks");
  shared_memory_ = uses_shared_memory(world, parameter_server, via);
}

bool SyncExchange::uses_shared_memory(const comm::World& world, bool parameter_server,
                                      AllreduceVia via) {
  if (parameter_server || !world.distributed()) return false;
  if (via == AllreduceVia::kSharedMemory && !comm::SharedSum::possible(world)) {
    usage_error(cat("--allreduce shm: only ", world.local_size(), " of the ", world.size(),
                    " ranks run on ", world.host(),
                    "; shared memory needs all on one host (use auto or mpi)"));
  }
  return via == AllreduceVia::kSharedMemory ||
         (via == AllreduceVia::kAuto && comm::SharedSum::possible(world));
}

SyncExchange::~SyncExchange() = default;

std::span<float> SyncExchange::shared_buffer(std::size_t floats) {
  MBKIT_CHECK(shared_memory_, "shared_buffer() of an exchange that does not use shared memory");
  if (!shared_) shared_ = std::make_unique<comm::SharedSum>(world_, floats);
  MBKIT_CHECK(shared_->buffer().size() == floats, "a shared buffer of ", floats,
              " floats after one of ", shared_->buffer().size());
  return shared_->buffer();
}

void SyncExchange::set_bucket_floats(std::size_t floats) {
  if (floats > 0 && (parameter_server_ || shared_memory_)) {
    usage_error(parameter_server_ ? "--bucket-mb needs --comm allreduce"
                                  : "--bucket-mb: the shared-memory sum has no buckets (it "
                                    "needs every gradient at once); use --allreduce mpi");
  }
  bucket_floats_ = world_.distributed() ? floats : 0;
}

void SyncExchange::gradients_ready(std::span<float> gradients, std::size_t from) {
  if (bucket_floats_ == 0) return;
  MBKIT_CHECK(from <= gradients.size(), "gradients final from ", from, " of ", gradients.size());
  const auto start = Clock::now();
  if (started_from_ == kNoBucket) started_from_ = gradients.size();
  if (from < started_from_ && started_from_ - from >= bucket_floats_) {
    bucket_sums_.push_back(world_.iallreduce_sum(gradients.subspan(from, started_from_ - from)));
    started_from_ = from;
  } else {
    // libnbc moves a sum on only inside MPI calls.
    for (auto& sum : bucket_sums_) world_.test(sum);
  }
  progress_time_ += seconds_since(start);
}

void SyncExchange::finish_buckets(std::span<float> gradients, std::span<float> small,
                                  const std::string& what) {
  const auto start = Clock::now();
  bucket_sums_.push_back(world_.iallreduce_sum(gradients.first(started_from_)));
  bucket_sums_.push_back(world_.iallreduce_sum(small));
  started_from_ = kNoBucket;
  const auto all_done = [&] {
    bool done = true;
    for (auto& sum : bucket_sums_) done = world_.test(sum) && done;
    return done;
  };
  // Arrival of every rank is the wait (the sums progress meanwhile), the rest is the sending.
  comm::Request barrier = world_.ibarrier();
  world_.wait_until(
      [&] {
        all_done();
        return world_.test(barrier);
      },
      cat("waiting for the other ranks at ", what));
  wait_time_ = seconds_since(start);
  world_.wait_until(all_done, cat("summing the gradients of ", what));
  bucket_sums_.clear();
  send_time_ = seconds_since(start) - wait_time_;
}

std::size_t SyncExchange::tail_floats(std::size_t state_size) const {
  return state_size + static_cast<std::size_t>(workers()) * kReportSlots;
}

CombinedStep SyncExchange::combine(std::span<float> gradients, std::span<float> state,
                                   const WorkerReport& report, std::int64_t step,
                                   std::int64_t nominal, std::span<float> tail) {
  CombinedStep result;
  send_time_ = wait_time_ = 0;
  if (!world_.distributed()) {
    add_up(result, report);
    finish_gradient(gradients, nominal, result.samples);
    return result;
  }
  const int workers = this->workers();
  const std::size_t state_size = state.size();
  const bool fused = !tail.empty();
  if (fused) {
    MBKIT_CHECK(tail.size() == tail_floats(state_size) &&
                    tail.data() == gradients.data() + gradients.size(),
                "the exchange's tail must be tail_floats() floats right after the gradients");
  } else {
    small_.resize(tail_floats(state_size));
  }
  const std::span<float> small = fused ? tail : std::span<float>(small_);
  std::fill(small.begin(), small.end(), 0.0f);
  if (computes()) {
    std::copy(state.begin(), state.end(), small.begin());
    put_report(report,
               small.data() + state_size + static_cast<std::size_t>(worker()) * kReportSlots);
  } else {
    std::fill(gradients.begin(), gradients.end(), 0.0f);
  }
  // One message when the small values follow the gradients, two otherwise.
  const auto reduce = [&](auto&& collective) {
    if (fused) {
      collective(std::span<float>(gradients.data(), gradients.size() + small.size()));
    } else {
      collective(gradients);
      collective(small);
    }
  };
  const std::string what = cat("step ", step + 1);
  const auto start = Clock::now();
  if (bucket_sums_.empty()) started_from_ = kNoBucket;  // no bucket was full: one sum
  const double progressed = progress_time_;
  progress_time_ = 0;
  MBKIT_CHECK(bucket_sums_.empty() || started_from_ <= gradients.size(),
              "combine() with other gradients than the buckets were started on");
  if (shared_memory_) {
    // The sum's own rendezvous is the wait: every rank announces its complete buffer.
    const std::size_t floats = gradients.size() + small.size();
    const std::span<float> buffer = shared_buffer(floats);
    const bool in_place = fused && gradients.data() == buffer.data();
    if (!in_place) {
      std::copy(gradients.begin(), gradients.end(), buffer.begin());
      std::copy(small.begin(), small.end(),
                buffer.begin() + static_cast<std::ptrdiff_t>(gradients.size()));
    }
    wait_time_ = shared_->sum(what);
    if (!in_place) {
      std::copy_n(buffer.begin(), gradients.size(), gradients.begin());
      std::copy_n(buffer.begin() + static_cast<std::ptrdiff_t>(gradients.size()), small.size(),
                  small.begin());
    }
    send_time_ = seconds_since(start) - wait_time_;
    result.wait_time = wait_time_;
  } else if (!bucket_sums_.empty()) {
    finish_buckets(gradients, small, what);
    send_time_ += progressed;
    result.wait_time = wait_time_;
  } else if (parameter_server_ && world_.rank() == 0) {
    // The master learns who is late from the workers' arrival messages.
    arrivals_.assign(static_cast<std::size_t>(workers), 0);
    std::vector<comm::Request> arrivals;
    for (int w = 0; w < workers; ++w) {
      arrivals.push_back(world_.irecv(&arrivals_[static_cast<std::size_t>(w)], sizeof(std::int32_t),
                                      rank_of(w), kArrivalTag));
    }
    comm::Request barrier = world_.ibarrier();
    world_.wait_until(
        [&] {
          bool all = true;
          for (auto& arrival : arrivals) all = world_.test(arrival) && all;
          return world_.test(barrier) && all;
        },
        cat("master waiting for the gradients of ", what),
        [&] {
          std::vector<int> late;
          for (int w = 0; w < workers; ++w) {
            if (arrivals[static_cast<std::size_t>(w)].pending()) late.push_back(rank_of(w));
          }
          return late;
        });
    result.wait_time = seconds_since(start);
    const auto send_start = Clock::now();
    reduce([&](std::span<float> values) { world_.reduce_sum(values, 0); });
    send_time_ = seconds_since(send_start);
  } else {
    comm::Request arrival;
    if (parameter_server_) {
      arrivals_.assign(1, static_cast<std::int32_t>(step));
      arrival = world_.isend(arrivals_.data(), sizeof(std::int32_t), 0, kArrivalTag);
    }
    comm::Request barrier = world_.ibarrier();
    world_.wait_until(
        [&] {
          const bool sent = world_.test(arrival);
          return world_.test(barrier) && sent;
        },
        cat("waiting for the other ranks at ", what));
    wait_time_ = seconds_since(start);
    const auto send_start = Clock::now();
    if (parameter_server_) {
      reduce([&](std::span<float> values) { world_.reduce_sum(values, 0); });
    } else {
      reduce([&](std::span<float> values) { world_.allreduce_sum(values); });
    }
    send_time_ = seconds_since(send_start);
    result.wait_time = wait_time_;
  }
  if (parameter_server_ && world_.rank() != 0) return result;  // the master combines
  for (int w = 0; w < workers; ++w) {
    add_up(result,
           get_report(small.data() + state_size + static_cast<std::size_t>(w) * kReportSlots,
                      rank_of(w)));
  }
  const float inverse = 1.0f / static_cast<float>(workers);
  for (std::size_t i = 0; i < state_size; ++i) state[i] = small[i] * inverse;
  finish_gradient(gradients, nominal, result.samples);
  return result;
}

int SyncExchange::distribute(std::span<float> parameters, std::span<float> state, int stop,
                             std::int64_t step) {
  if (!parameter_server_) return stop;
  const auto start = Clock::now();
  small_.assign(state.size() + 1, 0.0f);
  if (world_.rank() == 0) {
    std::copy(state.begin(), state.end(), small_.begin());
    small_.back() = static_cast<float>(stop);
  }
  // Workers wait here while the master updates: yielding, so the master gets the core.
  world_.rendezvous(cat("waiting for the parameters of step ", step));
  const double waited = seconds_since(start);
  const auto send_start = Clock::now();
  world_.broadcast(parameters, 0);
  world_.broadcast(small_, 0);
  if (world_.rank() != 0) {
    std::copy(small_.begin(), small_.end() - 1, state.begin());
    wait_time_ += waited;
    send_time_ += seconds_since(send_start);
  }
  return static_cast<int>(small_.back());
}

// ---------------------------------------------------------------------------------------------
// Asynchronous parameter server.

namespace {

// Header of a worker's message: what it did, then its gradient (sum over its samples) and
// state. A message of kind kDone carries the header only.
struct GradientHeader {
  double kind = 0;  // kGradient or kDone
  double samples = 0, loss_sum = 0, correct = 0;
  double compute_time = 0, sleep_time = 0, send_time = 0, wait_time = 0;
  double based_on = 0;
  double stop = 0;
  double micro_batches = 1, finished_early = 0;
};
constexpr double kGradient = 1, kDone = 2;

// Header of the master's message: the step of the parameters that follow, or stop.
struct ParametersHeader {
  double step = 0;
  double stop = 0;
};

using Bytes = std::vector<unsigned char>;

}  // namespace

struct AsyncMaster::Impl {
  const comm::World& world;
  std::size_t parameters, state;
  struct Worker {
    Bytes received;
    comm::Request receive;
    std::shared_ptr<const Bytes> sending;  // the snapshot a pending send reads
    comm::Request send;
    std::int64_t sent_step = -1;
    bool done = false;  // its kDone message arrived
    bool told_to_stop = false;
  };
  std::vector<Worker> workers;
  std::shared_ptr<const Bytes> latest;  // newest parameters message
  std::int64_t latest_step = -1;
  std::vector<std::shared_ptr<Bytes>> spare;  // snapshots no send reads any more
  bool stopping = false;
  ParametersHeader stop_header;
  // Virtual clock: the event order, the master's time and the parameter sets a worker may
  // still be given (history[i] is publication arrivals->first_kept() + i).
  std::optional<VirtualArrivals> arrivals;
  double now = 0;
  std::deque<std::shared_ptr<const Bytes>> history;

  Impl(const comm::World& w, std::size_t p, std::size_t s) : world(w), parameters(p), state(s) {}

  std::size_t gradient_bytes() const {
    return sizeof(GradientHeader) + (parameters + state) * sizeof(float);
  }
  int rank_of(std::size_t w) const { return static_cast<int>(w) + 1; }

  void post_receive(std::size_t w) {
    Worker& worker = workers[w];
    worker.received.resize(gradient_bytes());
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

  std::vector<int> silent_workers() const {
    std::vector<int> ranks;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (!workers[w].done) ranks.push_back(rank_of(w));
    }
    return ranks;
  }
};

AsyncMaster::AsyncMaster(const comm::World& world, std::size_t parameters, std::size_t state)
    : impl_(new Impl(world, parameters, state)) {
  if (world.size() < 2) usage_error("--comm ps --async needs at least 2 ranks");
  impl_->workers.resize(static_cast<std::size_t>(world.size() - 1));
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
    add_up(result, report);
    heard[w] = true;
    ++count;
  };
  // Virtual clock: gradients wait until they are next in virtual time.
  auto take_in_virtual_order = [&] {
    VirtualArrivals& arrivals = *m.arrivals;
    while (count < min_gradients) {
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
  m.world.wait_until(
      [&] {
        m.pump();
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          Impl::Worker& worker = m.workers[w];
          if (worker.done) continue;
          if (m.arrivals && m.arrivals->waiting(static_cast<int>(w))) continue;
          if (!m.world.test(worker.receive)) continue;
          const GradientHeader header = Impl::header_of(worker);
          if (header.kind == kDone) {
            worker.done = true;
            if (m.arrivals) m.arrivals->retire(static_cast<int>(w));
            continue;
          }
          if (m.arrivals) {
            m.arrivals->arrived(static_cast<int>(w), header.sleep_time + header.compute_time);
            continue;
          }
          take(w);
          m.post_receive(w);
        }
        if (m.arrivals) take_in_virtual_order();
        return count >= min_gradients;
      },
      cat("master waiting for ", min_gradients, " gradient", min_gradients > 1 ? "s" : "",
          " for step ", step + 1),
      [&] {
        std::vector<int> silent;
        for (std::size_t w = 0; w < m.workers.size(); ++w) {
          const bool waiting = m.arrivals && m.arrivals->waiting(static_cast<int>(w));
          if (!heard[w] && !waiting) silent.push_back(m.rank_of(w));
        }
        return silent;
      });
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
            if (Impl::header_of(worker).kind == kDone) {
              worker.done = true;
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
  Bytes incoming[2];
  int current = 0;  // the buffer with the posted receive
  comm::Request receive;
  Bytes outgoing;
  comm::Request send;
  bool received_any = false;
  bool stopped = false;

  Impl(const comm::World& w, std::size_t p, std::size_t s) : world(w), parameters(p), state(s) {
    for (auto& buffer : incoming) {
      buffer.resize(sizeof(ParametersHeader) + (p + s) * sizeof(float));
    }
    post();
  }
  void post() {
    receive = world.irecv(incoming[current].data(), incoming[current].size(), 0, kParametersTag);
  }
};

AsyncWorker::AsyncWorker(const comm::World& world, std::size_t parameters, std::size_t state)
    : impl_(new Impl(world, parameters, state)) {}

AsyncWorker::~AsyncWorker() {
  delete impl_;
}

bool AsyncWorker::refresh(std::span<float> parameters, std::span<float> state, bool wait,
                          std::int64_t& based_on) {
  Impl& k = *impl_;
  if (k.stopped) return false;
  if (wait || !k.received_any) {
    k.world.wait_until([&] { return !k.receive.pending() || k.world.test(k.receive); },
                       "waiting for parameters from the master",
                       [] { return std::vector<int>{0}; });
  }
  // Take the newest that arrived: drain the stream, alternating between two buffers.
  const Bytes* newest = nullptr;
  while (k.world.test(k.receive)) {
    if (newest != nullptr) ++skipped_;
    newest = &k.incoming[k.current];
    ParametersHeader header;
    std::memcpy(&header, newest->data(), sizeof header);
    if (header.stop != 0) {
      k.stopped = true;
      stop_code_ = static_cast<int>(header.stop);
      return false;
    }
    k.current = 1 - k.current;
    k.post();
  }
  if (newest == nullptr) return true;
  ParametersHeader header;
  std::memcpy(&header, newest->data(), sizeof header);
  const float* values = reinterpret_cast<const float*>(newest->data() + sizeof header);
  std::copy(values, values + parameters.size(), parameters.begin());
  std::copy(values + parameters.size(), values + parameters.size() + state.size(), state.begin());
  based_on = static_cast<std::int64_t>(header.step);
  k.received_any = true;
  return true;
}

void AsyncWorker::send(std::span<const float> gradients, std::span<const float> state,
                       const WorkerReport& report) {
  Impl& k = *impl_;
  k.world.wait(k.send, "sending a gradient to the master");
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
  k.outgoing.resize(sizeof header + gradients.size_bytes() + state.size_bytes());
  std::memcpy(k.outgoing.data(), &header, sizeof header);
  std::memcpy(k.outgoing.data() + sizeof header, gradients.data(), gradients.size_bytes());
  std::memcpy(k.outgoing.data() + sizeof header + gradients.size_bytes(), state.data(),
              state.size_bytes());
  k.send = k.world.isend(k.outgoing.data(), k.outgoing.size(), 0, kGradientTag);
}

void AsyncWorker::finish() {
  Impl& k = *impl_;
  k.world.wait(k.send, "sending the last gradient");
  GradientHeader header;
  header.kind = kDone;
  k.outgoing.assign(reinterpret_cast<const unsigned char*>(&header),
                    reinterpret_cast<const unsigned char*>(&header) + sizeof header);
  k.send = k.world.isend(k.outgoing.data(), k.outgoing.size(), 0, kGradientTag);
  k.world.wait(k.send, "telling the master it is done");
}

}  // namespace mbkit::train
