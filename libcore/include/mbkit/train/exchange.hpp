// How the workers of a data-parallel run combine their gradients (--comm), with the semantics
// of the AMB original and MXNet's dist_sync/dist_async (mbkit.7):
//
//   ps          rank 0 is the master and computes nothing; every worker sends the gradient of
//               the summed per-sample loss over its batch and its sample count; the master
//               divides the sum of the gradients by the total count, applies the optimizer and
//               broadcasts the parameters (MPI_Reduce + MPI_Bcast, as the original).
//   allreduce   every rank is a worker; one sum over all ranks of the flat gradient buffer
//               followed by the counts, batch-norm statistics and the workers' reports (the
//               network keeps room for them right after its gradients, so no copy and no
//               second collective); every rank then applies the same optimizer step. The sum is
//               a shared-memory one when every rank runs on one host (comm/shared_sum.hpp: the
//               gradients live in a window all ranks map), else one MPI_Allreduce in place
//               (--allreduce auto|shm|mpi). Through MPI the sum can instead go in buckets
//               (--bucket-mb, PyTorch DDP's bucket_cap_mb): an MPI_Iallreduce starts as soon
//               as the backward pass has finished a bucket's worth of gradients (they are
//               final from the end of the buffer backwards), and progresses while the pass
//               goes on; it pays where a network adapter moves the data, not on one host,
//               where a transfer is the receiving core's own work (mb-train-fmb.1). On GPUs
//               (--allreduce nccl, auto's choice there) NCCL sums the gradients in GPU memory,
//               in the same buckets, each started once the backward pass has queued it; the
//               small values are summed through MPI as floats, as before.
//   ps --async  the master applies an update as soon as --async-min-grads gradients arrived and
//               sends the new parameters to every worker; workers never wait for parameters:
//               they compute on the newest they have (AsyncMaster/AsyncWorker below). With
//               --servers S (MXNet's dist_async with several servers) each of ranks 0..S-1 is
//               such a master for its shard (server_shard), on its own: a worker sends every
//               server its shard of each gradient (server 0 the state too) and takes each
//               server's newest shard of the parameters.
//
// Scaling. Workers compute gradients of loss_scale * (sum of their per-sample losses) with
// loss_scale = 1 / nominal, nominal being the samples the step was planned for (workers x
// batch); the combine step multiplies by nominal / total only when the total differs (a short
// last batch, AMB's partial work), so the result is always sum / total, the original's
// counts-weighted average, without a pass over the gradients in the common case.
//
// Compression (--compress, comm/compression.hpp): the gradients travel encoded instead of
// summed in the collective: ps workers send theirs to the servers (MPI_Gatherv), allreduce
// ranks gather everyone's (MPI_Allgather); the master, or every rank, decodes and adds them in
// worker order, so every rank holds the same bits. Each worker keeps its 2bit residual. The
// small values (state, reports) are summed as floats beside them.
//
// Batch-norm running statistics are averaged over the workers at every step, so that every
// rank holds the same model and any rank can evaluate or save it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mbkit/comm/compression.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/comm/in_flight.hpp"
#include "mbkit/comm/shared_sum.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/train/async_rule.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/train/virtual_clock.hpp"

namespace mbkit::train {

/// The shard of `floats` values server `server` of `servers` keeps: [first, second), contiguous,
/// sizes differing by one at most (the whole buffer for one server).
std::pair<std::size_t, std::size_t> server_shard(std::size_t floats, int server, int servers);

/// Why a run ends, as the ranks tell each other (larger codes win when several apply).
enum StopCode : int {
  kContinue = 0,
  kFinished = 1,   ///< planned length or time budget reached
  kSignalled = 2,  ///< SIGINT/SIGTERM: save the state and exit 6
  kDiverged = 3,   ///< non-finite loss: exit 5
};

/// What one worker reports about one of its steps (a row of the log's /workers table).
struct WorkerReport {
  int rank = 0;
  std::int64_t samples = 0;
  double loss_sum = 0;  ///< sum of the per-sample losses
  std::int64_t correct = 0;
  double compute_time = 0;  ///< seconds computing (forward, backward), induced delays excluded
  double sleep_time = 0;    ///< seconds of induced delay (--induce, --slowdown)
  /// Seconds spent sending the gradient and receiving parameters, and waiting idle for the
  /// others (sync) or for a send to complete (async): of the worker's previous step, because
  /// they end after the report left.
  double send_time = 0;
  double wait_time = 0;
  std::int64_t staleness = 0;      ///< async: master step now minus the step computed at
  std::int64_t based_on = 0;       ///< async: master step of the parameters used
  int stop = kContinue;            ///< the worker asks to stop (a StopCode)
  std::int64_t micro_batches = 1;  ///< AMB: micro-batches computed
  bool finished_early = false;     ///< AMB: the whole batch was done before the time limit
  /// Rank 0's record, not sent: the step's selection dropped this worker's gradient.
  bool dropped = false;
  /// The AMB original's last_recv and last_exit: seconds receiving the parameters this round
  /// started from (ps: the broadcast; allreduce has no receive of its own: 0; async: taking
  /// the newest, waiting for them included), and from having them to starting the round.
  double recv_time = 0;
  double exit_time = 0;
  /// The original's last_queued_update_count (async): parameter sets that arrived since the
  /// previous round and were overtaken by a newer one before being used.
  std::int64_t queued_updates = 0;
  /// --async-delay-std: seconds the message carrying this report was delayed on its way to
  /// the master (the AMB original's communication straggler).
  double comm_delay = 0;

