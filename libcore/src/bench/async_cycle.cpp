// mb-bench-bandwidth --fit's async cycle (bandwidth_fit.hpp, measure_async_cycle): the
// asynchronous exchange's messages between a master and a worker, sent as AsyncWorker and
// AsyncMaster send them, with the worker idle and with it busy between sends.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "mbkit/bench/bandwidth_fit.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::bench {
namespace {

constexpr int kGradientTag = 26;
constexpr int kParametersTag = 27;
constexpr const char* kWhat = "timing the asynchronous exchange between two ranks (--fit)";

using Clock = std::chrono::steady_clock;

std::uint8_t pattern(std::size_t i, std::size_t size) {
  return static_cast<std::uint8_t>((i * 13 + size) & 0xff);
}

// The worker's side of one size: gradients of `size` bytes, parameters of `reply` bytes whose
// first 8 hold the index of the gradient they answer.
struct WorkerSide {
  const comm::World& world;
  int master;
  std::vector<std::uint8_t> gradient;
  std::vector<std::uint8_t> incoming;
  comm::Request send, receive;
  std::int64_t last_answered = -1;

  WorkerSide(const comm::World& w, int m, std::size_t size, std::size_t reply)
      : world(w), master(m), gradient(size), incoming(reply) {
    for (std::size_t i = 0; i < size; ++i) gradient[i] = pattern(i, size);
    post();
  }
  void post() { receive = world.irecv(incoming.data(), incoming.size(), master, kParametersTag); }
  // Takes whatever parameters arrived without waiting (AsyncWorker::refresh with wait = false).
  void drain() {
    while (world.test(receive)) {
      std::memcpy(&last_answered, incoming.data(), sizeof last_answered);
      post();
    }
  }
  // windows x `window` + 1 gradients back to back, each after `busy` seconds of compute, in one
  // stream (the pipeline stays full from window to window: no window pays for its filling or
  // draining); returns each window's seconds a gradient, from the post of its first send to
  // that of the next window's first.
  std::vector<double> stream(int windows, int window, double busy) {
    const int count = windows * window + 1;
    std::vector<double> periods;
    last_answered = -1;
    auto window_start = Clock::now();
    for (int i = 0; i < count; ++i) {
      drain();
      if (busy > 0) busy_for(busy);
      world.wait(send, kWhat);  // the previous gradient is through (AsyncWorker::send)
      if (i > 0 && i % window == 0) {
        const auto now = Clock::now();
        periods.push_back(std::chrono::duration<double>(now - window_start).count() / window);
        window_start = now;
      }
      send = world.isend(gradient.data(), gradient.size(), master, kGradientTag);
    }
    world.wait_until(
        [&] {
          drain();
          return last_answered == count - 1 && (!send.pending() || world.test(send));
        },
        kWhat, [this] { return std::vector<int>{master}; });
    return periods;
  }
  ~WorkerSide() {
    try {
      world.cancel(receive);
    } catch (const Error& error) {  // unwinding already, or the master stopped: say so, go on
      log::warn(error.what());
    }
  }
};

// The master's side of a stream of `count` gradients: takes them as they come and answers with the
// newest parameters, one send in flight (AsyncMaster::pump). Returns the bytes of the last gradient
// that differ from the worker's pattern.
std::int64_t answer_gradients(const comm::World& world, int worker, std::vector<std::uint8_t>& in,
                              std::vector<std::uint8_t>& out, int count) {
  comm::Request receive = world.irecv(in.data(), in.size(), worker, kGradientTag), send;
  std::int64_t newest = -1, sent = -1;
  const auto pump = [&] {
    if (sent < newest && (!send.pending() || world.test(send))) {
      std::memcpy(out.data(), &newest, sizeof newest);
      send = world.isend(out.data(), out.size(), worker, kParametersTag);
      sent = newest;
    }
  };
  for (std::int64_t taken = 0; taken < count; ++taken) {
    world.wait_until(
        [&] {
          pump();
          return world.test(receive);
        },
        kWhat, [worker] { return std::vector<int>{worker}; });
    newest = taken;
    // Repost at once as AsyncMaster does; the last one's bytes stay for the check.
    if (taken + 1 < count) receive = world.irecv(in.data(), in.size(), worker, kGradientTag);
    pump();
  }
  world.wait_until(
      [&] {
        pump();
        return sent == count - 1 && (!send.pending() || world.test(send));
      },
      kWhat, [worker] { return std::vector<int>{worker}; });
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < in.size(); ++i) wrong += in[i] != pattern(i, in.size()) ? 1 : 0;
  return wrong;
}

}  // namespace

