// Sums of gradients that live in GPU memory (--allreduce nccl): the data never visits the host.
// The implementation (NCCL) lives in libmbkit-cuda and is reached through the CUDA plugin, so
// the core never links NCCL and a CPU run never loads it. MPI only carries NCCL's unique id
// from rank 0 to the others.
//
// Every sum is started without waiting and queued after the work already queued on the
// backend (the backward pass that produced the gradients); poll() says when all are done. No
// call blocks: a communicator whose peer died is found by the caller's deadline (comm::World's
// waits), and abort() then releases it (ncclCommAbort) so the process can report and exit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mbkit/plugin/cuda_plugin.hpp"

namespace mbkit::nn {
class Backend;
class Buffer;
}  // namespace mbkit::nn

namespace mbkit::comm {

class World;

class DeviceAllreduce {
 public:
  virtual ~DeviceAllreduce() = default;
  /// "NCCL 2.28.9", for the start table and the log.
  virtual std::string description() const = 0;
  /// Whether the communicator takes a call: set up (its creation does not block either), and
  /// the last call queued (a non-blocking communicator may still be queuing it when start()
  /// returns). Throws mbkit::Error naming the call when it failed.
  virtual bool ready() = 0;
  /// Starts summing buffer[offset, offset + count) over the ranks, in place, once the work
  /// queued on the backend so far is done; returns at once. Every rank starts the same sums in
  /// the same order.
  virtual void start(nn::Buffer& buffer, std::size_t offset, std::size_t count) = 0;
  /// Whether every sum started so far is complete (work queued on the backend afterwards sees
  /// the sums); throws mbkit::Error naming the call on an asynchronous error (a peer's failure).
  virtual bool poll() = 0;
  /// Gives up the communicator (a peer died or a deadline passed): pending sums are abandoned
  /// and every later call fails. Safe to call more than once.
  virtual void abort() noexcept = 0;
};

/// NCCL's unique id for a communicator over every rank of `world`: rank 0 makes it with the
/// CUDA plugin, MPI broadcasts it. A usage error naming `flag` when the plugin does not load or
/// was built without NCCL. Collective. (mb-bench-bandwidth's NCCL joins with it too.)
std::array<std::uint8_t, plugin::kNcclIdBytes> share_nccl_id(const World& world,
                                                             const std::string& flag);

/// A communicator over every rank of `world`, each on the GPU of its `backend` (a CUDA one):
/// rank 0 makes NCCL's id, MPI broadcasts it, each rank joins. Waits for the set-up with the
/// world's deadline (a rank that never joins is named as a silent one). A usage error when the
/// backend is not a CUDA one or this mbkit was built without NCCL.
std::unique_ptr<DeviceAllreduce> make_nccl_allreduce(const World& world, nn::Backend& backend);

}  // namespace mbkit::comm

/// libmbkit-cuda's NCCL sum: starts joining a communicator of `ranks` ranks as `rank`, on the
/// GPU of `backend` (one mbkit_cuda_make_backend made; any other is a usage error), with NCCL's
/// unique `id` (plugin::kNcclIdBytes bytes), non-blocking: ready() says when it is set up. A call
/// that NCCL is still enqueuing holds the next one at most `timeout` seconds. Owned by the
/// caller; throws mbkit::Error naming the call on failure. Declared here and defined by the
/// plugin (mbkit/plugin/cuda_plugin.hpp).
extern "C" mbkit::comm::DeviceAllreduce* mbkit_cuda_make_nccl_allreduce(mbkit::nn::Backend& backend,
                                                                        const std::uint8_t* id,
                                                                        int ranks, int rank,
                                                                        double timeout);

namespace mbkit::comm {

/// The plugin's mbkit_cuda_make_nccl_allreduce; nullptr when the plugin does not load.
decltype(&mbkit_cuda_make_nccl_allreduce) cuda_nccl_allreduce_maker();

}  // namespace mbkit::comm
