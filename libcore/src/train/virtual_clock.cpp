#include "mbkit/train/virtual_clock.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "mbkit/train/comm_model.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

namespace {

constexpr int kPingTag = 21;

double non_negative(std::string_view field, const std::string& what) {
  const double value = parse_double(field, what);
  if (value < 0) usage_error(cat(what, ": '", field, "' is negative"));
  return value + 0.0;
}

std::string model_text(const ComputeModel& model) {
  return cat(short_duration(model.per_sample), "/sample + ", short_duration(model.per_batch),
             "/micro-batch",
             model.warmup > 0 ? cat(", first step + ", short_duration(model.warmup)) : "",
             model.loader > 0 ? cat(", loader CPU ", short_duration(model.loader), "/sample") : "");
}

std::string model_spec(const ComputeModel& model) {
  std::string spec = strprintf("%.17g,%.17g", model.per_sample, model.per_batch);
  if (model.warmup > 0 || model.loader > 0) spec += strprintf(",%.17g", model.warmup);
  if (model.loader > 0) spec += strprintf(",%.17g", model.loader);
  return spec;
}

}  // namespace

double CommModel::one_way(double bytes) const {
  return points.empty() ? alpha + beta * bytes : points.at(bytes);
}

double CommModel::one_way(double bytes, int from, int to) const {
  if (pair_ranks == 0) return one_way(bytes);
  MBKIT_CHECK(from >= 0 && to >= 0 && from < pair_ranks && to < pair_ranks, "CommModel: no pair ",
              from, "-", to, " in a model of ", pair_ranks, " ranks");
  const auto pair = static_cast<std::size_t>(from) * static_cast<std::size_t>(pair_ranks) +
                    static_cast<std::size_t>(to);
  if (!pair_points.empty() && !pair_points[pair].empty()) return pair_points[pair].at(bytes);
  return pair_alpha[pair] + pair_beta[pair] * bytes;
}

bool CommModel::prices_ps_round(int workers, int servers) const {
  return ps_round_ranks > 0 && servers <= 1 && ps_round_ranks == workers + 1;
}

// The round is timed as a whole; its halves are the gradient's way and the parameters'.
double CommModel::ps_message(std::uint64_t bytes, int workers, int servers, int from,
                             int to) const {
  if (!prices_ps_round(workers, servers)) return message(bytes, from, to);
  return ps_round_points.at(static_cast<double>(bytes)) / 2;
}

double CommModel::ps_message(std::uint64_t bytes, int workers, int servers) const {
  if (!prices_ps_round(workers, servers)) return message(bytes);
  return ps_round_points.at(static_cast<double>(bytes)) / 2;
}

double CommModel::RoundAtSize::step(double busy) const {
  const double past = busy - slack;
  if (past <= 0) return round;
  return round + (tick > 0 ? tick * std::ceil(past / tick) : past);
}

namespace {
const CommModel::RoundAtSize* round_at(const std::vector<CommModel::RoundAtSize>& rounds,
                                       std::uint64_t bytes) {
  for (const CommModel::RoundAtSize& at : rounds) {
    if (at.bytes == static_cast<double>(bytes)) return &at;
  }
  return nullptr;
}

bool any_tick(const std::vector<CommModel::RoundAtSize>& rounds) {
  return std::any_of(rounds.begin(), rounds.end(),
                     [](const CommModel::RoundAtSize& at) { return at.tick > 0; });
}

std::string busy_text(const std::vector<CommModel::RoundAtSize>& rounds) {
  return rounds.empty()     ? ""
         : any_tick(rounds) ? ", some sizes in ticks (busy passes)"
                            : ", busy passes";
}

std::string busy_spec(const std::vector<CommModel::RoundAtSize>& rounds) {
  if (rounds.empty()) return "";
  std::string text = " busy";
  for (const CommModel::RoundAtSize& at : rounds) {
    text += strprintf(" %.17g:%.17g:%.17g", at.bytes, at.slack, at.tick);
  }
  return text;
}
}  // namespace

