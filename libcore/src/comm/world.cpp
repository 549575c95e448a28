#include "mbkit/comm/world.hpp"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "mbkit/comm/in_flight.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/signals.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::comm {
namespace {

using Clock = SteadyClock;

constexpr int kPingTag = 1;
constexpr int kPongTag = 2;
// How long a rank that timed out waits for the others' answers before naming the silent ones.
constexpr double kPingGrace = 2.0;
// A gap this long between two polls of a wait means this process did not run (it was stopped).
constexpr auto kSuspended = std::chrono::milliseconds(500);

static_assert(sizeof(MPI_Request) <= sizeof(std::uintptr_t));
static_assert(sizeof(MPI_Comm) <= sizeof(std::uintptr_t));

MPI_Request to_mpi(std::uintptr_t handle) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (handle != 0) std::memcpy(&request, &handle, sizeof request);
  return request;
}

std::uintptr_t from_mpi(MPI_Request request) {
  if (request == MPI_REQUEST_NULL) return 0;
  std::uintptr_t handle = 0;
  std::memcpy(&handle, &request, sizeof request);
  return handle;
}

MPI_Comm comm_of(std::uintptr_t handle) {
  MPI_Comm comm = MPI_COMM_NULL;
  std::memcpy(&comm, &handle, sizeof comm);
  return comm;
}

int checked_count(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    fail(cat("an MPI message of ", count, " elements is larger than MPI's int count allows"));
  }
  return static_cast<int>(count);
}

// How long a wait may last: --comm-timeout, or less once a stop signal arrived (world.hpp).
double wait_limit(double timeout) {
  return stop_signal_pending() ? std::min(timeout, kStopGrace) : timeout;
}

}  // namespace

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

// Watches the blocking collectives (world.hpp). With MPI_THREAD_MULTIPLE it answers pings while
// the main thread is blocked in one, so a rank waiting for the others is not taken for a stuck
// one, and past the deadline pings every rank itself and names the silent ones. Without it (an
// MPI that lacks the level) it makes no MPI call and cannot name anyone. Either way it then ends
// the process with exit code 4, and the launcher ends the job.
struct World::Watchdog {
  // A collective that lasts longer than this is a wait for others: pings are answered from here.
  static constexpr double kServeAfter = 0.2;

  std::mutex mutex;  // also serialises this thread's MPI calls with arming (see guarded())
  std::condition_variable changed;
  bool armed = false;
  bool quit = false;
  Clock::time_point armed_at;
  const char* call = "";  // the MPI call
  std::string after;      // the last wait before it: where in the run it is
  const World* world = nullptr;
  bool pings = false;  // MPI_THREAD_MULTIPLE: this thread may call MPI
  std::thread thread;

  Watchdog(const World* owner, bool may_ping)
      : world(owner), pings(may_ping), thread([this] { watch(); }) {}
  ~Watchdog() {
    {
      const std::lock_guard lock(mutex);
      quit = true;
    }
    changed.notify_all();
    thread.join();
  }
  // Polls a few times a second: arming then costs the computing thread only an uncontended
  // lock, no wake-up.
  void watch() {
    std::unique_lock lock(mutex);
    auto last_wake = Clock::now();
    while (!quit) {
      changed.wait_for(lock, std::chrono::milliseconds(50));
      const auto now = Clock::now();
      if (armed && now - last_wake > kSuspended) armed_at += now - last_wake;  // as wait_until
      last_wake = now;
      if (!armed) continue;
      const double waited = seconds_since(armed_at);
      if (pings && waited >= kServeAfter) world->serve_pings();
      if (waited < wait_limit(world->timeout())) continue;
      const std::string what = cat(call, after.empty() ? "" : " after ", after);
      std::string message;
      if (pings) {
        message = world->timeout_message(what, world->unresponsive_ranks(), waited);
      } else {
        message = cat(what, " did not complete within ", short_duration(waited),
                      " (--comm-timeout or a stop signal): a rank stopped or died during it");
      }
      std::fprintf(stderr, "%s: error: rank %d (%s): %s\n", log::program().c_str(), world->rank(),
                   world->host().c_str(), message.c_str());
      std::fflush(stderr);
      std::_Exit(static_cast<int>(ExitCode::kCommunication));
    }
  }
};

