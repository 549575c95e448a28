#include "mbkit/train/exchange.hpp"

#include "exchange_internal.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "mbkit/nn/buffer.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::train {
namespace {

using namespace exchange_detail;

using Clock = SteadyClock;

// A worker's report travels as floats in the sync exchanges' small buffer (exact for counts
// below 2^24, which one worker's step never reaches) and as doubles in async messages. The
// buffer is summed with the gradients, and MPI's sum of a buffer of another size may add some
// elements in another order: the slots are packed so that the buffer keeps its size (ten
// slots; stop and finished_early share one), with one more under ps for the receive time
// (allreduce has no receive of its own; ps's reduce adds each element in rank order).
constexpr std::size_t kReportSlots = 10;

std::size_t report_slots(bool parameter_server) {
  return kReportSlots + (parameter_server ? 1 : 0);
}

}  // namespace

WorkerReport WorkerReport::as_carried(int from_rank, std::int64_t step) const {
  WorkerReport taken;
  taken.rank = from_rank;
  taken.samples = samples;
  taken.loss_sum = loss_sum;
  taken.correct = correct;
  taken.compute_time = compute_time;
  taken.sleep_time = sleep_time;
  taken.send_time = send_time;
  taken.wait_time = wait_time;
  taken.based_on = based_on;
  taken.staleness = step - based_on;
  taken.stop = stop;
  taken.micro_batches = micro_batches;
  return taken;
}

namespace exchange_detail {

void put_report(const WorkerReport& r, float* slot, bool parameter_server) {
  slot[0] = static_cast<float>(r.samples);
  slot[1] = static_cast<float>(r.loss_sum);
  slot[2] = static_cast<float>(r.correct);
  slot[3] = static_cast<float>(r.compute_time);
  slot[4] = static_cast<float>(r.sleep_time);
  slot[5] = static_cast<float>(r.send_time);
  slot[6] = static_cast<float>(r.wait_time);
  slot[7] = static_cast<float>(r.stop + (r.finished_early ? 16 : 0));  // stop codes are < 16
  slot[8] = static_cast<float>(r.micro_batches);
  slot[9] = static_cast<float>(r.exit_time);
  if (parameter_server) slot[10] = static_cast<float>(r.recv_time);
}

WorkerReport get_report(const float* slot, int rank, bool parameter_server) {
  WorkerReport r;
  r.rank = rank;
  r.samples = static_cast<std::int64_t>(slot[0]);
  r.loss_sum = slot[1];
  r.correct = static_cast<std::int64_t>(slot[2]);
  r.compute_time = slot[3];
  r.sleep_time = slot[4];
  r.send_time = slot[5];
  r.wait_time = slot[6];
  const int stop_and_early = static_cast<int>(slot[7]);
  r.stop = stop_and_early % 16;
  r.finished_early = stop_and_early >= 16;
  r.micro_batches = static_cast<std::int64_t>(slot[8]);
  r.exit_time = slot[9];
  r.recv_time = parameter_server ? slot[10] : 0.0;
  return r;
}

}  // namespace exchange_detail

std::size_t report_slot_floats(bool parameter_server) {
  return report_slots(parameter_server);
}

void add_worker_to_sum(std::span<float> sum, std::span<const float> gradients,
                       std::span<const float> state, const WorkerReport& report, int worker,
                       bool parameter_server) {
  const std::size_t slots = report_slots(parameter_server);
  const std::size_t count = gradients.size() + state.size();
  MBKIT_CHECK(sum.size() >= count + (static_cast<std::size_t>(worker) + 1) * slots, "a sum of ",
              sum.size(), " floats for worker ", worker);
  float* total = sum.data();
  if (worker == 0 && !parameter_server) {
    std::copy(gradients.begin(), gradients.end(), total);
    std::copy(state.begin(), state.end(), total + gradients.size());
  } else {
    const float* g = gradients.data();
    for (std::size_t i = 0; i < gradients.size(); ++i) total[i] += g[i];
    float* s = total + gradients.size();
    for (std::size_t i = 0; i < state.size(); ++i) s[i] += state[i];
  }
  // Every other rank's slot holds zeros: the sum leaves this one as it was put.
  put_report(report, total + count + static_cast<std::size_t>(worker) * slots, parameter_server);
}