  /// What a master or server reads of this report in a worker's message, taken at its `step`:
  /// the fields every such message carries and no others (the asynchronous master's carries a
  /// few more), so that the emulated servers give the MPI ones' bits.
  WorkerReport as_carried(int from_rank, std::int64_t step) const;
};

/// What one ps server reports about a step (a row of the log's /servers table), in wall
/// seconds: receiving (and summing) the step's gradients of its shard, and, of its previous
/// step, updating the shard and sending it back (they end after the report left).
struct ServerReport {
  int rank = 0;
  std::int64_t floats = 0;          ///< its shard of the parameters
  std::int64_t bytes_received = 0;  ///< what the workers send it per step (encoded if so)
  double recv_time = 0;
  double update_time = 0;
  double send_time = 0;
};

/// A combined step as rank 0 sees it (other ranks get the totals).
struct CombinedStep {
  std::vector<WorkerReport> workers;  ///< rank 0 only: one per contributing worker
  std::vector<ServerReport> servers;  ///< rank 0 only, synchronous ps: one per server
  std::int64_t samples = 0;
  double loss_sum = 0;
  std::int64_t correct = 0;
  double wait_time = 0;  ///< rank 0: seconds waiting for the gradients
  int stop = kContinue;  ///< the largest StopCode a worker sent

  /// Mean per-sample loss of the step.
  double mean_loss() const { return loss_sum / static_cast<double>(samples > 0 ? samples : 1); }
};

/// Floats of one worker's report in the synchronous exchanges' small values.
std::size_t report_slot_floats(bool parameter_server);

/// Adds one worker's part of a synchronous step into `sum`, laid out as combine()'s fused
/// buffer: its gradients, its state (`state`, the tail's first floats) and its report in slot
/// `worker` of `workers`. Worker 0 of allreduce starts the sum (a copy); the ps master's zeros
/// start it otherwise (the caller zeroes `sum` first). The additions are the shared-memory
/// sum's (comm/shared_sum.hpp), in rank order, so the bits are a one-process-per-worker run's.
void add_worker_to_sum(std::span<float> sum, std::span<const float> gradients,
                       std::span<const float> state, const WorkerReport& report, int worker,
                       bool parameter_server);

/// The synchronous exchanges (ps and allreduce) of one run.
class SyncExchange {
 public:
  /// `servers`: ps only, ranks 0 to servers - 1 each receive, update and broadcast a shard.
  SyncExchange(const comm::World& world, bool parameter_server,
               AllreduceVia via = AllreduceVia::kMpi, int servers = 1);
  ~SyncExchange();
  /// Whether an exchange built with these arguments sums through shared memory (a usage error
  /// for kSharedMemory when the ranks span hosts).
  static bool uses_shared_memory(const comm::World& world, bool parameter_server, AllreduceVia via);

  bool parameter_server() const { return parameter_server_; }
  /// False only for the servers of ps (in process: every rank plays the master).
  bool computes() const {
    return !parameter_server_ || (!in_process() && world_.rank() >= servers_);
  }
  int servers() const { return parameter_server_ ? servers_ : 0; }
  /// The workers whose state the step averages (the others' dropped by StepSelection and
  /// sent as zeros); 0: all.
  void set_state_contributors(int contributors) { state_contributors_ = contributors; }

  /// Floats combine() sends besides the gradients (the state and every worker's report).
  std::size_t tail_floats(std::size_t state_size) const;