void World::guarded(const char* what, const std::function<void()>& collective) const {
  if (watchdog_) {
    const std::lock_guard lock(watchdog_->mutex);
    watchdog_->armed = true;
    watchdog_->call = what;
    watchdog_->after = last_wait_;
    watchdog_->armed_at = Clock::now();
  }
  collective();
  if (watchdog_) {
    const std::lock_guard lock(watchdog_->mutex);
    watchdog_->armed = false;
  }
}

World::World() : host_(host_name()) {
  if (!launched_by_mpi()) return;
  int initialized = 0;
  MBKIT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    // The main thread makes every MPI call but the watchdog's (background threads prepare
    // data); the watchdog pings only when the library allows it.
    MBKIT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    initialized_here_ = true;
  }
  int level = MPI_THREAD_SINGLE;
  MBKIT_MPI_CHECK(MPI_Query_thread(&level));
  MBKIT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MBKIT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MBKIT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm local = MPI_COMM_NULL;
  MBKIT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MBKIT_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MBKIT_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MBKIT_MPI_CHECK(MPI_Comm_free(&local));
  // Every rank's host, for messages that name a silent rank: 256 bytes each, once.
  constexpr int kHostBytes = 256;
  std::vector<char> own(kHostBytes, '\0'), all(static_cast<std::size_t>(size_) * kHostBytes);
  host_.copy(own.data(), kHostBytes - 1);
  MBKIT_MPI_CHECK(MPI_Allgather(own.data(), kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR,
                                MPI_COMM_WORLD));
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + std::size_t(r) * kHostBytes);
  MPI_Comm diagnosis = MPI_COMM_NULL;
  MBKIT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &diagnosis));
  MBKIT_MPI_CHECK(MPI_Comm_set_errhandler(diagnosis, MPI_ERRORS_RETURN));
  std::memcpy(&diagnosis_comm_, &diagnosis, sizeof diagnosis);
  if (size_ > 1) watchdog_ = std::make_unique<Watchdog>(this, level == MPI_THREAD_MULTIPLE);
}

World::~World() {
  watchdog_.reset();
  if (!initialized_here_) return;
  if (diagnosis_comm_ != 0) {
    MPI_Comm diagnosis = comm_of(diagnosis_comm_);
    MPI_Comm_free(&diagnosis);
  }
  MPI_Finalize();
}

Request World::ibarrier() const {
  if (size_ == 1) return {};
  MPI_Request request = MPI_REQUEST_NULL;
  MBKIT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &request));
  return {from_mpi(request), -1};
}

Request World::iallreduce_sum(std::span<float> values) const {
  if (size_ == 1 || values.empty()) return {};
  MPI_Request request = MPI_REQUEST_NULL;
  MBKIT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values.data(), checked_count(values.size()),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request));
  in_flight::track(from_mpi(request), values.data(), values.size_bytes(),
                   in_flight::Use::kCollective);
  return {from_mpi(request), -1};
}

Request World::ibroadcast(std::span<std::uint8_t> bytes, int root) const {
  if (size_ == 1 || bytes.empty()) return {};
  MPI_Request request = MPI_REQUEST_NULL;
  MBKIT_MPI_CHECK(MPI_Ibcast(bytes.data(), checked_count(bytes.size()), MPI_BYTE, root,
                             MPI_COMM_WORLD, &request));
  in_flight::track(from_mpi(request), bytes.data(), bytes.size(), in_flight::Use::kCollective);
  return {from_mpi(request), -1};
}

void World::rendezvous(const std::string& what) const {
  if (size_ == 1) return;
  Request pending = ibarrier();
  wait_until([&] { return test(pending); }, what);
}

void World::allreduce_sum(std::span<float> values) const {
  if (size_ == 1 || values.empty()) return;
  guarded("MPI_Allreduce", [&] {
    MBKIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), checked_count(values.size()),
                                  MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  });
}

void World::allreduce_sum(std::span<double> values) const {
  if (size_ == 1 || values.empty()) return;
  guarded("MPI_Allreduce", [&] {
    MBKIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), checked_count(values.size()),
                                  MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  });
}

void World::allreduce_sum(std::span<std::int64_t> values) const {
  if (size_ == 1 || values.empty()) return;
  guarded("MPI_Allreduce", [&] {
    MBKIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), checked_count(values.size()),
                                  MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  });
}