void finish_gradient(std::span<float> gradients, std::int64_t nominal, std::int64_t total) {
  if (!gradient_rescaled(nominal, total)) return;
  const float factor =
      static_cast<float>(static_cast<double>(nominal) / static_cast<double>(total));
  for (float& g : gradients) g *= factor;
}

// ---------------------------------------------------------------------------------------------
// Synchronous exchanges.

SyncExchange::SyncExchange(const comm::World& world, bool parameter_server, AllreduceVia via,
                           int servers)
    : world_(world), parameter_server_(parameter_server && world.distributed()), servers_(servers) {
  if (parameter_server_ && world.size() < 2) usage_error("--comm ps needs at least 2 ranks");
  shared_memory_ = uses_shared_memory(world, parameter_server, via);
}

bool SyncExchange::uses_shared_memory(const comm::World& world, bool parameter_server,
                                      AllreduceVia via) {
  if (!world.distributed()) return false;
  // ps sums with MPI_Reduce (the original's exchange) unless --allreduce shm asks for the
  // shared-memory sum: the workers' gradients added in rank order, the bits of --emulate.
  if (parameter_server && via != AllreduceVia::kSharedMemory) return false;
  if (via == AllreduceVia::kSharedMemory && !comm::SharedSum::possible(world)) {
    usage_error(cat("--allreduce shm: only ", world.local_size(), " of the ", world.size(),
                    " ranks run on ", world.host(),
                    "; shared memory needs all on one host (use auto or mpi)"));
  }
  return via == AllreduceVia::kSharedMemory ||
         (via == AllreduceVia::kAuto && comm::SharedSum::possible(world));
}

SyncExchange::~SyncExchange() = default;

void SyncExchange::set_in_process(int workers, bool parameter_server) {
  MBKIT_CHECK(workers > 0 && !shared_memory_ && bucket_floats_ == 0 && device_ == nullptr &&
                  !compression_.enabled(),
              "an in-process exchange of ", workers,
              " workers with several ranks, buckets, a device sum or compression");
  in_process_workers_ = workers;
  parameter_server_ = parameter_server;
}

std::span<float> SyncExchange::shared_buffer(std::size_t floats) {
  MBKIT_CHECK(shared_memory_, "shared_buffer() of an exchange that does not use shared memory");
  if (!shared_) shared_ = std::make_unique<comm::SharedSum>(world_, floats);
  MBKIT_CHECK(shared_->buffer().size() == floats, "a shared buffer of ", floats,
              " floats after one of ", shared_->buffer().size());
  return shared_->buffer();
}

void SyncExchange::set_device_allreduce(comm::DeviceAllreduce& sum, nn::Buffer& buffer,
                                        std::size_t floats) {
  MBKIT_CHECK(!parameter_server_ && !shared_memory_ && !compression_.enabled() &&
                  bucket_floats_ == 0 && floats <= buffer.size(),
              "a device sum with ps, shared memory, compression or buckets already set");
  device_ = &sum;
  device_buffer_ = &buffer;
  device_floats_ = floats;
}

void SyncExchange::set_bucket_floats(std::size_t floats) {
  if (floats > 0 && (parameter_server_ || shared_memory_)) {
    usage_error(parameter_server_ ? "--bucket-mb needs --comm allreduce"
                                  : "--bucket-mb: the shared-memory sum has no buckets (it "
                                    "needs every gradient at once); use --allreduce mpi");
  }
  // One rank sums nothing through MPI; a device sum runs all the same (see above).
  bucket_floats_ = world_.distributed() || device_ != nullptr ? floats : 0;
}

void SyncExchange::set_compression(const comm::CompressionSpec& spec) {
  MBKIT_CHECK(!spec.enabled() || (!shared_memory_ && bucket_floats_ == 0 && device_ == nullptr),
              "compression with the shared-memory sum, buckets or a device sum");
  compression_ = spec;
}

// A server's report in the small values: its gather, update and send seconds.
constexpr std::size_t kServerSlots = 3;

std::size_t SyncExchange::server_slots() const {
  // In process one process plays every server: nothing to report through the sum.
  return parameter_server_ && servers_ > 1 && !in_process()
             ? kServerSlots * static_cast<std::size_t>(servers_)
             : 0;
}

