#include "mbkit/bench/bandwidth_fit.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "mbkit/util/machine.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::bench {
namespace {

constexpr int kPingPongTag = 23;
constexpr int kStreamTag = 24;
constexpr int kStreamAckTag = 25;

// The byte at `i` of a message of `size` bytes: differs between sizes and along the message.
std::uint8_t pattern(std::size_t i, std::size_t size) {
  return static_cast<std::uint8_t>((i * 7 + size) & 0xff);
}

// One message each way between this rank and `peer`; `first` sends first.
void round_trip(const comm::World& world, bool first, int peer, std::vector<std::uint8_t>& out,
                std::vector<std::uint8_t>& in, std::size_t size) {
  for (int leg = 0; leg < 2; ++leg) {
    comm::Request request =
        (leg == 0) == first ? world.isend(first ? out.data() : in.data(), size, peer, kPingPongTag)
                            : world.irecv(in.data(), size, peer, kPingPongTag);
    world.wait(request, "timing messages between two ranks (--fit)");
  }
}

struct PairTimes {
  std::vector<double> median, fastest, slowest;  // one-way seconds, per size
  std::vector<double> wrong;                     // bytes that came back altered, per size
};

PairTimes time_pair(comm::World& world, int a, int b, const std::vector<std::size_t>& sizes,
                    const MeasureOptions& options) {
  const std::size_t n = sizes.size();
  PairTimes times{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
                  std::vector<double>(n)};
  if (world.rank() == a || world.rank() == b) {
    const bool first = world.rank() == a;
    const int peer = first ? b : a;
    const comm::WaitMode mode = world.wait_mode();
    world.set_wait_mode(comm::WaitMode::kSpin);
    std::vector<std::uint8_t> out, in;
    for (std::size_t s = 0; s < n; ++s) {
      const std::size_t size = sizes[s];
      out.resize(size);
      in.assign(size, 0);
      for (std::size_t i = 0; i < size; ++i) out[i] = pattern(i, size);
      for (int i = 0; i < options.warmup_iters; ++i) round_trip(world, first, peer, out, in, size);
      std::vector<double> one_way;
      for (int i = 0; i < options.iters_at(size); ++i) {
        const auto start = std::chrono::steady_clock::now();
        round_trip(world, first, peer, out, in, size);
        const std::chrono::duration<double> trip = std::chrono::steady_clock::now() - start;
        one_way.push_back(trip.count() / 2);
      }
      std::sort(one_way.begin(), one_way.end());
      times.median[s] = median_of_sorted(one_way);
      times.fastest[s] = one_way.front();
      times.slowest[s] = one_way.back();
      if (first && options.check) {
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < size; ++i) wrong += in[i] != pattern(i, size) ? 1 : 0;
        if (options.corrupt && size > 0) ++wrong;
        times.wrong[s] = static_cast<double>(wrong);
      }
    }
    world.set_wait_mode(mode);
  }
  // The lower rank's times, to every rank (doubles travel as their bits).
  std::vector<double> all;
  for (const auto* part : {&times.median, &times.fastest, &times.slowest, &times.wrong}) {
    all.insert(all.end(), part->begin(), part->end());
  }
  std::vector<std::uint8_t> raw(all.size() * sizeof(double));
  std::memcpy(raw.data(), all.data(), raw.size());
  world.broadcast(std::span<std::uint8_t>(raw), a);
  std::memcpy(all.data(), raw.data(), raw.size());
  for (std::size_t s = 0; s < n; ++s) {
    times.median[s] = all[s];
    times.fastest[s] = all[n + s];
    times.slowest[s] = all[2 * n + s];
    times.wrong[s] = all[3 * n + s];
  }
  return times;
}