  /// True when combine() sums through shared memory.
  bool shared_memory() const { return shared_memory_; }

  /// --allreduce nccl: `sum` adds the gradients up in GPU memory, the first `floats` floats of
  /// `buffer` (the network's gradient buffer), in the buckets set_bucket_floats() asks for (any
  /// number of ranks, one included); combine() then gets no gradients (an empty span), sums the
  /// small values through MPI and waits for the device sums with the world's deadline. Call
  /// before set_bucket_floats().
  void set_device_allreduce(comm::DeviceAllreduce& sum, nn::Buffer& buffer, std::size_t floats);
  bool device_allreduce() const { return device_ != nullptr; }

  /// allreduce through MPI: sum the gradients in buckets of at least `floats` (0: one sum in
  /// combine()). A usage error for ps and the shared-memory sum.
  void set_bucket_floats(std::size_t floats);
  bool buckets() const { return bucket_floats_ > 0; }
  /// With buckets, the backward pass's gradients_ready (nn::Network::backward): `gradients`
  /// (the span combine() gets next; not read with a device sum) is final from `from` on. Starts the
  /// sum of the final part not yet started when it holds a bucket, else lets the started sums
  /// progress.
  void gradients_ready(std::span<float> gradients, std::size_t from);
  /// Sums gradients_ready() started that the next combine() completes.
  std::size_t started_sums() const { return bucket_sums_.size() + device_sums_; }
  /// Seconds spent in gradients_ready() this step (the next combine() counts them as sending).
  double progress_time() const { return progress_time_; }
  /// Gradients travel encoded (see above); not with shared memory or buckets.
  void set_compression(const comm::CompressionSpec& spec);
  /// Bytes of gradient this worker sends per step (encoded when compressed).
  std::size_t gradient_bytes_sent(std::size_t gradients) const {
    return compression_.encoded_bytes(gradients);
  }

  /// --emulate: this process hosts all `workers` workers (mbkit/train/emulated_workers.hpp)
  /// and plays rank 0 (the ps master, and with several servers every server, or the first
  /// allreduce rank; a server's /servers row has no receive or send). combine() then gets their
  /// gradients and tail already added up in worker order, as the shared-memory sum leaves
  /// them (add_worker_to_sum), and moves nothing through MPI. Call before tail_floats().
  void set_in_process(int workers, bool parameter_server);
  bool in_process() const { return in_process_workers_ > 0; }

  /// Shared memory only: the buffer the gradients and tail should be computed in (collective;
  /// allocated on the first call: `floats` = gradients + tail, Network::move_gradients_to).
  /// combine() on other buffers copies them in and out.
  std::span<float> shared_buffer(std::size_t floats);

  /// Combines the step's gradients and state. Workers pass their scaled gradient (see above),
  /// state and report; the ps master passes its buffers (overwritten with zeros first). After
  /// the call: allreduce: every rank holds sum / total and the mean state; ps: the master does,
  /// workers' buffers are unchanged. `nominal` is the samples the gradients were scaled for.
  /// `tail`, when given, is tail_floats() floats right after `gradients` in memory
  /// (nn::Network::gradient_tail): gradients and the small values then travel as one message,
  /// which saves a collective's latency per step.
  CombinedStep combine(std::span<float> gradients, std::span<float> state,
                       const WorkerReport& report, std::int64_t step, std::int64_t nominal,
                       std::span<float> tail = {});

  /// ps: the master sends its parameters, state and its StopCode; workers receive them.
  /// Returns the StopCode. (allreduce: nothing to do, returns `stop`.)
  int distribute(std::span<float> parameters, std::span<float> state, int stop, std::int64_t step);

  /// Seconds this rank spent in the last combine+distribute sending/receiving, and idle.
  double last_send_time() const { return send_time_; }
  double last_wait_time() const { return wait_time_; }
  /// ps worker: seconds of the last distribute's broadcast (receiving the parameters).
  double last_recv_time() const { return recv_time_; }
  /// ps server: wall seconds its update of the step just combined took (reported with the
  /// next step, in the log's /servers table).
  void set_update_time(double seconds) { update_time_ = seconds; }