const CommModel::RoundAtSize* CommModel::ps_round_at(std::uint64_t bytes, int workers,
                                                     int servers) const {
  return prices_ps_round(workers, servers) ? round_at(ps_round_busy, bytes) : nullptr;
}

bool CommModel::ps_round_ticks() const {
  return any_tick(ps_round_busy);
}

const CommModel::RoundAtSize* CommModel::allreduce_at(std::uint64_t bytes, int ranks) const {
  if (ranks < 2 || allreduce_ranks != ranks || allreduce_points.empty()) return nullptr;
  return round_at(allreduce_busy, bytes);
}

bool CommModel::allreduce_ticks() const {
  return any_tick(allreduce_busy);
}

double CommModel::streamed(std::uint64_t bytes) const {
  if (!streams) return message(bytes);
  const auto size = static_cast<double>(bytes);
  return stream_points.empty() ? stream_alpha + stream_beta * size : stream_points.at(size);
}

double CommModel::async_cycle(std::uint64_t bytes) const {
  return async_cycles ? async_points.at(static_cast<double>(bytes)) : streamed(bytes);
}

double CommModel::async_sender(std::uint64_t bytes) const {
  if (!async_cycles) return 0;
  const auto size = static_cast<double>(bytes);
  return std::max(0.0, async_busy_points.at(size) - async_points.at(size));
}

double CommModel::allreduce(std::uint64_t bytes, int ranks) const {
  if (ranks < 2) return 0;
  const auto size = static_cast<double>(bytes);
  if (allreduce_ranks == ranks) {
    return allreduce_points.empty() ? allreduce_alpha + allreduce_beta * size
                                    : allreduce_points.at(size);
  }
  const double messages = 2.0 * (ranks - 1);
  // A ring message of bytes / ranks; the line's as beta * bytes / ranks (the bits it always had).
  const auto ring_message = [&](double line_alpha, double line_beta, const MeasuredTimes& times) {
    return times.empty() ? line_alpha + line_beta * size / ranks : times.at(size / ranks);
  };
  if (pair_ranks == 0) return messages * ring_message(alpha, beta, points);
  MBKIT_CHECK(ranks <= pair_ranks, "CommModel: a ring of ", ranks, " ranks in a model of ",
              pair_ranks);
  // Every rank sends to the next at once: a step of the ring lasts as long as its slowest link.
  const MeasuredTimes none;
  double slowest = 0;
  for (int r = 0; r < ranks; ++r) {
    const auto pair = static_cast<std::size_t>(r) * static_cast<std::size_t>(pair_ranks) +
                      static_cast<std::size_t>((r + 1) % ranks);
    slowest = std::max(slowest, ring_message(pair_alpha[pair], pair_beta[pair],
                                             pair_points.empty() ? none : pair_points[pair]));
  }
  return messages * slowest;
}

std::string CommModel::describe() const {
  const bool pair_interpolates =
      std::any_of(pair_points.begin(), pair_points.end(),
                  [](const MeasuredTimes& times) { return !times.empty(); });
  return cat(
      "alpha ", short_duration(alpha), ", beta ", strprintf("%.3g", beta * 1e9), " ns/B (",
      strprintf("%.3g", beta > 0 ? 1e-9 / beta : 0.0), " GB/s)",
      measured ? cat(", measured", measured_on.empty() ? "" : cat(" on ", measured_on)) : "",
      file.empty() ? "" : cat(", from ", file), pair_ranks > 0 ? ", per pair of ranks" : "",
      // The points price the messages; alpha and beta above are then the file's line, shown.
      points.empty() && !pair_interpolates
          ? ""
          : cat(", ",
                !points.empty() ? points.describe() : "interpolating each pair's measured sizes",
                " (alpha and beta: the fitted line)"),
      allreduce_ranks > 0
          ? cat("; allreduce of ", allreduce_ranks, " ranks ",
                allreduce_points.empty() ? "" : cat(allreduce_points.describe(), ", fitted "),
                short_duration(allreduce_alpha), " + ", strprintf("%.3g", allreduce_beta * 1e9),
                " ns/B", allreduce_points.empty() ? " (fitted)" : "", busy_text(allreduce_busy))
          : "",
      streams
          ? cat("; streamed messages ",
                stream_points.empty() ? "" : cat(stream_points.describe(), ", fitted "),
                short_duration(stream_alpha), " + ", strprintf("%.3g", stream_beta * 1e9), " ns/B")
          : "",
      async_cycles ? cat("; async cycle ", async_points.describe(), " (idle and busy worker)") : "",
      ps_round_ranks > 0
          ? cat("; ps round of ", ps_round_ranks, " ranks ", ps_round_points.describe(),
                ", fitted ", short_duration(ps_round_alpha), " + ",
                strprintf("%.3g", ps_round_beta * 1e9), " ns/B", busy_text(ps_round_busy))
          : "");
}