void World::reduce_sum(std::span<float> values, int root) const {
  if (size_ == 1 || values.empty()) return;
  const int count = checked_count(values.size());
  guarded("MPI_Reduce", [&] {
    if (rank_ == root) {
      MBKIT_MPI_CHECK(
          MPI_Reduce(MPI_IN_PLACE, values.data(), count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD));
    } else {
      MBKIT_MPI_CHECK(
          MPI_Reduce(values.data(), nullptr, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD));
    }
  });
}

void World::broadcast(std::span<float> values, int root) const {
  if (size_ == 1 || values.empty()) return;
  guarded("MPI_Bcast", [&] {
    MBKIT_MPI_CHECK(
        MPI_Bcast(values.data(), checked_count(values.size()), MPI_FLOAT, root, MPI_COMM_WORLD));
  });
}

void World::broadcast(std::span<std::uint8_t> bytes, int root) const {
  if (size_ == 1 || bytes.empty()) return;
  guarded("MPI_Bcast", [&] {
    MBKIT_MPI_CHECK(
        MPI_Bcast(bytes.data(), checked_count(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD));
  });
}

std::vector<std::uint64_t> World::all_gather(std::uint64_t value) const {
  std::vector<std::uint64_t> values(static_cast<std::size_t>(size_), value);
  if (size_ == 1) return values;
  rendezvous("start-up");
  guarded("MPI_Allgather", [&] {
    MBKIT_MPI_CHECK(
        MPI_Allgather(&value, 1, MPI_UINT64_T, values.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  });
  return values;
}

void World::all_gather_in_place(std::span<std::uint8_t> blocks, std::size_t block_bytes) const {
  MBKIT_CHECK(blocks.size() == block_bytes * static_cast<std::size_t>(size_), "gathering ", size_,
              " blocks of ", block_bytes, " bytes into ", blocks.size());
  if (size_ == 1 || block_bytes == 0) return;
  guarded("MPI_Allgather", [&] {
    MBKIT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, blocks.data(),
                                  checked_count(block_bytes), MPI_BYTE, MPI_COMM_WORLD));
  });
}

void World::gather_blocks(std::span<const std::uint8_t> mine, std::span<std::uint8_t> blocks,
                          std::size_t block_bytes, int root, int first_sender) const {
  MBKIT_CHECK(root < first_sender && first_sender < size_, "gather to ", root, " from ranks ",
              first_sender, " on of ", size_);
  const bool sends = rank_ >= first_sender;
  MBKIT_CHECK(!sends || mine.size() == block_bytes, "sending ", mine.size(),
              " bytes as a block of ", block_bytes);
  std::vector<int> counts(static_cast<std::size_t>(size_), 0), offsets(counts.size(), 0);
  if (rank_ == root) {
    MBKIT_CHECK(blocks.size() == block_bytes * static_cast<std::size_t>(size_ - first_sender),
                "gathering into ", blocks.size(), " bytes");
    for (int r = first_sender; r < size_; ++r) {
      counts[static_cast<std::size_t>(r)] = checked_count(block_bytes);
      offsets[static_cast<std::size_t>(r)] =
          checked_count(block_bytes * static_cast<std::size_t>(r - first_sender));
    }
  }
  guarded("MPI_Gatherv", [&] {
    MBKIT_MPI_CHECK(MPI_Gatherv(sends ? mine.data() : nullptr,
                                sends ? checked_count(block_bytes) : 0, MPI_BYTE, blocks.data(),
                                counts.data(), offsets.data(), MPI_BYTE, root, MPI_COMM_WORLD));
  });
}

std::vector<std::string> World::all_gather(const std::string& text) const {
  if (size_ == 1) return {text};
  const auto lengths = all_gather(static_cast<std::uint64_t>(text.size()));
  std::vector<int> counts, offsets;
  int total = 0;
  for (const auto length : lengths) {
    counts.push_back(checked_count(length));
    offsets.push_back(total);
    total += counts.back();
  }
  std::string joined(static_cast<std::size_t>(total), '\0');
  guarded("MPI_Allgatherv", [&] {
    MBKIT_MPI_CHECK(MPI_Allgatherv(text.data(), checked_count(text.size()), MPI_CHAR, joined.data(),
                                   counts.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD));
  });
  std::vector<std::string> texts;
  for (int i = 0; i < size_; ++i) {
    texts.push_back(joined.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)]),
                                  static_cast<std::size_t>(counts[static_cast<std::size_t>(i)])));
  }
  return texts;
}

