// mb-bench-bandwidth --device cuda (mbkit/bench/device_bench.hpp): the collectives on GPU
// buffers, with the host path's values, sizes and check (collective_parts.hpp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

#include "collective_parts.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::bench {
namespace {

using detail::buffer_sizes;
using detail::expected;
using detail::fill;

// The pinned host bytes as elements (cudaMallocHost's memory, aligned for any type).
template <class T>
std::span<T> typed(std::span<std::uint8_t> bytes) {
  return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
}

// Whether this rank's receive buffer holds a result (reduce and gather leave it to the root).
bool holds_result(Op op, int rank) {
  return (op != Op::kReduce && op != Op::kGather) || rank == 0;
}

template <class T>
class DeviceRun {
 public:
  DeviceRun(const comm::World& world, DeviceBench& bench, Transport transport, Op op)
      : world_(world), bench_(bench), nccl_(transport == Transport::kNccl), op_(op) {}

  /// Buffers for `count` elements (the row's count), filled as the host path fills them.
  void prepare(std::size_t count) {
    count_ = count;
    what_ = cat(op_name(op_), " of ", count * sizeof(T), " bytes");
    const auto [send_count, receive_count] = buffer_sizes(op_, count, world_.size());
    bench_.resize(send_count * sizeof(T), receive_count * sizeof(T));
    fill(send(), world_.rank());
    reset_receive();
    bench_.copy(DeviceCopy::kSendToDevice);
  }

  /// The receive buffer before a checked iteration: -1 everywhere but a bcast root's data.
  void reset_receive() {
    const auto receive = this->receive();
    std::fill(receive.begin(), receive.end(), static_cast<T>(-1));
    if (op_ == Op::kBcast && world_.rank() == 0) fill(receive, 0);
    bench_.copy(DeviceCopy::kReceiveToDevice);
    bench_.synchronize();
  }

  /// One iteration: queued (nccl), or done (mpi: staged through the pinned host buffers).
  void iterate() {
    if (nccl_) {
      wait_ready();
      bench_.start(op_, dtype(), count_);
      return;
    }
    // bcast reads and writes the receive buffer (in place, the root's data); the others read
    // the send buffer.
    const bool root = world_.rank() == 0;
    if (op_ != Op::kBcast) {
      bench_.copy(DeviceCopy::kSendToHost);
    } else if (root) {
      bench_.copy(DeviceCopy::kReceiveToHost);
    }
    bench_.synchronize();
    // Blocking MPI calls, under the watchdog: a rank that stopped or died is named past
    // --comm-timeout (arming it costs next to nothing beside the copies and the synchronising).
    world_.guarded(what_.c_str(), [&] {
      detail::run_once(world_, op_, send().data(), send().size(), receive().data(),
                       receive().size());
    });
    if (holds_result(op_, world_.rank())) {
      bench_.copy(DeviceCopy::kReceiveToDevice);
      bench_.synchronize();
    }
  }

  /// Waits for everything queued (nccl; the mpi iterations are complete when they return).
  void complete() {
    if (!nccl_) return;
    world_.wait_until([&] { return bench_.poll(); },
                      cat("NCCL ", op_name(op_), " of ", count_ * sizeof(T), " bytes"));
  }

  /// Seconds of one of `iters` iterations: CUDA events around the queued loop (nccl), the
  /// host's clock around the synchronised ones (mpi).
  double timed(int iters) {
    world_.barrier();
    if (!nccl_) {
      const auto start = SteadyClock::now();
      for (int i = 0; i < iters; ++i) iterate();
      return seconds_since(start) / iters;
    }
    bench_.record_start();
    for (int i = 0; i < iters; ++i) iterate();
    wait_ready();  // the stop event must follow the last call's kernel
    bench_.record_stop();
    complete();
    return bench_.recorded_seconds() / iters;
  }

  /// Wrong elements of this rank after one more iteration (copied back to the host).
  std::int64_t check(bool corrupt) {
    reset_receive();
    world_.barrier();
    iterate();
    complete();
    bench_.copy(DeviceCopy::kReceiveToHost);
    bench_.synchronize();
    const auto receive = this->receive();
    if (corrupt && world_.rank() == 0) receive[0] += static_cast<T>(1);
    const std::size_t block = count_ / static_cast<std::size_t>(world_.size());
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < receive.size(); ++i) {
      double want = 0;
      if (expected(op_, world_, i, block, want) && receive[i] != static_cast<T>(want)) ++wrong;
    }
    return wrong;
  }

 private:
  static Dtype dtype() { return sizeof(T) == sizeof(float) ? Dtype::kFloat : Dtype::kDouble; }
  std::span<T> send() { return typed<T>(bench_.host_send()); }
  std::span<T> receive() { return typed<T>(bench_.host_receive()); }

