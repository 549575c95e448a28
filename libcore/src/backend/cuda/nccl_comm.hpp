// A non-blocking NCCL communicator (ncclConfig_t blocking = 0), shared by --allreduce nccl
// (nccl_allreduce.cpp) and mb-bench-bandwidth --device cuda (device_bench.cpp): no NCCL call
// waits for a peer, so a rank whose peer died is never stuck inside NCCL; the core polls with
// the run's deadline and aborts the communicator when it passes. Not installed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_internal.hpp"
#include "mbkit/config.hpp"
#if MBKIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace mbkit::backend::cuda {

/// Makes `stream` (empty) a non-blocking stream on the context's GPU.
void make_stream(const Context& context, OwnedStream& stream);
/// Makes `event` (empty) an event on the context's GPU; a timing one only when `timing`.
void make_event(const Context& context, OwnedEvent& event, bool timing);

/// "2.28.9"; empty when NCCL is missing.
std::string nccl_version_text();

#if MBKIT_HAVE_NCCL

class NcclComm {
 public:
  /// Starts joining a communicator of `ranks` as `rank` (set-up goes on in the background:
  /// settled() says when it is done). Its calls run on `stream`, which must outlive it.
  NcclComm(Context& context, cudaStream_t stream, const std::uint8_t* id, int ranks, int rank,
           double timeout);
  /// Destroys the communicator when it is idle, else aborts it (destroying one with work in
  /// flight waits for that work, and a peer that died never finishes it).
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  bool aborted() const { return comm_ == nullptr; }
  Context& context() const { return context_; }
  double timeout() const { return timeout_; }

  /// Whether the last call that returned ncclInProgress has been enqueued (or the set-up done).
  /// Throws, after aborting, when it failed.
  bool settled();
  /// Waits for settled() at most the timeout; then aborts and throws a communication error (a
  /// rank stopped or died).
  void wait_settled();
  /// Takes the result of `call`, just made: a failure aborts and throws naming it;
  /// ncclInProgress leaves it pending. Returns whether it is enqueued already.
  bool enqueued(ncclResult_t result, const char* call);
  /// Throws, after aborting, on an asynchronous error (a peer's failure) naming `call`.
  void check_async(const char* call);
  /// Gives the communicator up; every later call fails. Safe to call more than once.
  void abort() noexcept;
  /// Aborts, then throws the error of `call`.
  [[noreturn]] void fail(ncclResult_t result, const char* call);

 private:
  bool drained() const;
  bool finalize();

  Context& context_;
  cudaStream_t stream_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  const char* pending_call_ = nullptr;  ///< returned ncclInProgress and not settled yet
};

#endif

}  // namespace mbkit::backend::cuda