Request World::isend(const void* data, std::size_t bytes, int destination, int tag) const {
  MPI_Request request = MPI_REQUEST_NULL;
  MBKIT_MPI_CHECK(
      MPI_Isend(data, checked_count(bytes), MPI_BYTE, destination, tag, MPI_COMM_WORLD, &request));
  in_flight::track(from_mpi(request), data, bytes, in_flight::Use::kSend);
  return {from_mpi(request), destination};
}

Request World::irecv(void* data, std::size_t bytes, int source, int tag) const {
  MPI_Request request = MPI_REQUEST_NULL;
  MBKIT_MPI_CHECK(
      MPI_Irecv(data, checked_count(bytes), MPI_BYTE, source, tag, MPI_COMM_WORLD, &request));
  in_flight::track(from_mpi(request), data, bytes, in_flight::Use::kReceive);
  return {from_mpi(request), source};
}

bool World::test(Request& request, std::size_t* bytes) const {
  if (!request.pending()) return true;
  MPI_Request mpi_request = to_mpi(request.handle);
  int done = 0;
  MPI_Status status;
  MBKIT_MPI_CHECK(MPI_Test(&mpi_request, &done, &status));
  if (!done) return false;
  in_flight::forget(request.handle);
  request.handle = 0;
  if (bytes != nullptr) {
    int count = 0;
    MBKIT_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
    *bytes = static_cast<std::size_t>(count);
  }
  return true;
}

void World::wait(Request& request, const std::string& what) const {
  const int peer = request.peer;
  wait_until([&] { return test(request); }, what,
             [peer]() { return peer >= 0 ? std::vector<int>{peer} : std::vector<int>{}; });
}

void World::cancel(Request& request) const {
  if (!request.pending()) return;
  MPI_Request mpi_request = to_mpi(request.handle);
  MBKIT_MPI_CHECK(MPI_Cancel(&mpi_request));
  // A receive that had matched completes only once its message is in: a peer that stopped
  // halfway would hold an MPI_Wait forever, so the wait has every wait's deadline.
  wait(request, request.peer >= 0 ? cat("cancelling a receive from rank ", request.peer)
                                  : std::string("cancelling a receive"));
}

void World::wait_until(const std::function<bool()>& done, const std::string& what,
                       const std::function<std::vector<int>()>& missing) const {
  last_wait_ = what;  // names the place of a collective that follows (the watchdog's message)
  if (done()) return;
  auto start = Clock::now();
  auto last_poll = start;
  // Three phases. Spin first: most waits of a balanced run are short. Then sched_yield: the
  // core goes to any rank that has work on it, and the wait still ends within microseconds of
  // the event. Past a few milliseconds (a straggler, a master waiting for its workers), sleep
  // between polls, backing off to 1 ms, so a long wait costs next to no CPU.
  constexpr double kSpinSeconds = 50e-6;
  auto delay = std::chrono::microseconds(50);
  std::int64_t polls = 0;
  while (!done()) {
    // A poll loop that did not run for long was stopped itself (SIGSTOP; mpirun sends SIGCONT
    // before it ends a job): that time is not waiting for the others, who must not be blamed.
    const auto now = Clock::now();
    if (now - last_poll > kSuspended) start += now - last_poll;
    last_poll = now;
    const double waited = seconds_since(start);
    if (++polls % 64 == 0 || waited > kYieldWaitSeconds) serve_pings();
    if (waited > wait_limit(timeout_))
      timed_out(what, missing ? missing() : std::vector<int>{}, waited);
    if (wait_mode_ == WaitMode::kSpin || waited < kSpinSeconds) continue;
    if (waited < kYieldWaitSeconds) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 3 / 2, std::chrono::microseconds(1000));
  }
}

void World::serve_pings() const {
  if (diagnosis_comm_ == 0) return;
  const MPI_Comm diagnosis = comm_of(diagnosis_comm_);
  while (true) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, diagnosis, &arrived, &status) != MPI_SUCCESS ||
        !arrived)
      return;
    int payload = 0;
    if (MPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPingTag, diagnosis, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      return;
    // A tiny message goes out eagerly: this send does not wait for the pinging rank.
    MPI_Send(&rank_, 1, MPI_INT, status.MPI_SOURCE, kPongTag, diagnosis);
  }
}