// Rank 0 of ps: every server's report (its own, with one server; from the small values'
// server slots, summed over the ranks, with several; in process, where one process updates
// every shard at once, its update's seconds shared out by the shards' sizes).
std::vector<ServerReport> SyncExchange::server_reports(std::span<const float> small,
                                                       std::size_t gradients) const {
  std::vector<ServerReport> reports;
  const float* slots = small.data() + small.size() - server_slots();
  for (int s = 0; s < servers_; ++s) {
    const auto [first, last] = server_shard(gradients, s, servers_);
    ServerReport r;
    r.rank = s;
    r.floats = static_cast<std::int64_t>(last - first);
    r.bytes_received =
        static_cast<std::int64_t>(compression_.encoded_bytes(last - first)) * workers();
    if (servers_ == 1) {
      r.recv_time = gather_time_;
      r.update_time = update_time_;
      r.send_time = shard_send_time_;
    } else if (in_process()) {
      r.update_time =
          update_time_ * static_cast<double>(last - first) / static_cast<double>(gradients);
    } else {
      const float* slot = slots + kServerSlots * static_cast<std::size_t>(s);
      r.recv_time = slot[0];
      r.update_time = slot[1];
      r.send_time = slot[2];
    }
    reports.push_back(r);
  }
  return reports;
}

std::pair<std::size_t, std::size_t> server_shard(std::size_t floats, int server, int servers) {
  const auto at = [&](int s) {
    return floats * static_cast<std::size_t>(s) / static_cast<std::size_t>(servers);
  };
  return {at(server), at(server + 1)};
}

// Gradients as messages: to the servers (each its shard, from every worker) or, for allreduce,
// gathered by every rank; decoded and added in worker order, so the sums do not depend on MPI's
// order of addition. The small values are summed as floats (by every rank with several
// servers: each needs the counts and losses to scale and accept its update).
void SyncExchange::message_sum(std::span<float> gradients, std::span<float> small) {
  const int workers = this->workers();
  std::vector<std::size_t> offsets = {0};  // of each block in encoded_
  const auto block = [&](std::size_t i) {
    return std::span<std::uint8_t>(encoded_.data() + offsets[i], offsets[i + 1] - offsets[i]);
  };
  if (!parameter_server_) {
    const std::size_t bytes = compression_.encoded_bytes(gradients.size());
    for (int w = 0; w < workers; ++w) offsets.push_back(offsets.back() + bytes);
    encoded_.resize(offsets.back());
    residual_.resize(gradients.size(), 0.0f);  // zeros at the first step, then kept
    comm::encode(compression_, gradients, residual_, block(static_cast<std::size_t>(worker())));
    world_.all_gather_in_place(encoded_, bytes);
    world_.allreduce_sum(small);
    std::fill(gradients.begin(), gradients.end(), 0.0f);
    for (int w = 0; w < workers; ++w) {
      comm::add_decoded(compression_, block(static_cast<std::size_t>(w)), gradients);
    }
    return;
  }
  const auto sum_small = [&] {
    if (servers_ > 1) {
      world_.allreduce_sum(small);
    } else {
      world_.reduce_sum(small, 0);
    }
  };
  // One MPI_Gatherv per server (its shard from every worker, in rank order): blocking
  // collectives after the rendezvous, as the one-server MPI_Reduce, rather than messages
  // polled for (which lose the core when ranks share one).
  residual_.resize(computes() ? gradients.size() : 0, 0.0f);
  for (int s = 0; s < servers_; ++s) {
    const auto [first, last] = server_shard(gradients.size(), s, servers_);
    const std::size_t bytes = compression_.encoded_bytes(last - first);
    offsets.assign(1, 0);
    if (world_.rank() == s) {
      for (int w = 0; w < workers; ++w) offsets.push_back(offsets.back() + bytes);
    } else if (computes()) {
      offsets.push_back(bytes);
    }
    encoded_.resize(offsets.back());
    if (computes()) {
      comm::encode(compression_, gradients.subspan(first, last - first),
                   std::span<float>(residual_).subspan(first, last - first), encoded_);
    }
    const auto gather_start = Clock::now();
    world_.gather_blocks(
        computes() ? std::span<const std::uint8_t>(encoded_) : std::span<const std::uint8_t>(),
        encoded_, bytes, s, servers_);
    if (world_.rank() == s) {
      std::fill(gradients.begin(), gradients.end(), 0.0f);  // the other shards are not ours
      for (int w = 0; w < workers; ++w) {
        comm::add_decoded(compression_, block(static_cast<std::size_t>(w)),
                          gradients.subspan(first, last - first));
      }
      gather_time_ = seconds_since(gather_start);
    }
  }
  if (server_slots() > 0 && world_.rank() < servers_) {  // the other ranks' slots are zero
    float* slot = small.data() + small.size() - server_slots() +
                  kServerSlots * static_cast<std::size_t>(world_.rank());
    slot[0] = static_cast<float>(gather_time_);
    slot[1] = static_cast<float>(update_time_);
    slot[2] = static_cast<float>(shard_send_time_);
  }
  sum_small();
}

