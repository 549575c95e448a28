// The asynchronous parameter server's worker side (AsyncWorker in mbkit/train/exchange.hpp):
// parameters from every server, its gradient to each server's shard.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "exchange_internal.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

using namespace exchange_detail;

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
