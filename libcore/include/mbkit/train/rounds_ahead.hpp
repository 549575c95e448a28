// The emulated rounds a rank hosting a share of the workers (--emulate under mpirun) computes
// before they are taken. Every rank plays the same master and takes each round's result from
// the rank hosting its worker (a broadcast), so a rank computing a round only when it is taken
// makes the others wait: the ranks take turns. Instead a host computes its started rounds while
// it waits for a broadcast (the soonest due first), so the ranks' rounds are computed at the
// same time. A round's result depends only on its worker and the parameters it started from,
// never on when it is computed: early or at its take, the same bits.
//
// The results computed and not yet taken stay within a bound (as DBSL --sync's pushes computed
// ahead): past it a round waits to be computed at its take.
//
//   memory: a few dozen bytes per started round of a hosted worker; the results themselves are
//           the caller's (counted here: at most `bound_bytes`).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

namespace mbkit::comm {
class World;
struct Request;
}  // namespace mbkit::comm

namespace mbkit::train {

/// Waits until every request in `pending` (a host's broadcasts) completed, calling
/// `compute_ahead` between polls, so that this rank computes its own started rounds while the
/// rank the broadcast waits for computes; once it computed nothing (no round is started during
/// a wait, so none will be), waits as World::wait_until; `what` names the wait in a timeout's
/// message.
void wait_computing_ahead(const comm::World& world, std::span<comm::Request> pending,
                          const std::function<bool()>& compute_ahead, const std::string& what);

/// Rank `host`'s `ready` (an emulated worker's predicted ready time) on every rank, this rank
/// computing its own started rounds while it comes (wait_computing_ahead). Not MPI_Bcast: that
/// spins until the host comes (often busy computing a round ahead), taking the core this rank
/// could compute on. The worker's round must not be started yet, so none computed meanwhile
/// is its.
void broadcast_ready_time_computing_ahead(const comm::World& world, int host, double& ready,
                                          const std::function<bool()>& compute_ahead);

/// The default bound on the results computed ahead: 512 MiB (DBSL's kPushesAheadBytes).
inline constexpr std::size_t kRoundsAheadBytes = std::size_t{512} << 20;

/// The bound a run uses: kRoundsAheadBytes, or for tests the environment's
/// MBKIT_EMULATE_AHEAD_BYTES (bytes; 0 computes every round at its take).
std::size_t rounds_ahead_bound();

class RoundsAhead {
 public:
  explicit RoundsAhead(std::size_t bound_bytes) : bound_(bound_bytes) {}

  /// Worker w's round started here, its result due at virtual time `due` (one round a worker).
  void started(int w, double due);
  /// The started round to compute now: the soonest due, if its result's `bytes` stay within the
  /// bound (counted until released()); nothing otherwise.
  std::optional<int> next(std::size_t bytes);
  /// Worker w's started round will not be computed ahead (its take computes it, or it ends).
  void drop(int w);
  /// A result computed ahead was handed on (broadcast): its bytes no longer count.
  void released(std::size_t bytes);

  std::size_t held_bytes() const { return held_; }
  std::size_t pending() const { return pending_.size(); }

 private:
  std::size_t bound_;
  std::size_t held_ = 0;
  std::set<std::pair<double, int>> pending_;  ///< (due, worker), soonest first
  std::map<int, double> due_;                 ///< by worker, for drop()
};

}  // namespace mbkit::train
