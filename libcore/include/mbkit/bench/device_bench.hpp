// mb-bench-bandwidth --device cuda: the collectives on GPU buffers. The buffers, copies, events
// and NCCL live in libmbkit-cuda, reached through the CUDA plugin (mbkit/plugin/cuda_plugin.hpp),
// so the core never links CUDA or NCCL and a CPU run never loads them.
//
// Two transports. nccl: the collective runs on the device buffers (ncclAllReduce ...), queued on
// the bench's stream and timed with CUDA events around the timed loop. mpi: each iteration
// copies the operand to pinned host memory, runs the MPI collective there and copies the result
// back (what --comm ps does on GPUs; this Open MPI is not CUDA-aware), timed on the host's clock
// after the stream is synchronised.
//
// No call waits for a peer: the NCCL communicator is non-blocking, and the caller polls ready()
// and poll() with the run's deadline (comm::World::wait_until), aborting it when that passes
// (a dead peer), as the trainers' --allreduce nccl does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/bench/measure.hpp"

namespace mbkit::nn {
class Backend;
}
namespace mbkit::comm {
class World;
}

namespace mbkit::bench {

/// Which buffer of a DeviceBench a copy moves, and which way.
enum class DeviceCopy { kSendToDevice, kReceiveToDevice, kSendToHost, kReceiveToHost };

class DeviceBench {
 public:
  virtual ~DeviceBench() = default;
  /// "NCCL 2.28.9" when made with NCCL, else empty.
  virtual std::string nccl_description() const = 0;
  /// Device send and receive buffers of these sizes, and pinned host buffers beside them
  /// (contents undefined). Waits for the queued work first.
  virtual void resize(std::size_t send_bytes, std::size_t receive_bytes) = 0;
  /// The pinned host buffers (valid until the next resize).
  virtual std::span<std::uint8_t> host_send() = 0;
  virtual std::span<std::uint8_t> host_receive() = 0;
  /// Queues a copy between a device buffer and its host buffer on the bench's stream.
  virtual void copy(DeviceCopy what) = 0;
  /// Waits for the stream (the mpi transport's copies: no peer is involved).
  virtual void synchronize() = 0;
  /// Queue an event on the stream: before the timed loop, and after it once ready().
  virtual void record_start() = 0;
  virtual void record_stop() = 0;
  /// Seconds between the two events, once poll() said the stream is done.
  virtual double recorded_seconds() = 0;

  // NCCL (a bench made without it refuses these).
  /// Whether the communicator takes a call: set up, and its last call enqueued. Throws
  /// mbkit::Error naming the call when it failed.
  virtual bool ready() = 0;
  /// Queues one collective of `count` elements (the row's count, the whole result) from the
  /// send to the receive buffer; rank 0 is the root; bcast is in place on the receive buffer
  /// (as MPI_Bcast). Returns at once; the caller waits for ready() before the next call.
  virtual void start(Op op, Dtype dtype, std::size_t count) = 0;
  /// Whether every call and copy queued so far is done; throws mbkit::Error naming the call on
  /// an asynchronous NCCL error (a peer's failure).
  virtual bool poll() = 0;
  /// Gives up the communicator (a peer died, a deadline passed); safe to call more than once.
  virtual void abort() noexcept = 0;
};

/// How the collectives move the GPU buffers (--transport).
enum class Transport { kMpi, kNccl };
/// --transport mpi|nccl (a usage error naming the flag otherwise).
Transport parse_transport(const std::string& name);
const char* transport_name(Transport transport);

/// Whether NCCL runs `op` (allreduce, reduce, bcast, allgather, reduce-scatter).
bool nccl_has(Op op);

/// A bench on the GPU of `backend` (a CUDA one). With `nccl`, a communicator over every rank
/// of `world`: rank 0 makes NCCL's id, MPI broadcasts it, and the set-up is waited for with
/// the world's deadline (a rank that never joins is named). Usage errors when the backend is not
/// a CUDA one or this mbkit was built without NCCL.
std::unique_ptr<DeviceBench> make_device_bench(const comm::World& world, nn::Backend& backend,
                                               bool nccl);

/// A row per size of a collective on the bench's GPU buffers (every Op but kExchange; nccl:
/// those nccl_has). Collective: every rank calls it with the same arguments. Waits have the
/// world's deadline; past it (a dead peer) the NCCL communicator is aborted and the error names
/// the silent rank (exit code 4).
std::vector<Row> measure_device_collective(const comm::World& world, DeviceBench& bench,
                                           Transport transport, Op op,
                                           const std::vector<std::size_t>& sizes,
                                           const MeasureOptions& options);

}  // namespace mbkit::bench

/// libmbkit-cuda's bench: mb-bench-bandwidth's buffers on the GPU of `backend` (one
/// mbkit_cuda_make_backend made; any other is a usage error); with `nccl_id` (not null) also a
/// non-blocking NCCL communicator of `ranks` as `rank`, set up as
/// mbkit_cuda_make_nccl_allreduce's. Owned by the caller; throws mbkit::Error. Declared here and
/// defined by the plugin (mbkit/plugin/cuda_plugin.hpp).
extern "C" mbkit::bench::DeviceBench* mbkit_cuda_make_device_bench(mbkit::nn::Backend& backend,
                                                                   const std::uint8_t* nccl_id,
                                                                   int ranks, int rank,
                                                                   double timeout);

namespace mbkit::bench {

/// The plugin's mbkit_cuda_make_device_bench; nullptr when the plugin does not load.
decltype(&mbkit_cuda_make_device_bench) cuda_device_bench_maker();

}  // namespace mbkit::bench