std::string CommModel::spec() const {
  std::string text = strprintf("%.17g,%.17g", alpha, beta) + points.spec();
  for (int i = 0; i < pair_ranks; ++i) {
    for (int j = i + 1; j < pair_ranks; ++j) {
      const auto pair = static_cast<std::size_t>(i) * static_cast<std::size_t>(pair_ranks) +
                        static_cast<std::size_t>(j);
      text += strprintf(" %d-%d=%.17g,%.17g", i, j, pair_alpha[pair], pair_beta[pair]);
      if (!pair_points.empty()) text += pair_points[pair].spec();
    }
  }
  if (allreduce_ranks > 0) {
    text +=
        strprintf(" allreduce %d=%.17g,%.17g", allreduce_ranks, allreduce_alpha, allreduce_beta) +
        allreduce_points.spec() + busy_spec(allreduce_busy);
  }
  if (streams) {
    text += strprintf(" stream=%.17g,%.17g", stream_alpha, stream_beta) + stream_points.spec();
  }
  if (async_cycles) text += " async" + async_points.spec() + " busy" + async_busy_points.spec();
  if (ps_round_ranks > 0) {
    text += strprintf(" ps_round %d=%.17g,%.17g", ps_round_ranks, ps_round_alpha, ps_round_beta) +
            ps_round_points.spec();
    text += busy_spec(ps_round_busy);
  }
  return text;
}

std::optional<CommModel> parse_comm_model(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text.find(',') == std::string::npos) {
    if (!fs::exists(text)) {
      usage_error(cat("--comm-model: '", text,
                      "' is not ALPHA,BETA (seconds per message, seconds per byte) nor an "
                      "existing file of mb-bench-bandwidth --fit --comm-model"));
    }
    return comm_model_of(read_comm_model(text), text);
  }
  const auto fields = split(text, ',');
  if (fields.size() != 2) {
    usage_error(cat("--comm-model: '", text,
                    "' is not ALPHA,BETA (seconds per message, seconds per byte)"));
  }
  CommModel model;
  model.alpha = non_negative(fields[0], "--comm-model ALPHA");
  model.beta = non_negative(fields[1], "--comm-model BETA");
  return model;
}

namespace {

constexpr int kRounds = 15;  // measured rounds, after one to warm up
// The collectives' rounds: their time on a loaded machine swings from round to round (a
// process switch per handshake), so their median takes twice as many.
constexpr int kCollectiveRounds = 31;

double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// One-way time of `size` bytes between ranks 0 and 1 (both call it): round trips, halved.
double ping_pong(const comm::World& world, std::size_t size) {
  const int peer = 1 - world.rank();
  std::vector<unsigned char> buffer(std::max<std::size_t>(size, 8), 0);
  std::vector<double> trips;
  for (int round = 0; round <= kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int leg = 0; leg < 2; ++leg) {
      const bool sends = (leg == 0) == (world.rank() == 0);
      comm::Request request = sends ? world.isend(buffer.data(), size, peer, kPingTag)
                                    : world.irecv(buffer.data(), size, peer, kPingTag);
      world.wait(request, "measuring the communication model");
    }
    const std::chrono::duration<double> trip = std::chrono::steady_clock::now() - start;
    if (round > 0) trips.push_back(trip.count());
  }
  return median(trips) / 2;
}