// One window of the stream: `sender` posts `window` sends of `size` bytes back to back and
// waits for them and the acknowledgement; the other rank keeps two receives posted (`in` holds
// two buffers: pending receives may not share one), so that each message finds its receive
// posted, as the asynchronous master's gradient finds the master's, and acknowledges the last.
// The sender's seconds.
double stream_window_time(const comm::World& world, bool sender, int peer,
                          const std::vector<std::uint8_t>& out, std::vector<std::uint8_t>& in,
                          std::size_t size, int window) {
  const std::string what = "streaming messages between two ranks (--fit)";
  std::uint8_t ack = 1;
  const auto start = std::chrono::steady_clock::now();
  if (sender) {
    std::vector<comm::Request> sends;
    sends.reserve(static_cast<std::size_t>(window));
    for (int i = 0; i < window; ++i)
      sends.push_back(world.isend(out.data(), size, peer, kStreamTag));
    for (comm::Request& send : sends) world.wait(send, what);
    comm::Request acknowledgement = world.irecv(&ack, 1, peer, kStreamAckTag);
    world.wait(acknowledgement, what);
  } else {
    const auto slot = [&](int i) { return in.data() + static_cast<std::size_t>(i % 2) * size; };
    comm::Request posted[2];
    for (int i = 0; i < std::min(window, 2); ++i) {
      posted[i] = world.irecv(slot(i), size, peer, kStreamTag);
    }
    for (int i = 0; i < window; ++i) {
      world.wait(posted[i % 2], what);
      if (i + 2 < window) posted[i % 2] = world.irecv(slot(i), size, peer, kStreamTag);
    }
    comm::Request acknowledgement = world.isend(&ack, 1, peer, kStreamAckTag);
    world.wait(acknowledgement, what);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void measure_stream(comm::World& world, const std::vector<std::size_t>& sizes,
                    const MeasureOptions& options, PingPong& ping_pong) {
  train::CommStreamRecord& record = ping_pong.records.stream;
  record = {};
  record.window = train::stream_window(sizes.front());
  const std::size_t n = sizes.size();
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      world.barrier();  // one pair at a time, as the ping-pong
      // Per size: the median, fastest and slowest seconds a message, and the wrong bytes.
      std::vector<double> times(4 * n, 0.0);
      if (world.rank() == a || world.rank() == b) {
        const bool sender = world.rank() == a;
        const int peer = sender ? b : a;
        const comm::WaitMode mode = world.wait_mode();
        world.set_wait_mode(comm::WaitMode::kSpin);
        for (std::size_t s = 0; s < n; ++s) {
          const std::size_t size = sizes[s];
          const int window = train::stream_window(size);
          std::vector<std::uint8_t> out(sender ? size : 0), in;
          for (std::size_t i = 0; i < out.size(); ++i) out[i] = pattern(i, size);
          if (!sender) in.assign(2 * size, 0);
          for (int i = 0; i < options.warmup_iters; ++i) {
            stream_window_time(world, sender, peer, out, in, size, window);
          }
          std::vector<double> per_message;
          for (int i = 0; i < options.iters_at(size); ++i) {
            per_message.push_back(stream_window_time(world, sender, peer, out, in, size, window) /
                                  window);
          }
          std::sort(per_message.begin(), per_message.end());
          times[s] = median_of_sorted(per_message);
          times[n + s] = per_message.front();
          times[2 * n + s] = per_message.back();
          if (!sender && options.check) {
            std::int64_t wrong = 0;
            // The last message went to slot (window - 1) % 2.
            const std::uint8_t* last =
                in.data() + static_cast<std::size_t>((window - 1) % 2) * size;
            for (std::size_t i = 0; i < size; ++i) wrong += last[i] != pattern(i, size) ? 1 : 0;
            if (options.corrupt) ++wrong;
            times[3 * n + s] = static_cast<double>(wrong);
          }
        }
        world.set_wait_mode(mode);
      }
      // The sender's times and the receiver's check, to every rank (doubles as their bits).
      std::vector<std::uint8_t> raw(times.size() * sizeof(double));
      std::memcpy(raw.data(), times.data(), raw.size());
      world.broadcast(std::span<std::uint8_t>(raw.data(), 3 * n * sizeof(double)), a);
      world.broadcast(
          std::span<std::uint8_t>(raw.data() + 3 * n * sizeof(double), n * sizeof(double)), b);
      std::memcpy(times.data(), raw.data(), raw.size());
      for (std::size_t s = 0; s < n; ++s) {
        Row row;
        row.op = cat("stream-", a, "-", b);
        row.bytes = sizes[s];
        row.count = sizes[s];
        row.type = "byte";
        row.avg_us = times[s] * 1e6;
        row.min_us = times[n + s] * 1e6;
        row.max_us = times[2 * n + s] * 1e6;
        row.algbw_gbps = static_cast<double>(sizes[s]) / times[s] * 1e-9;
        row.busbw_gbps = row.algbw_gbps;
        row.wrong = static_cast<std::int64_t>(times[3 * n + s]);
        ping_pong.rows.push_back(row);
        record.bytes.push_back(static_cast<double>(sizes[s]));
        record.seconds.push_back(times[s]);
      }
    }
  }
}