void SyncExchange::gradients_ready(std::span<float> gradients, std::size_t from) {
  if (bucket_floats_ == 0) return;
  const std::size_t size = device_ != nullptr ? device_floats_ : gradients.size();
  MBKIT_CHECK(from <= size, "gradients final from ", from, " of ", size);
  const auto start = Clock::now();
  if (started_from_ == kNoBucket) started_from_ = size;
  if (from < started_from_ && started_from_ - from >= bucket_floats_) {
    if (device_ != nullptr) {
      start_device_sum(from, started_from_ - from);
    } else {
      bucket_sums_.push_back(world_.iallreduce_sum(gradients.subspan(from, started_from_ - from)));
    }
    started_from_ = from;
  } else if (device_ == nullptr) {
    // libnbc moves a sum on only inside MPI calls.
    for (auto& sum : bucket_sums_) world_.test(sum);
  }
  progress_time_ += seconds_since(start);
}

void SyncExchange::finish_buckets(std::span<float> gradients, std::span<float> small,
                                  const std::string& what) {
  const auto start = Clock::now();
  bucket_sums_.push_back(world_.iallreduce_sum(gradients.first(started_from_)));
  bucket_sums_.push_back(world_.iallreduce_sum(small));
  started_from_ = kNoBucket;
  const auto all_done = [&] {
    bool done = true;
    for (auto& sum : bucket_sums_) done = world_.test(sum) && done;
    return done;
  };
  // Arrival of every rank is the wait (the sums progress meanwhile), the rest is the sending.
  comm::Request barrier = world_.ibarrier();
  world_.wait_until(
      [&] {
        all_done();
        return world_.test(barrier);
      },
      cat("waiting for the other ranks at ", what));
  wait_time_ = seconds_since(start);
  world_.wait_until(all_done, cat("summing the gradients of ", what));
  bucket_sums_.clear();
  send_time_ = seconds_since(start) - wait_time_;
}

void SyncExchange::start_device_sum(std::size_t from, std::size_t count) {
  if (count == 0) return;
  try {
    // A non-blocking communicator takes a call once NCCL queued the previous one; waited for
    // here, where pings are answered and a silent rank is named past the deadline.
    world_.wait_until([&] { return device_->ready(); }, "NCCL queuing the previous sum");
    device_->start(*device_buffer_, from, count);
  } catch (...) {
    device_->abort();
    throw;
  }
  ++device_sums_;
}

void SyncExchange::device_sum(std::span<float> small, const std::string& what) {
  const auto start = Clock::now();
  try {
    if (started_from_ == kNoBucket) started_from_ = device_floats_;  // no bucket: one sum
    start_device_sum(0, started_from_);
    started_from_ = kNoBucket;
    device_sums_ = 0;
    wait_time_ = 0;
    if (world_.distributed()) {
      // Arrival of every rank is the wait (a dead peer is named here, as in the MPI sum);
      // the device sums progress meanwhile, and their errors end the wait.
      comm::Request barrier = world_.ibarrier();
      world_.wait_until(
          [&] {
            device_->poll();
            return world_.test(barrier);
          },
          cat("waiting for the other ranks at ", what));
      wait_time_ = seconds_since(start);
      world_.allreduce_sum(small);  // the state and reports: floats through MPI, as before
    }
    world_.wait_until([&] { return device_->poll(); },
                      cat("summing the gradients of ", what, " with NCCL (ncclAllReduce)"));
  } catch (...) {
    device_->abort();  // NCCL's kernels may be spinning on a dead peer: release them
    throw;
  }
  send_time_ = seconds_since(start) - wait_time_;
}