// A synchronous ps step's messages of `floats` values, as SyncExchange sends them: after the
// workers' `idle` time (their round) the master spins, yields or sleeps between polls as it does
// in the run's steps (comm::World::wait_until), and wakes as late; the gradient
// reaches it by rendezvous + reduce, the parameters come back by rendezvous + broadcast. Rank
// 1's mean of the two ways (other ranks: 0).
double ps_exchange(const comm::World& world, std::size_t floats, double idle) {
  const std::string what = "measuring the communication model";
  std::vector<float> values(floats, 0.0f);
  std::vector<double> ways;
  for (int round = 0; round <= kCollectiveRounds; ++round) {
    world.rendezvous(what);
    // From the planned end of the idle time: a rank that slept gets its core back late on a
    // loaded machine, and that lateness is the step's as much as the messages' are.
    const auto start = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(idle));
    if (world.rank() != 0) std::this_thread::sleep_until(start);
    world.rendezvous(what);
    world.reduce_sum(values, 0);
    world.rendezvous(what);
    world.broadcast(values, 0);
    const std::chrono::duration<double> both = std::chrono::steady_clock::now() - start;
    if (round > 0) ways.push_back(both.count() / 2);
  }
  return world.rank() == 1 ? median(ways) : 0.0;
}

// An allreduce of `floats` values over the world (after a rendezvous), as the message time
// CommModel::allreduce divides it into: 1 / (2 (R - 1)) of it.
double allreduce_exchange(const comm::World& world, std::size_t floats) {
  std::vector<float> values(floats, 0.0f);
  std::vector<double> times;
  for (int round = 0; round <= kCollectiveRounds; ++round) {
    world.rendezvous("measuring the communication model");
    const auto start = std::chrono::steady_clock::now();
    world.allreduce_sum(values);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (round > 0) times.push_back(took.count());
  }
  return median(times) / (2.0 * (world.size() - 1));
}

}  // namespace

double measure_idle_for(double round_seconds) {
  return std::clamp(round_seconds, 0.0, kMeasureIdle);
}

CommModel measure_comm_model(const comm::World& world, std::uint64_t bytes, MeasuredExchange how,
                             double idle) {
  const std::uint64_t large = std::max<std::uint64_t>(bytes, 8);
  std::vector<double> result(2, 0.0);  // one message of 8 bytes, one of `large`
  int source = 0;                      // the rank whose times count
  std::string measured_on = "ping-pong";
  if (world.size() >= 2 && how == MeasuredExchange::kParameterServer) {
    source = 1;
    measured_on = cat("the ps exchange (the workers idle ", short_duration(idle), ")");
    result = {ps_exchange(world, 2, idle),
              ps_exchange(world, static_cast<std::size_t>(large / 4), idle)};
  } else if (world.size() >= 2 && how == MeasuredExchange::kAllreduce) {
    measured_on = "allreduce";
    result = {allreduce_exchange(world, 2),
              allreduce_exchange(world, static_cast<std::size_t>(large / 4))};
  } else if (world.size() >= 2 && world.rank() <= 1) {
    result = {ping_pong(world, 8), ping_pong(world, static_cast<std::size_t>(large))};
  }
  std::vector<std::uint8_t> raw(sizeof(double) * 2);
  std::memcpy(raw.data(), result.data(), raw.size());
  world.broadcast(std::span<std::uint8_t>(raw), source);
  std::memcpy(result.data(), raw.data(), raw.size());
  // An allreduce's message carries 1/R of the gradient: its cost per byte is R times more.
  const double per_byte_scale = how == MeasuredExchange::kAllreduce ? world.size() : 1.0;
  CommModel model{result[0],
                  bytes > 8 ? std::max(0.0, (result[1] - result[0]) /
                                                static_cast<double>(bytes - 8) * per_byte_scale)
                            : 0.0,
                  true};
  model.measured_on = measured_on;
  return model;
}