PingPong measure_ping_pong(comm::World& world, const std::vector<std::size_t>& sizes,
                           const MeasureOptions& options) {
  PingPong result;
  train::CommModelRecords& records = result.records;
  records.ranks = world.size();
  records.hosts = world.all_gather(world.host());
  records.cpu_models = world.all_gather(util::cpu_model_name());
  records.library_versions = library_versions();
  records.created = utc_timestamp();
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      world.barrier();  // one pair at a time: the others' messages do not share its links
      const PairTimes times = time_pair(world, a, b, sizes, options);
      train::CommPairRecord pair;
      pair.rank_a = a;
      pair.rank_b = b;
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        Row row;
        row.op = cat("pingpong-", a, "-", b);
        row.bytes = sizes[s];
        row.count = sizes[s];
        row.type = "byte";
        row.avg_us = times.median[s] * 1e6;
        row.min_us = times.fastest[s] * 1e6;
        row.max_us = times.slowest[s] * 1e6;
        row.algbw_gbps = static_cast<double>(sizes[s]) / times.median[s] * 1e-9;
        row.busbw_gbps = row.algbw_gbps;
        row.wrong = static_cast<std::int64_t>(times.wrong[s]);
        result.rows.push_back(row);
        pair.bytes.push_back(static_cast<double>(sizes[s]));
        pair.seconds.push_back(times.median[s]);
      }
      records.pairs.push_back(std::move(pair));
    }
  }
  return result;
}

namespace {
// Per size, the compute a step hides and the tick it then grows by (the busy passes).
void write_slack(std::ostream& out, const char* exchange, const std::vector<double>& bytes,
                 const std::vector<double>& slack, const std::vector<double>& tick) {
  if (slack.empty()) return;
  std::string sizes;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    sizes += strprintf(" %.0f:%.3g", bytes[i], slack[i] * 1e3);
    if (tick[i] > 0) sizes += strprintf("+%.3g", tick[i] * 1e3);
  }
  out << "# " << exchange << "'s slack (compute a step hides, ms; +tick the step then grows by) at"
      << sizes << "\n";
}
}  // namespace

