// DBSL's parameter-server messages (algorithms.md §3.4): a worker pulls the server's model
// (with the push count and the learning rate of its round), trains, and pushes its model; the
// server merges each push (mbkit/train/dbsl_merge.hpp) and replies to that worker with the
// merged model, or, with --sync, waits for every worker's push and replies to all. A stop is
// a reply: a worker never pushes after it, so shutting down needs no other message.
//
// Under the virtual clock (virtual_clock.hpp) pushes are taken in the order of their virtual
// arrival (VirtualArrivals): a worker that started its round at s and was ready after
// delay + compute arrives at s + delay + compute + message; the server merges at
// max(its time, arrival) (the merge is free under a compute model) and the worker's next
// round starts when the reply reached it, a message later.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"

namespace mbkit::train {

/// What a worker's pull gives besides the model.
struct DbslRound {
  std::int64_t step = 0;  ///< pushes the server had merged
  double lr = 0;          ///< the round's learning rate
  int stop = kContinue;   ///< a StopCode: the run ended
};

class DbslServer {
 public:
  DbslServer(const comm::World& world, std::size_t parameters, std::size_t state);
  ~DbslServer();
  DbslServer(const DbslServer&) = delete;
  DbslServer& operator=(const DbslServer&) = delete;

  /// Emulates the cluster on the virtual clock; call before start(). `message` is the cost of
  /// a model's message, `now` the server's virtual time.
  void use_virtual_clock(double message, double now);
  double virtual_now() const;
  /// Adds the server's own work (a merge timed in CPU seconds) to its virtual time.
  void advance(double seconds);

  /// Sends every worker the starting model.
  void start(std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round);
  /// The next push (virtual order under the virtual clock, else arrival order): `model` gets
  /// the worker's parameters followed by its state. Waiting names `step`.
  WorkerReport next_push(std::span<float> model, std::int64_t step);
  /// --sync: every worker's push; models[w] gets worker w's (resized to fit).
  std::vector<WorkerReport> all_pushes(std::vector<std::vector<float>>& models, std::int64_t step);
  /// Replies to the worker of `rank` (whose push was taken) with the model for its next round.
  void reply(int rank, std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round);
  /// Tells every worker to stop (a reply with `code`), discarding pushes still coming.
  void finish(std::int64_t step, int code);
  /// Pushes that arrived after the server had decided to stop (not merged).
  std::int64_t discarded() const { return discarded_; }

 private:
  struct Impl;
  Impl* impl_;
  std::int64_t discarded_ = 0;
};

class DbslWorker {
 public:
  DbslWorker(const comm::World& world, std::size_t parameters, std::size_t state);
  ~DbslWorker();
  DbslWorker(const DbslWorker&) = delete;
  DbslWorker& operator=(const DbslWorker&) = delete;

  /// Waits for the server's reply: false when it says stop (round.stop holds why).
  bool pull(std::span<float> parameters, std::span<float> state, DbslRound& round);
  /// Sends this worker's model and the round's report.
  void push(std::span<const float> parameters, std::span<const float> state,
            const WorkerReport& report);
  /// Seconds the last pull waited (wall clock).
  double last_wait() const { return last_wait_; }

 private:
  struct Impl;
  Impl* impl_;
  double last_wait_ = 0;
};

}  // namespace mbkit::train