std::size_t SyncExchange::tail_floats(std::size_t state_size) const {
  return state_size + static_cast<std::size_t>(workers()) * report_slots(parameter_server_) +
         server_slots();
}

CombinedStep SyncExchange::combine(std::span<float> gradients, std::span<float> state,
                                   const WorkerReport& report, std::int64_t step,
                                   std::int64_t nominal, std::span<float> tail) {
  CombinedStep result;
  send_time_ = wait_time_ = recv_time_ = 0;
  if (!world_.distributed() && !in_process()) {
    if (device_ != nullptr) {
      device_sum({}, cat("step ", step + 1));
      send_time_ += std::exchange(progress_time_, 0.0);
    }
    add_up(result, report);
    finish_gradient(gradients, nominal, result.samples);
    return result;
  }
  const int workers = this->workers();
  const std::size_t state_size = state.size();
  const bool fused = !tail.empty();
  if (fused) {
    MBKIT_CHECK(tail.size() == tail_floats(state_size) &&
                    tail.data() == gradients.data() + gradients.size(),
                "the exchange's tail must be tail_floats() floats right after the gradients");
  } else {
    small_.resize(tail_floats(state_size));
  }
  const std::span<float> small = fused ? tail : std::span<float>(small_);
  MBKIT_CHECK(fused || !in_process(), "an in-process exchange's sum comes with its tail");
  if (in_process()) {
    // The hosted workers' sum is complete (add_worker_to_sum): nothing to put or move.
  } else if (computes()) {
    std::fill(small.begin(), small.end(), 0.0f);
    std::copy(state.begin(), state.end(), small.begin());
    put_report(report,
               small.data() + state_size +
                   static_cast<std::size_t>(worker()) * report_slots(parameter_server_),
               parameter_server_);
  } else {
    std::fill(small.begin(), small.end(), 0.0f);
    std::fill(gradients.begin(), gradients.end(), 0.0f);
  }
  // One message when the small values follow the gradients, two otherwise.
  const auto reduce = [&](auto&& collective) {
    if (fused) {
      collective(std::span<float>(gradients.data(), gradients.size() + small.size()));
    } else {
      collective(gradients);
      collective(small);
    }
  };
  const std::string what = cat("step ", step + 1);
  const auto start = Clock::now();
  if (bucket_sums_.empty() && device_sums_ == 0) started_from_ = kNoBucket;  // one sum
  const double progressed = progress_time_;
  progress_time_ = 0;
  MBKIT_CHECK(bucket_sums_.empty() || started_from_ <= gradients.size(),
              "combine() with other gradients than the buckets were started on");
  if (in_process()) {
    result.wait_time = 0;
  } else if (device_ != nullptr) {
    device_sum(small, what);
    send_time_ += progressed;
    result.wait_time = wait_time_;
  } else if (shared_memory_) {
    // The sum's own rendezvous is the wait: every rank announces its complete buffer.
    const std::size_t floats = gradients.size() + small.size();
    const std::span<float> buffer = shared_buffer(floats);
    const bool in_place = fused && gradients.data() == buffer.data();
    if (!in_place) {
      std::copy(gradients.begin(), gradients.end(), buffer.begin());
      std::copy(small.begin(), small.end(),
                buffer.begin() + static_cast<std::ptrdiff_t>(gradients.size()));
    }
    wait_time_ = shared_->sum(what);
    if (!in_place) {
      std::copy_n(buffer.begin(), gradients.size(), gradients.begin());
      std::copy_n(buffer.begin() + static_cast<std::ptrdiff_t>(gradients.size()), small.size(),
                  small.begin());
    }
    send_time_ = seconds_since(start) - wait_time_;
    result.wait_time = wait_time_;
  } else if (!bucket_sums_.empty()) {
    finish_buckets(gradients, small, what);
    send_time_ += progressed;
    result.wait_time = wait_time_;
  } else if (parameter_server_ && world_.rank() == 0) {
    // The master learns who is late from the workers' arrival messages.
    arrivals_.assign(static_cast<std::size_t>(workers), 0);
    std::vector<comm::Request> arrivals;
    for (int w = 0; w < workers; ++w) {
      arrivals.push_back(world_.irecv(&arrivals_[static_cast<std::size_t>(w)], sizeof(std::int32_t),
                                      rank_of(w), kArrivalTag));
    }
    comm::Request barrier = world_.ibarrier();
    world_.wait_until(
        [&] {
          bool all = true;
          for (auto& arrival : arrivals) all = world_.test(arrival) && all;
          return world_.test(barrier) && all;
        },
        cat("master waiting for the gradients of ", what),
        [&] {
          std::vector<int> late;
          for (int w = 0; w < workers; ++w) {
            if (arrivals[static_cast<std::size_t>(w)].pending()) late.push_back(rank_of(w));
          }
          return late;
        });
    result.wait_time = seconds_since(start);
    const auto send_start = Clock::now();
    if (messages()) {
      message_sum(gradients, small);
    } else {
      reduce([&](std::span<float> values) { world_.reduce_sum(values, 0); });
    }
    send_time_ = seconds_since(send_start);
    if (servers_ == 1) gather_time_ = send_time_;
  } else {
    comm::Request arrival;
    if (parameter_server_ && computes()) {
      arrivals_.assign(1, static_cast<std::int32_t>(step));
      arrival = world_.isend(arrivals_.data(), sizeof(std::int32_t), 0, kArrivalTag);
    }
    comm::Request barrier = world_.ibarrier();
    world_.wait_until(
        [&] {
          const bool sent = world_.test(arrival);
          return world_.test(barrier) && sent;
        },
        cat("waiting for the other ranks at ", what));
    wait_time_ = seconds_since(start);
    const auto send_start = Clock::now();
    if (messages()) {
      message_sum(gradients, small);
    } else if (parameter_server_) {
      reduce([&](std::span<float> values) { world_.reduce_sum(values, 0); });
    } else {
      reduce([&](std::span<float> values) { world_.allreduce_sum(values); });
    }
    send_time_ = seconds_since(send_start);
    result.wait_time = wait_time_;
  }
  if (computes() && parameter_server_) return result;  // the servers combine
  for (int w = 0; w < workers; ++w) {
    add_up(result, get_report(small.data() + state_size +
                                  static_cast<std::size_t>(w) * report_slots(parameter_server_),
                              rank_of(w), parameter_server_));
  }
  if (parameter_server_ && world_.rank() == 0) {
    result.servers = server_reports(small, gradients.size());
  }
  const float inverse =
      1.0f / static_cast<float>(state_contributors_ > 0 ? state_contributors_ : workers);
  for (std::size_t i = 0; i < state_size; ++i) state[i] = small[i] * inverse;
  finish_gradient(gradients, nominal, result.samples);
  return result;
}