void write_comm_fits(std::ostream& out, const train::CommModelRecords& records) {
  out << "# message model time = alpha + beta * bytes, least squares over the median one-way "
         "times:\n";
  const auto line = [&](const std::string& what, const train::CommModelFit& fit,
                        std::size_t points) {
    out << strprintf(
        "# %s: alpha = %.6g s (+- %.2g), beta = %.6g s/B (+- %.2g; %.3g GB/s), r^2 = %.6f (%zu "
        "points)\n",
        what.c_str(), fit.alpha, fit.alpha_stderr, fit.beta, fit.beta_stderr,
        fit.beta > 0 ? 1e-9 / fit.beta : 0.0, fit.r_squared, points);
  };
  std::size_t points = 0;
  for (const auto& pair : records.pairs) {
    line(cat("ranks ", pair.rank_a, "-", pair.rank_b), pair.fit, pair.bytes.size());
    points += pair.bytes.size();
  }
  line("all pairs", records.all, points);
  out << (records.pairs.size() < 2 ? "# one pair: one model\n"
          : records.per_pair       ? "# the pairs differ: a model per pair\n"
                                   : "# the pairs agree: one model for all\n");
  out << "# --comm-model FILE: the trainers price a message of n bytes by the line, a streamed "
         "message by interpolating the stream's medians, --async by the async cycle's, a "
         "synchronous ps step of as many ranks by the ps round's, and the "
         "allreduce by interpolating its medians (time_us) linearly in bytes between the "
         "measured sizes around n\n";
  if (const train::CommStreamRecord& stream = records.stream; stream.window > 0) {
    line(cat("streamed messages (windows of up to ", stream.window, "), all pairs"), stream.fit,
         stream.bytes.size());
    const auto largest = static_cast<std::size_t>(
        std::max_element(stream.bytes.begin(), stream.bytes.end()) - stream.bytes.begin());
    const double bytes = stream.bytes[largest];
    out << strprintf(
        "# streamed message of %.0f bytes: measured %.6g s, fitted %.6g s, the line %.6g s\n",
        bytes, stream.seconds[largest], stream.fit.alpha + stream.fit.beta * bytes,
        records.all.alpha + records.all.beta * bytes);
  }
  if (const train::CommAsyncRecord& cycle = records.async_cycle; cycle.window > 0) {
    line(cat("async cycle (windows of up to ", cycle.window, " gradients), all pairs"), cycle.fit,
         cycle.bytes.size());
    const auto largest = static_cast<std::size_t>(
        std::max_element(cycle.bytes.begin(), cycle.bytes.end()) - cycle.bytes.begin());
    out << strprintf(
        "# async cycle of %.0f bytes: %.6g s a gradient with the worker idle, %.6g s busy as "
        "long (the messages' CPU on the worker: %.6g s)\n",
        cycle.bytes[largest], cycle.seconds[largest], cycle.busy_seconds[largest],
        std::max(0.0, cycle.busy_seconds[largest] - cycle.seconds[largest]));
  }
  if (const train::CommPsRoundRecord& round = records.ps_round;
      round.ranks > 0 && !round.bytes.empty()) {
    line(cat("ps round of ", round.ranks, " ranks"), round.fit, round.bytes.size());
    const auto largest = static_cast<std::size_t>(
        std::max_element(round.bytes.begin(), round.bytes.end()) - round.bytes.begin());
    const double bytes = round.bytes[largest];
    out << strprintf("# ps round of %.0f bytes: measured %.6g s, two messages of the line %.6g s\n",
                     bytes, round.seconds[largest],
                     2 * (records.all.alpha + records.all.beta * bytes));
    write_slack(out, "ps round", round.bytes, round.slack, round.tick);
  }
  const train::CommAllreduceRecord& allreduce = records.allreduce;
  if (allreduce.ranks == 0 || allreduce.bytes.empty()) return;
  line(cat("allreduce of ", allreduce.ranks, " ranks"), allreduce.fit, allreduce.bytes.size());
  // What the trainers would time it as without this measurement: a ring of the message
  // model's messages (the points of all pairs), beside what was measured, at the largest size.
  train::CommModel messages;
  messages.alpha = records.all.alpha;
  messages.beta = records.all.beta;
  std::vector<double> all_bytes, all_seconds;
  for (const auto& pair : records.pairs) {
    all_bytes.insert(all_bytes.end(), pair.bytes.begin(), pair.bytes.end());
    all_seconds.insert(all_seconds.end(), pair.seconds.begin(), pair.seconds.end());
  }
  if (train::measured_times_problem(all_bytes, all_seconds).empty()) {
    messages.points = train::measured_times(all_bytes, all_seconds, records.all.beta);
  }
  const auto largest = static_cast<std::size_t>(
      std::max_element(allreduce.bytes.begin(), allreduce.bytes.end()) - allreduce.bytes.begin());
  const auto bytes = static_cast<std::uint64_t>(allreduce.bytes[largest]);
  out << strprintf(
      "# allreduce of %llu bytes: measured %.6g s, fitted %.6g s, a ring of %d messages %.6g s\n",
      static_cast<unsigned long long>(bytes), allreduce.seconds[largest],
      allreduce.fit.alpha + allreduce.fit.beta * static_cast<double>(bytes),
      2 * (allreduce.ranks - 1), messages.allreduce(bytes, allreduce.ranks));
  write_slack(out, "allreduce", allreduce.bytes, allreduce.slack, allreduce.tick);
}

}  // namespace mbkit::bench