void measure_async_cycle(comm::World& world, const std::vector<std::size_t>& sizes,
                         const MeasureOptions& options, PingPong& ping_pong) {
  train::CommAsyncRecord& record = ping_pong.records.async_cycle;
  record = {};
  record.window = kAsyncCycleWindow;
  const std::size_t n = sizes.size();
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      world.barrier();  // one pair at a time, as the ping-pong
      // Per size: the idle median, fastest and slowest; the busy median, fastest and slowest
      // (the worker's, rank b); the wrong bytes (the master's, rank a).
      std::vector<double> times(7 * n, 0.0);
      if (world.rank() == a || world.rank() == b) {
        const bool master = world.rank() == a;
        const int peer = master ? b : a;
        // The trainers' own waits (spin, then yield, then sleep: comm::World::wait_until), not
        // the ping-pong's spinning: two spinning ranks on a shared machine starve the kernel's
        // softirq threads that move the data (on the README's tbf link, 8 ms cycles, two
        // 4 ms scheduler ticks, where the trainer's worker took 2 ms).
        for (std::size_t s = 0; s < n; ++s) {
          const std::size_t size = sizes[s];
          const std::size_t reply = std::max(size, sizeof(std::int64_t));
          const int windows = options.warmup_iters + options.iters_at(size);
          const int gradients = windows * kAsyncCycleWindow + 1;
          if (master) {
            std::vector<std::uint8_t> in(size), out(reply, 0);
            std::int64_t wrong = 0;
            for (int pass = 0; pass < 2; ++pass) {
              wrong = answer_gradients(world, peer, in, out, gradients);
            }
            if (options.check) {
              times[6 * n + s] = static_cast<double>(wrong + (options.corrupt ? 1 : 0));
            }
            continue;
          }
          WorkerSide side(world, peer, size, reply);
          double idle = 0;
          for (int pass = 0; pass < 2; ++pass) {
            std::vector<double> per_gradient = side.stream(windows, kAsyncCycleWindow, idle);
            per_gradient.erase(per_gradient.begin(), per_gradient.begin() + options.warmup_iters);
            std::sort(per_gradient.begin(), per_gradient.end());
            const double median = median_of_sorted(per_gradient);
            times[(3 * pass) * n + s] = median;
            times[(3 * pass + 1) * n + s] = per_gradient.front();
            times[(3 * pass + 2) * n + s] = per_gradient.back();
            idle = median;  // the busy pass computes as long as the idle cycle lasts
          }
        }
      }
      // The worker's times and the master's check, to every rank (doubles as their bits).
      std::vector<std::uint8_t> raw(times.size() * sizeof(double));
      std::memcpy(raw.data(), times.data(), raw.size());
      world.broadcast(std::span<std::uint8_t>(raw.data(), 6 * n * sizeof(double)), b);
      world.broadcast(
          std::span<std::uint8_t>(raw.data() + 6 * n * sizeof(double), n * sizeof(double)), a);
      std::memcpy(times.data(), raw.data(), raw.size());
      for (std::size_t s = 0; s < n; ++s) {
        for (int pass = 0; pass < 2; ++pass) {
          Row row;
          row.op = cat(pass == 0 ? "async-" : "async-busy-", a, "-", b);
          row.bytes = sizes[s];
          row.count = sizes[s];
          row.type = "byte";
          row.avg_us = times[(3 * pass) * n + s] * 1e6;
          row.min_us = times[(3 * pass + 1) * n + s] * 1e6;
          row.max_us = times[(3 * pass + 2) * n + s] * 1e6;
          row.algbw_gbps = static_cast<double>(sizes[s]) / times[(3 * pass) * n + s] * 1e-9;
          row.busbw_gbps = 2 * row.algbw_gbps;  // a gradient out, parameters back
          row.wrong = pass == 0 ? static_cast<std::int64_t>(times[6 * n + s]) : 0;
          ping_pong.rows.push_back(row);
        }
        record.bytes.push_back(static_cast<double>(sizes[s]));
        record.seconds.push_back(times[s]);
        record.busy_seconds.push_back(times[3 * n + s]);
      }
    }
  }
}

}  // namespace mbkit::bench
