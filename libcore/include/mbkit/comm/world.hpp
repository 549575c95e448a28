// The processes of a run. MPI is initialised only when the process was started by an MPI
// launcher (mpirun, or srun with PMIx): a tool run on its own starts at once and needs no MPI
// runtime, and the same binary runs unchanged under mpirun.
//
// Waiting. Open MPI busy-polls inside blocking calls, so a rank that waits long (a master for
// its workers' gradients, a fast worker for a straggler) takes a whole core from the ranks that
// compute when there are more ranks than cores. Long waits therefore go through wait(): it
// polls a non-blocking request, first spinning briefly (short waits stay fast) and then
// sleeping between polls, so a waiting rank yields its core. Collectives whose inputs are ready
// everywhere are cheaper blocking than non-blocking in Open MPI (libnbc's MPI_Iallreduce takes
// 1.8x as long as MPI_Allreduce for 800 KB on 2 ranks here), so a collective is preceded by
// rendezvous(), a non-blocking barrier waited for this way, and then runs blocking.
//
// Failures. Every wait has a deadline (the run's --comm-timeout). When it passes, the rank
// names the ranks it was waiting for: directly when it knows them (a master waiting for
// workers), otherwise by pinging every rank on a communicator of its own: ranks that wait answer
// from inside wait(), a stuck or dead rank does not. The error (exit code 4) ends the job: a
// distributed tool calls abort() on any error, which makes mpirun/srun end every rank. A
// blocking collective cannot be polled: a watchdog thread watches it instead. While the main
// thread is blocked in one (a rank stopped in the middle of it, after the rendezvous) the
// watchdog answers pings for it, and past the deadline it pings every rank itself, names the
// silent ones and ends the process with exit code 4; the launcher then ends the job. This needs
// MPI_THREAD_MULTIPLE, asked for at start (Open MPI 4.1 here: a send/receive pair took 0.52-0.61
// us at either level, no difference above the noise); under an MPI that lacks it the watchdog
// makes no MPI call and its message names the call, not the rank. A wait (or watchdog) whose
// polls stopped for a while was stopped itself (SIGSTOP; mpirun sends SIGCONT before it ends a
// job) and does not count that time, so a rank that was frozen blames no one when it resumes.
//
// Buffers. A failing rank's objects are destroyed (the error unwinds them) before the job is
// aborted, while their sends and receives may still be pending, and MPI (or a peer reading this
// rank's memory directly) may then still use the buffers. World therefore tracks every request
// it starts on memory until it sees it complete, and buffers allocated as MessageBuffer
// (mbkit/comm/in_flight.hpp) are not freed while a request uses them: a posted receive is
// cancelled, a pending send's buffer kept until the process ends. Nothing waits for a peer.
//
// After a stop signal (SIGINT, SIGTERM: a graceful stop, mbkit/util/signals.hpp) the deadline
// is at most kStopGrace: the ranks then only finish their step and agree to stop, and a launcher
// that signals the job because a rank died (srun --kill-on-bad-exit sends SIGTERM and waits
// KillWait, 30 s by default, before SIGKILL) gets a prompt exit naming the dead rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mbkit::comm {

/// This machine's host name.
std::string host_name();

/// True when an MPI launcher started this process (Open MPI, PMIx or PMI variables are set).
bool launched_by_mpi();

/// How a waiting rank spends its time: yield (spin ~50 us, then sleep between polls; the
/// default) or spin (poll without sleeping: lowest latency when every rank has a core).
enum class WaitMode { kYield, kSpin };

/// How long a yielding wait stays on the CPU (spinning 50 us, then calling sched_yield, which
/// keeps a core no other task wants) before it sleeps between polls, in seconds. A worker in a
/// CPU-quota cgroup spends its quota for that long (--cpu-quota on the virtual clock charges it).
inline constexpr double kYieldWaitSeconds = 3e-3;

/// The longest wait once a stop signal arrived (or --comm-timeout when shorter), in seconds.
inline constexpr double kStopGrace = 10.0;

/// A pending non-blocking operation (an MPI_Request, kept opaque so users need no mpi.h).
struct Request {
  std::uintptr_t handle = 0;  ///< MPI_Request bits; 0 when none is pending
  int peer = -1;              ///< the rank on the other side (point-to-point), for messages
  bool pending() const { return handle != 0; }
};

class World {
 public:
  /// Initialises MPI when launched by MPI; errors of MPI calls are then reported as errors
  /// naming the call (MPI_ERRORS_RETURN) instead of aborting.
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Rank among the processes on this host, and how many there are (for devices, threads).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  bool distributed() const { return size_ > 1; }
  /// This host's name.
  const std::string& host() const { return host_; }
  /// The host of every rank (gathered at start): messages name where a silent rank runs.
  const std::vector<std::string>& hosts() const { return hosts_; }