 private:
  // Worker indices within the exchange's messages, by train/roles.hpp's rule.
  int worker() const { return worker_of_rank(world_.rank(), servers()); }
  int workers() const {
    return in_process_workers_ > 0 ? in_process_workers_ : worker_count(world_.size(), servers());
  }
  int in_process_workers_ = 0;
  int rank_of(int index) const { return worker_rank(index, servers()); }
  /// Gradients travel as messages (compressed, or to several servers), not in a collective sum.
  bool messages() const { return compression_.enabled() || servers() > 1; }
  const comm::World& world_;
  bool parameter_server_;
  int servers_ = 1;
  // Buffers of non-blocking sums and messages (comm/in_flight.hpp: kept if this exchange is
  // destroyed by an error while one is pending).
  comm::MessageBuffer<float> small_;  ///< state | per-worker report slots (when no tail is given)
  comm::MessageBuffer<std::int32_t> arrivals_;
  double send_time_ = 0, wait_time_ = 0, recv_time_ = 0;
  /// ps server: receiving this step's shard, updating and sending back the previous one.
  double gather_time_ = 0, update_time_ = 0, shard_send_time_ = 0;
  /// Floats at the end of the small values for the servers' reports (several servers).
  std::size_t server_slots() const;
  std::vector<ServerReport> server_reports(std::span<const float> small,
                                           std::size_t gradients) const;
  bool shared_memory_ = false;
  std::unique_ptr<comm::SharedSum> shared_;
  std::size_t bucket_floats_ = 0;
  /// This step's gradients from here on are being summed (nothing started: kNoBucket).
  static constexpr std::size_t kNoBucket = static_cast<std::size_t>(-1);
  std::size_t started_from_ = kNoBucket;
  std::vector<comm::Request> bucket_sums_;
  double progress_time_ = 0;
  comm::CompressionSpec compression_;
  std::vector<float> residual_;        ///< 2bit: this worker's error feedback
  std::vector<std::uint8_t> encoded_;  ///< this worker's message, or every worker's
  /// combine()'s sum as messages, once every rank arrived.
  void message_sum(std::span<float> gradients, std::span<float> small);
  comm::DeviceAllreduce* device_ = nullptr;
  nn::Buffer* device_buffer_ = nullptr;
  std::size_t device_floats_ = 0;
  std::size_t device_sums_ = 0;  ///< started this step
  /// combine()'s part with a device sum: the rest of the gradients started, the small values
  /// summed through MPI, every sum waited for; the communicator aborted when a wait fails.
  void device_sum(std::span<float> small, const std::string& what);
  /// device_buffer_[from, from + count) summed (once the previous call was queued).
  void start_device_sum(std::size_t from, std::size_t count);
  /// The buckets' part of combine(): starts the sums of the rest, waits for all.
  void finish_buckets(std::span<float> gradients, std::span<float> small, const std::string& what);
  int state_contributors_ = 0;
};

/// Multiplies by nominal / total when they differ (see above).
void finish_gradient(std::span<float> gradients, std::int64_t nominal, std::int64_t total);
/// Whether finish_gradient changes the gradients (a device run copies them only then).
inline bool gradient_rescaled(std::int64_t nominal, std::int64_t total) {
  return total != nominal && total > 0;
}

/// The master of ps --async, or one of its `servers` servers (rank s < servers keeps shard s:
/// `parameters` is the shard's size, `state` the state's on server 0 and 0 on the others).
/// Report times of the workers' messages are theirs; under the virtual clock send_time is the
/// message's cost and wait_time the seconds its round waited to start (--staleness-bound; else 0).
///
/// The end of a run: a master that stops (finish()) tells every worker; a worker told by any
/// server tells every server it is done and takes every server's stop; a server whose workers
/// are all done ends its collect() (workers_done()) and then calls finish() too, so every
/// server learns that every worker is done and no rank waits on one that left.
/// The asynchronous parameter server's side of the loop (the asynchronous master's ServerPolicy,
/// training_run_async.cpp): the master over MPI (AsyncMaster, a rank per worker) or with the
/// workers emulated inside this process (EmulatedAsyncMaster, --emulate N). The loop is one;
/// only where the gradients come from differs.
class AsyncCombiner {
 public:
  virtual ~AsyncCombiner() = default;
  /// Sends the starting parameters to every worker.
  virtual void start(std::span<const float> parameters, std::span<const float> state,
                     std::int64_t step) = 0;
  /// Waits until at least `min_gradients` gradients arrived and combines them: `gradients`
  /// gets sum / total, `state` the mean of their states. With a time window (use_time_window)
  /// `min_gradients` is not used: see there. Returns early, with no update to make, once
  /// every worker is done (workers_done()); what it had taken is then counted in discarded().
  virtual CombinedStep collect(std::span<float> gradients, std::span<float> state,
                               int min_gradients, std::int64_t step) = 0;
  /// Sends the parameters of master step `step` to every worker (as soon as each can take
  /// them: a worker still receiving older ones gets the newest afterwards).
  virtual void publish(std::span<const float> parameters, std::span<const float> state,
                       std::int64_t step) = 0;
  /// Tells every worker to stop (with a StopCode) and drains their last messages.
  virtual void finish(std::int64_t step, int code) = 0;
  /// Gradients that arrived after the master had decided to stop (not applied).
  std::int64_t discarded() const { return discarded_; }
  /// Every worker said it is done (another server stopped the run).
  virtual bool workers_done() const = 0;
  /// The largest StopCode the workers were stopped with (kContinue when none is done).
  virtual int workers_stop() const = 0;