std::optional<ComputeModel> ComputeModels::for_rank(int rank) const {
  std::optional<ComputeModel> model = all;
  for (const auto& [range, entry] : ranges) {
    if (rank >= range.first && rank <= range.second) model = entry;
  }
  return model;
}

void ComputeModels::check_ranks(int world_size, int first_worker) const {
  if (empty()) return;
  for (const auto& [range, entry] : ranges) {
    if (range.second >= world_size) {
      usage_error(cat("--compute-model: rank ", range.second, " does not exist in a run of ",
                      world_size, " rank", world_size > 1 ? "s" : ""));
    }
  }
  for (int rank = first_worker; rank < world_size; ++rank) {
    if (!for_rank(rank)) {
      usage_error(cat("--compute-model: rank ", rank,
                      " has no model; give one for every worker (an entry A,B covers all)"));
    }
  }
}

std::string ComputeModels::describe() const {
  std::vector<std::string> parts;
  if (all) parts.push_back(model_text(*all));
  for (const auto& [range, entry] : ranges) {
    const std::string ranks =
        range.first == range.second ? cat(range.first) : cat(range.first, "-", range.second);
    parts.push_back(cat("rank ", ranks, ": ", model_text(entry)));
  }
  return parts.empty() ? "measured CPU time" : join(parts, "; ");
}

std::string ComputeModels::spec() const {
  std::vector<std::string> parts;
  if (all) parts.push_back(model_spec(*all));
  for (const auto& [range, entry] : ranges) {
    const std::string ranks =
        range.first == range.second ? cat(range.first) : cat(range.first, "-", range.second);
    parts.push_back(cat(ranks, "=", model_spec(entry)));
  }
  return join(parts, " ");
}

ComputeModels parse_compute_models(const std::vector<std::string>& entries) {
  ComputeModels models;
  for (const auto& entry : entries) {
    const std::string what = cat("--compute-model '", entry, "'");
    std::string values = entry;
    std::optional<std::pair<int, int>> range;
    if (const auto equals = entry.find('='); equals != std::string::npos) {
      const std::string ranks = entry.substr(0, equals);
      values = entry.substr(equals + 1);
      const auto dash = ranks.find('-');
      const auto first = parse_int(ranks.substr(0, dash), what + " RANK");
      const auto last =
          dash == std::string::npos ? first : parse_int(ranks.substr(dash + 1), what + " RANK");
      if (first < 0 || last < first || last > std::numeric_limits<int>::max()) {
        usage_error(cat(what, ": '", ranks, "' is not RANK or FIRST-LAST"));
      }
      range = std::pair<int, int>(static_cast<int>(first), static_cast<int>(last));
    }
    const auto fields = split(values, ',');
    if (fields.size() < 2 || fields.size() > 4) {
      usage_error(cat(what,
                      ": not [RANKS=]A,B[,W[,L]] (seconds per sample, seconds per micro-batch, "
                      "seconds a worker's first step computes more, the loader thread's CPU "
                      "seconds per sample)"));
    }
    const ComputeModel model{non_negative(fields[0], what + " A"),
                             non_negative(fields[1], what + " B"),
                             fields.size() >= 3 ? non_negative(fields[2], what + " W") : 0.0,
                             fields.size() == 4 ? non_negative(fields[3], what + " L") : 0.0};
    if (range) {
      models.ranges.push_back({*range, model});
    } else {
      models.all = model;
    }
  }
  return models;
}

