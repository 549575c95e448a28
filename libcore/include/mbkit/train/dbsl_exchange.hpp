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
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "mbkit/comm/world.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// What a worker's pull gives besides the model.
struct DbslRound {
  std::int64_t step = 0;  ///< pushes the server had merged
  double lr = 0;          ///< the round's learning rate
  int stop = kContinue;   ///< a StopCode: the run ended
};

/// The server's side of DBSL's exchange, as DBSL's server policies see it (training_run_dbsl.cpp):
/// the workers as ranks under mpirun (DbslServer) or emulated inside this process
/// (EmulatedDbslServer, emulated_dbsl.hpp).
class DbslCombiner {
 public:
  virtual ~DbslCombiner() = default;

  /// Emulates the cluster on the virtual clock; call before start(). `message` is the cost of
  /// a model's message, `now` the server's virtual time.
  virtual void use_virtual_clock(double message, double now) = 0;
  virtual double virtual_now() const = 0;
  /// Adds the server's own work (a merge timed in CPU seconds) to its virtual time.
  virtual void advance(double seconds) = 0;

  /// Sends every worker the starting model.
  virtual void start(std::span<const float> parameters, std::span<const float> state,
                     const DbslRound& round) = 0;
  /// The next push (virtual order under the virtual clock, else arrival order): `model` gets
  /// the worker's parameters followed by its state. Waiting names `step`.
  virtual WorkerReport next_push(std::span<float> model, std::int64_t step) = 0;
  /// --sync: every worker's push, handed to `take` in worker order (the model valid during
  /// the call only: thousands of emulated workers' models are never all held at once).
  using PushTaker = std::function<void(int worker, std::span<const float> model)>;
  virtual std::vector<WorkerReport> all_pushes(const PushTaker& take, std::int64_t step) = 0;
  /// Replies to the worker of `rank` (whose push was taken) with the model for its next round.
  virtual void reply(int rank, std::span<const float> parameters, std::span<const float> state,
                     const DbslRound& round) = 0;
  /// Tells every worker to stop (a reply with `code`), discarding pushes still coming.
  virtual void finish(std::int64_t step, int code) = 0;
  /// Pushes that arrived after the server had decided to stop (not merged).
  virtual std::int64_t discarded() const = 0;
};

/// The DBSL server's virtual clock, one for the MPI server and the emulated one: the order it
/// takes pushes in (VirtualArrivals) and the times it records.
class DbslVirtualClock {
 public:
  DbslVirtualClock(int workers, double message, double now)
      : arrivals_(workers, message), now_(now) {}
  double now() const { return now_; }
  void advance(double seconds) { now_ += seconds; }
  /// The server replied to worker w now: its next round starts when the reply reached it.
  void replied(int w) { arrivals_.start(w, now_ + arrivals_.message()); }
  /// Worker w's push is on its way: it was ready `ready_after` seconds (delay + compute) after
  /// its round started.
  void arrived(int w, double ready_after) { arrivals_.arrived(w, ready_after); }
  /// The worker whose push is next in virtual time, once it is safe to take it.
  std::optional<int> next() const { return arrivals_.next(); }
  /// Takes worker w's push: the server merges at max(its time, the arrival); the report's send
  /// time is the push's and the reply's messages, its wait the time queued behind earlier pushes.
  void take(int w, WorkerReport& report);

 private:
  VirtualArrivals arrivals_;
  double now_ = 0;
};

class DbslServer final : public DbslCombiner {
 public:
  DbslServer(const comm::World& world, std::size_t parameters, std::size_t state);
  ~DbslServer() override;
  DbslServer(const DbslServer&) = delete;
  DbslServer& operator=(const DbslServer&) = delete;

  void use_virtual_clock(double message, double now) override;
  double virtual_now() const override;
  void advance(double seconds) override;
  void start(std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round) override;
  WorkerReport next_push(std::span<float> model, std::int64_t step) override;
  std::vector<WorkerReport> all_pushes(const PushTaker& take, std::int64_t step) override;
  void reply(int rank, std::span<const float> parameters, std::span<const float> state,
             const DbslRound& round) override;
  void finish(std::int64_t step, int code) override;
  std::int64_t discarded() const override { return discarded_; }

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