  /// The AMB original's time rule (--async-master-time-limit): collect() takes the gradients
  /// that arrive within `seconds` of its start (on the run's clock), and when none did, waits
  /// for the first and takes it (on the wall clock with any that came in the same poll); the
  /// master's step then ends at the later of the window's end and that arrival. 0 (the default):
  /// the count rule.
  virtual void use_time_window(double seconds) = 0;
  /// Which arrivals an update takes (--k-async: from distinct workers, the others held for
  /// later updates) and when a worker may start (--staleness-bound): async_rule.hpp. Call
  /// before start(); the default is the count rule.
  virtual void use_rule(const AsyncRuleSettings& settings) = 0;
  /// Emulates the cluster on the virtual clock (virtual_clock.hpp): gradients are taken in
  /// the order of their virtual arrival, and each worker gets the parameters it would hold
  /// when its next round starts (workers then call refresh() with wait = true every round).
  /// Call before start(); `now` is the master's virtual time, `message` a message's cost (the
  /// link's period for a gradient and its parameters), `sender` the CPU a send takes on the
  /// worker's core after its compute (VirtualArrivals).
  virtual void use_virtual_clock(double message, double sender, double now) = 0;
  /// The master's virtual time: after collect(), the arrival of the last gradient taken.
  virtual double virtual_now() const = 0;
  /// Adds the master's own work (its update) to its virtual time.
  virtual void advance(double seconds) = 0;

 protected:
  std::int64_t discarded_ = 0;
};

/// The master of ps --async over MPI, one rank per worker (or one of several servers, each
/// with its shard).
class AsyncMaster final : public AsyncCombiner {
 public:
  AsyncMaster(const comm::World& world, std::size_t parameters, std::size_t state, int servers = 1);
  ~AsyncMaster() override;
  void start(std::span<const float> parameters, std::span<const float> state,
             std::int64_t step) override;
  CombinedStep collect(std::span<float> gradients, std::span<float> state, int min_gradients,
                       std::int64_t step) override;
  void publish(std::span<const float> parameters, std::span<const float> state,
               std::int64_t step) override;
  void finish(std::int64_t step, int code) override;
  bool workers_done() const override;
  int workers_stop() const override;
  void use_time_window(double seconds) override;
  void use_rule(const AsyncRuleSettings& settings) override;
  void use_virtual_clock(double message, double sender, double now) override;
  double virtual_now() const override;
  void advance(double seconds) override;

 private:
  struct Impl;
  Impl* impl_;
};

/// A worker of ps --async, talking to `servers` servers (AsyncMaster).
class AsyncWorker {
 public:
  AsyncWorker(const comm::World& world, std::size_t parameters, std::size_t state, int servers = 1);
  ~AsyncWorker();
  /// Takes the newest parameters that arrived from each server (waiting only when `wait` or
  /// none came yet): returns false when a server said stop. `based_on` gets server 0's step.
  bool refresh(std::span<float> parameters, std::span<float> state, bool wait,
               std::int64_t& based_on);
  /// Sends a gradient (scaled to the sum of the per-sample losses) with the report; waits
  /// first for the previous send to complete (at most one in flight).
  void send(std::span<const float> gradients, std::span<const float> state,
            const WorkerReport& report);
  /// After refresh() returned false: completes the last send, tells every server this worker
  /// is done and takes the stop of each server that had not sent it yet.
  void finish();
  /// The StopCode of the server that stopped it, once refresh() returned false.
  int stop_code() const { return stop_code_; }
  /// Parameter sets that arrived but were overtaken by newer ones before being used.
  std::int64_t skipped() const { return skipped_; }

 private:
  struct Impl;
  Impl* impl_;
  std::int64_t skipped_ = 0;
  int stop_code_ = kContinue;
};

}  // namespace mbkit::train