SyncStepTime sync_step_time(const std::vector<SyncWorkerTime>& workers, bool parameter_server,
                            const CommModel& comm, std::uint64_t bytes, double update,
                            int servers) {
  SyncStepTime time;
  double last_ready = 0;
  for (const auto& w : workers) {
    if (w.used) last_ready = std::max(last_ready, w.delay + w.compute);
  }
  if (parameter_server) {
    // Each worker's message on its own link (one model for all: the same for every worker,
    // and then gather = last_ready + message exactly, as rounding is monotonic).
    double slowest_back = 0;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      const int rank = static_cast<int>(i) + servers;
      double link = 0;
      for (int server = 0; server < std::max(servers, 1); ++server) {
        link = std::max(
            link, comm.ps_message(bytes, static_cast<int>(workers.size()), servers, rank, server));
      }
      // A dropped worker (StepSelection) sends nothing; it only receives the parameters.
      if (workers[i].used) {
        time.gather = std::max(time.gather, workers[i].delay + workers[i].compute + link);
      }
      slowest_back = std::max(slowest_back, link);
      time.sends.push_back(workers[i].used ? 2 * link : link);
      time.receives.push_back(link);
    }
    time.end = time.gather + update + slowest_back;
    // Where the round was measured at this size with busy passes, the step is the round up
    // to its slack, then whole ticks (the round, its update included, as one: its halves
    // above keep pricing the sends).
    time.send = 2 * slowest_back;
    if (const auto* at = comm.ps_round_at(bytes, static_cast<int>(workers.size()), servers)) {
      time.end = std::max(time.gather, at->step(last_ready + update));
      // A worker's round overlaps the compute it hides: its send lasts to the end at most.
      for (std::size_t i = 0; i < workers.size(); ++i) {
        if (!workers[i].used) continue;
        const double ready = workers[i].delay + workers[i].compute;
        time.sends[i] = std::min(time.sends[i], time.end - ready);
      }
      time.send = std::min(time.send, time.end - last_ready);
    }
  } else {
    const double exchange = comm.allreduce(bytes, static_cast<int>(workers.size()));
    time.gather = last_ready + exchange;
    time.send = exchange;
    time.sends.assign(workers.size(), exchange);
    time.receives.assign(workers.size(), 0.0);
    // Measured at this size with busy passes: the step up to the sum, as the ps round's (the
    // update comes after it on every rank); a send overlaps the compute hidden.
    if (const auto* at = comm.allreduce_at(bytes, static_cast<int>(workers.size()))) {
      time.gather = at->step(last_ready);
      for (std::size_t i = 0; i < workers.size(); ++i) {
        if (!workers[i].used) continue;
        time.sends[i] = std::min(exchange, time.gather - workers[i].delay - workers[i].compute);
      }
      time.send = std::min(exchange, time.gather - last_ready);
    }
    time.end = time.gather + update;
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto& w = workers[i];
    time.wait.push_back(w.used ? std::max(0.0, time.end - w.delay - w.compute - time.sends[i])
                               : 0.0);
  }
  return time;
}

VirtualArrivals::VirtualArrivals(int workers, double message_seconds, double sender_seconds)
    : state_(static_cast<std::size_t>(workers), kComputing),
      blocked_clock_(static_cast<std::size_t>(workers), 0),
      start_(static_cast<std::size_t>(workers), 0.0),
      arrival_(static_cast<std::size_t>(workers), 0.0),
      delay_(static_cast<std::size_t>(workers), 0.0),
      link_free_(static_cast<std::size_t>(workers), 0.0),
      message_(message_seconds),
      sender_(sender_seconds) {
  for (int w = 0; w < workers; ++w) computing_.emplace(message_, w);
}

void VirtualArrivals::leave_queue(std::size_t i) {
  const int w = static_cast<int>(i);
  if (state_[i] == kComputing) computing_.erase({start_[i] + message_, w});
  if (state_[i] == kWaiting) waiting_.erase({arrival_[i], w});
  if (state_[i] == kBlocked) blocked_.erase({blocked_clock_[i], w});
}

void VirtualArrivals::start(int w, double start) {
  const auto i = static_cast<std::size_t>(w);
  leave_queue(i);
  state_[i] = kComputing;
  start_[i] = start;
  computing_.emplace(start + message_, w);
}