std::vector<int> World::unresponsive_ranks() const {
  const MPI_Comm diagnosis = comm_of(diagnosis_comm_);
  std::vector<MPI_Request> sends, receives;
  std::vector<int> payload(static_cast<std::size_t>(size_), 0), answered(payload.size(), 0);
  std::vector<int> peers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request send = MPI_REQUEST_NULL, receive = MPI_REQUEST_NULL;
    MPI_Isend(&rank_, 1, MPI_INT, peer, kPingTag, diagnosis, &send);
    MPI_Irecv(&payload[static_cast<std::size_t>(peer)], 1, MPI_INT, peer, kPongTag, diagnosis,
              &receive);
    sends.push_back(send);
    receives.push_back(receive);
    peers.push_back(peer);
  }
  const auto start = Clock::now();
  while (seconds_since(start) < kPingGrace) {
    serve_pings();
    bool all = true;
    for (std::size_t i = 0; i < receives.size(); ++i) {
      if (answered[i]) continue;
      int done = 0;
      if (receives[i] != MPI_REQUEST_NULL &&
          MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        answered[i] = 1;
      } else {
        all = false;
      }
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int> silent;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!answered[i]) silent.push_back(peers[i]);
  }
  // The requests are left pending: the job is about to be aborted.
  return silent;
}

double World::wait_deadline() const {
  return wait_limit(timeout_);
}

void World::timed_out(const std::string& what, std::vector<int> missing, double waited) const {
  if (missing.empty() && size_ > 1) missing = unresponsive_ranks();
  throw Error(timeout_message(what, missing, waited), ExitCode::kCommunication);
}

std::string World::where_ranks_run(const std::vector<int>& ranks) const {
  std::set<std::string> hosts;
  std::string each;
  for (const int rank : ranks) {
    if (rank < 0 || static_cast<std::size_t>(rank) >= hosts_.size()) return "";
    const std::string& host = hosts_[static_cast<std::size_t>(rank)];
    hosts.insert(host);
    each += cat(each.empty() ? "" : ", ", rank, " on ", host);
  }
  if (hosts.empty()) return "";
  const char* subject = ranks.size() > 1 ? "; they run on " : "; it runs on ";
  return hosts.size() == 1 ? cat(subject, "host ", *hosts.begin()) : cat("; they run: ", each);
}

std::string World::timeout_message(const std::string& what, const std::vector<int>& missing,
                                   double waited) const {
  const bool stopping = wait_limit(timeout_) < timeout_;
  std::string message =
      stopping ? cat(what, ": nothing for ", short_duration(waited), ", stopping after a signal")
               : cat(what, ": nothing for ", timeout_, " s (--comm-timeout)");
  if (!missing.empty()) {
    message += cat("; rank", missing.size() > 1 ? "s " : " ", rank_list(missing),
                   missing.size() > 1 ? " do" : " does",
                   " not answer (stuck, dead, much slower, or blocked by one that is)",
                   where_ranks_run(missing));
  }
  return message;
}

void World::abort(int code) const {
  std::fflush(stderr);
  std::fflush(stdout);
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int World::run_collectively(const std::function<int()>& body) {
  try {
    const int status = body();
    rendezvous("the end of the run");
    return status;
  } catch (const std::exception& error) {
    if (!distributed()) throw;
    const auto* mbkit_error = dynamic_cast<const Error*>(&error);
    const ExitCode code = mbkit_error != nullptr ? mbkit_error->code() : ExitCode::kFailure;
    if (code == ExitCode::kUsage && rank() != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kQuietRankGraceMs));
    } else {
      // Usage errors are everyone's; others name the rank (ranks > 0 have it in the prefix).
      const std::string where = code != ExitCode::kUsage && rank() == 0
                                    ? cat("rank 0 (", host(), "): ")
                                    : (rank() != 0 ? cat("(", host(), ") ") : "");
      std::fprintf(stderr, "%s: error: %s%s\n", log::program().c_str(), where.c_str(),
                   error.what());
    }
    abort(static_cast<int>(code));
  }
}

}  // namespace mbkit::comm