int SyncExchange::distribute(std::span<float> parameters, std::span<float> state, int stop,
                             std::int64_t step) {
  // In process: the network holds the parameters updated (under mpirun, every rank updates).
  if (!parameter_server_ || in_process()) return stop;
  const auto start = Clock::now();
  small_.assign(state.size() + 1, 0.0f);
  if (world_.rank() == 0) {
    std::copy(state.begin(), state.end(), small_.begin());
    small_.back() = static_cast<float>(stop);
  }
  // Workers wait here while the master updates: yielding, so the master gets the core.
  world_.rendezvous(cat("waiting for the parameters of step ", step));
  const double waited = seconds_since(start);
  const auto send_start = Clock::now();
  for (int server = 0; server < servers_; ++server) {  // each its shard; one server: all
    const auto [first, last] = server_shard(parameters.size(), server, servers_);
    const auto shard_start = Clock::now();
    world_.broadcast(parameters.subspan(first, last - first), server);
    if (world_.rank() == server) shard_send_time_ = seconds_since(shard_start);
  }
  world_.broadcast(small_, 0);
  if (world_.rank() != 0) {
    std::copy(small_.begin(), small_.end() - 1, state.begin());
    wait_time_ += waited;
    recv_time_ = seconds_since(send_start);
    send_time_ += recv_time_;
  }
  return static_cast<int>(small_.back());
}

}  // namespace mbkit::train