double VirtualArrivals::arrived(int w, double ready_after, double message_delay) {
  const auto i = static_cast<std::size_t>(w);
  MBKIT_CHECK(state_[i] == kComputing, "VirtualArrivals: a gradient from worker ", w,
              " not computing");
  leave_queue(i);
  state_[i] = kWaiting;
  delay_[i] = message_delay;
  // The worker's send first waits for its previous one (AsyncWorker::send): a gradient that
  // is ready before the previous is through leaves when the link is free. The send's own CPU
  // comes after the compute on the worker's core (its message leaves no sooner than
  // start + message, the lower bound computing_ keeps).
  const double sent = std::max(start_[i] + ready_after + sender_, link_free_[i]);
  link_free_[i] = sent + message_;
  arrival_[i] = sent + message_ + message_delay;
  waiting_.emplace(arrival_[i], w);
  return arrival_[i];
}

void VirtualArrivals::retire(int w) {
  const auto i = static_cast<std::size_t>(w);
  leave_queue(i);
  state_[i] = kRetired;
}

// A blocked worker starts only after a gradient taken later (a message after it), so it never
// arrives before a gradient next() names: it is left out of next()'s and none_until()'s bounds.
void VirtualArrivals::block(int w, std::int64_t clock) {
  const auto i = static_cast<std::size_t>(w);
  MBKIT_CHECK(state_[i] == kComputing, "VirtualArrivals: worker ", w,
              " blocked while not computing");
  leave_queue(i);
  state_[i] = kBlocked;
  blocked_clock_[i] = clock;
  blocked_.emplace(clock, w);
}

std::optional<int> VirtualArrivals::next() const {
  if (waiting_.empty()) return std::nullopt;
  const auto [arrival, best] = *waiting_.begin();  // the earliest, ties by worker index
  if (computing_.empty()) return best;
  // A computing worker arrives at start + (delay + compute > 0) + message: strictly later than
  // its bound, or at it only with a zero-cost round, which then goes by worker index. The
  // earliest bound (the lowest index among equal ones) decides for all.
  const auto [bound, worker] = *computing_.begin();
  if (bound < arrival || (bound == arrival && worker < best)) return std::nullopt;
  return best;
}

double VirtualArrivals::take(int w) {
  const auto i = static_cast<std::size_t>(w);
  MBKIT_CHECK(state_[i] == kWaiting, "VirtualArrivals: worker ", w, "'s gradient did not arrive");
  leave_queue(i);
  state_[i] = kComputing;
  start_[i] = arrival_[i] - message_ - delay_[i];
  computing_.emplace(start_[i] + message_, w);
  return arrival_[i];
}

bool VirtualArrivals::none_until(double time) const {
  if (!waiting_.empty() && waiting_.begin()->first <= time) return false;
  if (!computing_.empty() && computing_.begin()->first <= time) return false;
  return true;
}

std::int64_t VirtualArrivals::publish(double time) {
  MBKIT_CHECK(published_.empty() || time >= published_.back(), "VirtualArrivals: published at ",
              time, " after ", published_.back());
  published_.push_back(time);
  return first_kept_ + static_cast<std::int64_t>(published_.size()) - 1;
}

std::int64_t VirtualArrivals::held_at(double start) const {
  MBKIT_CHECK(!published_.empty(), "VirtualArrivals: nothing published");
  // The times are in order, and so are time + message (rounding is monotonic): the sets that
  // reached the worker by `start` are a prefix, and it holds the prefix's last.
  const auto reached = std::partition_point(published_.begin(), published_.end(),
                                            [&](double time) { return time + message_ <= start; });
  const auto newest = std::max<std::ptrdiff_t>(reached - published_.begin() - 1, 0);
  return first_kept_ + static_cast<std::int64_t>(newest);  // at worst the oldest kept
}

std::int64_t VirtualArrivals::forget_before(double start) {
  if (published_.empty()) return 0;
  const std::int64_t keep_from = held_at(start);
  const std::int64_t forgotten = keep_from - first_kept_;
  for (std::int64_t i = 0; i < forgotten; ++i) published_.pop_front();
  first_kept_ = keep_from;
  return forgotten;
}

}  // namespace mbkit::train