  /// Deadline of every wait, in seconds (default 60).
  void set_timeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }
  void set_wait_mode(WaitMode mode) { wait_mode_ = mode; }
  WaitMode wait_mode() const { return wait_mode_; }

  // Collectives (no-ops on a single process). The blocking ones are meant to follow a
  // rendezvous(); all of them check their MPI calls.

  /// Waits (yielding, with the deadline) until every rank called rendezvous(); `what` names
  /// the point in messages ("gradients of step 12").
  void rendezvous(const std::string& what) const;
  void barrier() const { rendezvous("barrier"); }
  /// Element-wise sums over all ranks, in place.
  void allreduce_sum(std::span<float> values) const;
  void allreduce_sum(std::span<double> values) const;
  void allreduce_sum(std::span<std::int64_t> values) const;
  /// Element-wise sum over all ranks into `values` of `root` (other ranks' values unchanged).
  void reduce_sum(std::span<float> values, int root) const;
  /// `values` of `root` to every rank.
  void broadcast(std::span<float> values, int root) const;
  void broadcast(std::span<std::uint8_t> bytes, int root) const;
  /// Every rank's value, by rank.
  std::vector<std::uint64_t> all_gather(std::uint64_t value) const;
  std::vector<std::string> all_gather(const std::string& text) const;
  /// In place (MPI_Allgather): rank r's block is the `block_bytes` bytes at r * block_bytes of
  /// `blocks`; afterwards every rank holds every rank's block.
  void all_gather_in_place(std::span<std::uint8_t> blocks, std::size_t block_bytes) const;
  /// MPI_Gatherv to `root`: ranks from `first_sender` on send `mine` (block_bytes bytes), the
  /// others nothing; `root` (not a sender) gets the blocks in rank order in `blocks`.
  void gather_blocks(std::span<const std::uint8_t> mine, std::span<std::uint8_t> blocks,
                     std::size_t block_bytes, int root, int first_sender) const;

  /// A non-blocking barrier, for waits that poll other requests too.
  Request ibarrier() const;
  /// A non-blocking element-wise sum over all ranks, in place (MPI_Iallreduce): it progresses
  /// while this rank calls test() on it or on other requests. `values` must stay untouched
  /// until it completed; every rank starts the same sums in the same order.
  Request iallreduce_sum(std::span<float> values) const;
  /// A non-blocking broadcast of `root`'s bytes (MPI_Ibcast), progressing as iallreduce_sum.
  Request ibroadcast(std::span<std::uint8_t> bytes, int root) const;

  // Point-to-point, non-blocking. Buffers must stay valid until the request completed: an
  // object that may be destroyed with one pending (by an error) holds them as MessageBuffer.
  Request isend(const void* data, std::size_t bytes, int destination, int tag) const;
  Request irecv(void* data, std::size_t bytes, int source, int tag) const;
  /// True when the request completed (it is then released); `bytes` gets the size of a
  /// completed receive.
  bool test(Request& request, std::size_t* bytes = nullptr) const;
  /// Waits for the request, yielding; past the deadline it fails naming `what` and the peer.
  void wait(Request& request, const std::string& what) const;
  /// Cancels a pending receive (shut-down of a protocol that pre-posts receives); a receive
  /// whose message was already arriving is waited for as wait() waits (the same deadline).
  void cancel(Request& request) const;

  /// Waits, yielding, until `done()` is true; `done` polls requests. Past the deadline it
  /// fails: `missing()` names the ranks that were waited for (empty: find out by pinging).
  void wait_until(const std::function<bool()>& done, const std::string& what,
                  const std::function<std::vector<int>()>& missing = {}) const;

  /// Runs `collective` (blocking MPI calls: one, or a benchmark's loop of them) under the
  /// watchdog (see above): past the deadline from its start the process ends naming the ranks
  /// that do not answer. `what` names it in the message and must live until it returns.
  void guarded(const char* what, const std::function<void()>& collective) const;
  /// How long a wait may last now: --comm-timeout, or less once a stop signal arrived.
  double wait_deadline() const;
  /// Fails as a wait past its deadline does (exit code 4), naming `what` and the `missing`
  /// ranks (empty: those that do not answer a ping), for waits that keep their own deadline
  /// (PeerSilence).
  [[noreturn]] void timed_out(const std::string& what, std::vector<int> missing,
                              double waited) const;

  /// Ends every rank of the job with `code` (MPI_Abort); on a single process, exits.
  [[noreturn]] void abort(int code) const;

  /// Runs `body` (a distributed tool's work) and returns its status after a rendezvous, so that
  /// no rank's MPI_Finalize races the others. On one process errors propagate (the tool's
  /// report_errors prints them). Distributed, an error ends the job: rank 0 reports usage
  /// errors (every rank reaches them, the others end quietly after kQuietRankGrace); any other
  /// error is printed naming the rank and host, then abort(code).
  int run_collectively(const std::function<int()>& body);

 private:
  void serve_pings() const;
  /// "; it runs on host node3", "; they run: 2 on node3, 5 on node4" (empty before MPI).
  std::string where_ranks_run(const std::vector<int>& ranks) const;
  std::string timeout_message(const std::string& what, const std::vector<int>& missing,
                              double waited) const;
  std::vector<int> unresponsive_ranks() const;

  struct Watchdog;

  std::unique_ptr<Watchdog> watchdog_;
  bool initialized_here_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;
  double timeout_ = 60.0;
  WaitMode wait_mode_ = WaitMode::kYield;
  std::uintptr_t diagnosis_comm_ = 0;  ///< MPI_Comm bits of the ping communicator
  mutable std::string last_wait_;      ///< what the last wait_until() waited for
};

/// "1, 2 and 5"
std::string rank_list(const std::vector<int>& ranks);

}  // namespace mbkit::comm