  // A non-blocking communicator takes the next call once NCCL queued the last one; waited for
  // where pings are answered and a silent rank is named past the deadline.
  void wait_ready() {
    if (bench_.ready()) return;
    world_.wait_until([&] { return bench_.ready(); },
                      cat("NCCL queuing ", op_name(op_), " of ", count_ * sizeof(T), " bytes"));
  }

  const comm::World& world_;
  DeviceBench& bench_;
  bool nccl_;
  Op op_;
  std::size_t count_ = 0;
  std::string what_;  ///< "allreduce of 4096 bytes": the watchdog's name for an MPI iteration
};

template <class T>
std::vector<Row> measure(const comm::World& world, DeviceBench& bench, Transport transport, Op op,
                         const std::vector<std::size_t>& sizes, const MeasureOptions& options) {
  const int n = world.size();
  DeviceRun<T> run(world, bench, transport, op);
  std::vector<Row> rows;
  if (sizes.empty()) return rows;
  // As the host path: warm-up at the largest size first (NCCL also connects its peers then).
  run.prepare(element_count(op, *std::max_element(sizes.begin(), sizes.end()), sizeof(T), n));
  for (int i = 0; i < options.warmup_iters; ++i) run.iterate();
  run.complete();
  for (const std::size_t bytes : sizes) {
    Row row;
    row.op = op_name(op);
    row.count = element_count(op, bytes, sizeof(T), n);
    row.bytes = row.count * sizeof(T);
    row.type = dtype_name(options.dtype);
    run.prepare(row.count);
    for (int i = 0; i < options.warmup_iters; ++i) run.iterate();
    run.complete();
    const double seconds = run.timed(options.iters_at(bytes));
    set_times(row, gather_seconds(world, seconds), bus_factor(op, n));
    if (options.check) {
      std::int64_t wrong = run.check(options.corrupt);
      world.allreduce_sum(std::span<std::int64_t>(&wrong, 1));
      row.wrong = wrong;
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

Transport parse_transport(const std::string& name) {
  if (name == "mpi") return Transport::kMpi;
  if (name == "nccl") return Transport::kNccl;
  usage_error(cat("--transport: '", name, "' is not mpi or nccl"));
}

const char* transport_name(Transport transport) {
  return transport == Transport::kNccl ? "nccl" : "mpi";
}

bool nccl_has(Op op) {
  return op == Op::kAllreduce || op == Op::kReduce || op == Op::kBcast || op == Op::kAllgather ||
         op == Op::kReduceScatter;
}

std::unique_ptr<DeviceBench> make_device_bench(const comm::World& world, nn::Backend& backend,
                                               bool nccl) {
  std::string why_not;
  if (plugin::cuda_plugin(&why_not) == nullptr) {
    usage_error(cat("--device cuda: CUDA backend ", why_not));
  }
  const auto make_bench = cuda_device_bench_maker();
  MBKIT_CHECK(make_bench != nullptr, "libmbkit-cuda defines no mbkit_cuda_make_device_bench");
  std::array<std::uint8_t, plugin::kNcclIdBytes> id{};
  if (nccl) id = comm::share_nccl_id(world, "--transport nccl");
  std::unique_ptr<DeviceBench> bench(
      make_bench(backend, nccl ? id.data() : nullptr, world.size(), world.rank(), world.timeout()));
  if (!nccl) return bench;
  // Joining is collective: a rank that never joins is found by the wait's deadline (and named).
  try {
    world.wait_until([&] { return bench->ready(); }, "setting up NCCL (ncclCommInitRankConfig)");
  } catch (...) {
    bench->abort();
    throw;
  }
  return bench;
}

std::vector<Row> measure_device_collective(const comm::World& world, DeviceBench& bench,
                                           Transport transport, Op op,
                                           const std::vector<std::size_t>& sizes,
                                           const MeasureOptions& options) {
  MBKIT_CHECK(op != Op::kExchange, "measure_device_collective() of the exchange");
  MBKIT_CHECK(transport == Transport::kMpi || nccl_has(op), "NCCL has no ", op_name(op));
  try {
    return options.dtype == Dtype::kFloat
               ? measure<float>(world, bench, transport, op, sizes, options)
               : measure<double>(world, bench, transport, op, sizes, options);
  } catch (...) {
    bench.abort();  // NCCL's kernels may be spinning on a dead peer: release them
    throw;
  }
}

decltype(&mbkit_cuda_make_device_bench) cuda_device_bench_maker() {
  return MBKIT_CUDA_PLUGIN_FUNCTION(mbkit_cuda_make_device_bench);
}

}  // namespace mbkit::bench
