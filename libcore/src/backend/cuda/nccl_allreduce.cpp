// --allreduce nccl: the gradients summed in GPU memory by NCCL (mbkit/comm/device_allreduce.hpp).
//
// The communicator is non-blocking (ncclConfig_t blocking = 0): no NCCL call waits for a peer,
// so a rank whose peer died is never stuck inside NCCL; the core polls with the run's deadline
// and aborts the communicator when it passes. Sums run on a stream of their own, each after an
// event recorded on the compute stream once the bucket's gradients were queued there, so a
// bucket's sum overlaps the rest of the backward pass.
#include <chrono>
#include <cstring>
#include <thread>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/nccl.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/config.hpp"
#include "mbkit/nn/buffer.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"
#if MBKIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace mbkit::backend::cuda {

#if MBKIT_HAVE_NCCL
static_assert(NCCL_UNIQUE_ID_BYTES == kNcclIdBytes, "the core carries NCCL's id in 128 bytes");

namespace {

std::string version_text() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "";
  return strprintf("%d.%d.%d", version / 10000, (version % 10000) / 100, version % 100);
}

class NcclAllreduce final : public comm::DeviceAllreduce {
 public:
  NcclAllreduce(Context& context, const std::uint8_t* id, int ranks, int rank, double timeout)
      : context_(context), timeout_(timeout) {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaStreamCreateWithFlags(stream_.out(), cudaStreamNonBlocking));
    MBKIT_CUDA_CHECK(cudaEventCreateWithFlags(produced_.out(), cudaEventDisableTiming));
    MBKIT_CUDA_CHECK(cudaEventCreateWithFlags(summed_.out(), cudaEventDisableTiming));
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id, kNcclIdBytes);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t result = ncclCommInitRankConfig(&comm_, ranks, unique, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      fail(result, "ncclCommInitRankConfig");
    }
    pending_call_ = "ncclCommInitRankConfig";
  }

  ~NcclAllreduce() override {
    // Teardown errors are not worth a second exception. A communicator with work still in
    // flight (an error left it so) is aborted rather than destroyed: destroying waits for it.
    if (comm_ != nullptr) {
      const bool current = cudaSetDevice(context_.gpu) == cudaSuccess;  // no throw from here
      const bool idle = current && pending_call_ == nullptr && drained();
      if (idle && finalize()) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
  }
  NcclAllreduce(const NcclAllreduce&) = delete;
  NcclAllreduce& operator=(const NcclAllreduce&) = delete;

  std::string description() const override { return cat("NCCL ", version_text()); }

  bool ready() override { return settled(); }

  void start(nn::Buffer& buffer, std::size_t offset, std::size_t count) override {
    MBKIT_CHECK(comm_ != nullptr, "a sum on an aborted NCCL communicator");
    MBKIT_CHECK(offset <= buffer.size() && count <= buffer.size() - offset, "a sum of ", count,
                " floats at ", offset, " in a buffer of ", buffer.size());
    if (count == 0) return;
    // A non-blocking communicator takes the next call only once the last one is enqueued.
    const auto since = SteadyClock::now();
    while (!settled()) {
      if (seconds_since(since) > timeout_) {
        const char* call = pending_call_;
        abort();
        throw Error(cat(call, " was not enqueued within ", short_duration(timeout_),
                        " (--comm-timeout): a rank stopped or died"),
                    ExitCode::kCommunication);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(produced_, context_.stream));
    MBKIT_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0));
    float* data = buffer.data() + offset;
    const ncclResult_t result =
        ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, stream_);
    if (result != ncclSuccess && result != ncclInProgress) fail(result, "ncclAllReduce");
    if (result == ncclInProgress) {
      // NCCL is still queuing the sum (in the background): the event must follow it.
      pending_call_ = "ncclAllReduce";
      record_when_settled_ = true;
      return;
    }
    MBKIT_CUDA_CHECK(cudaEventRecord(summed_, stream_));
  }

  bool poll() override {
    MBKIT_CHECK(comm_ != nullptr, "polling an aborted NCCL communicator");
    if (!settled()) return false;
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) fail(state, "ncclAllReduce");
    const cudaError_t done = cudaEventQuery(summed_);
    if (done == cudaErrorNotReady) return false;
    MBKIT_CUDA_CHECK(done);
    return true;
  }

  void abort() noexcept override {
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    pending_call_ = nullptr;
    record_when_settled_ = false;
  }

 private:
  /// Whether the last call NCCL returned ncclInProgress for has been enqueued (or set up).
  bool settled() {
    if (pending_call_ == nullptr) return true;
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) fail(state, pending_call_);
    pending_call_ = nullptr;
    if (record_when_settled_) {  // the last sum's kernel is on the stream now
      record_when_settled_ = false;
      context_.activate();
      MBKIT_CUDA_CHECK(cudaEventRecord(summed_, stream_));
    }
    return true;
  }

  /// Whether the NCCL stream's work ends within a few seconds (a sum whose peer is gone never
  /// does: the communicator is then aborted, not waited for).
  bool drained() const {
    const auto since = SteadyClock::now();
    cudaError_t state = cudaStreamQuery(stream_);
    while (state == cudaErrorNotReady && seconds_since(since) < 10.0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      state = cudaStreamQuery(stream_);
    }
    return state == cudaSuccess;
  }

  /// ncclCommFinalize, waited for a few seconds (it flushes the communicator's work).
  bool finalize() {
    ncclResult_t result = ncclCommFinalize(comm_);
    const auto since = SteadyClock::now();
    while (result == ncclInProgress && seconds_since(since) < 10.0) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
      result = state;
      if (result == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return result == ncclSuccess;
  }

  void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) fail(result, call);
  }

  /// The communicator is unusable after an error: aborted, then the error naming `call`.
  [[noreturn]] void fail(ncclResult_t result, const char* call) {
    abort();
    detail::nccl_failed(static_cast<int>(result), call, MBKIT_HERE);
  }

  Context& context_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  OwnedStream stream_;
  OwnedEvent produced_;  ///< on the compute stream: the bucket's gradients are queued
  OwnedEvent summed_;    ///< on the NCCL stream: after the last sum started
  const char* pending_call_ = nullptr;  ///< returned ncclInProgress and not settled yet
  bool record_when_settled_ = false;    ///< summed_ is recorded once that call is queued
};

}  // namespace

std::string nccl_version() {
  return version_text();
}

void nccl_unique_id(std::uint8_t* id) {
  ncclUniqueId unique{};
  MBKIT_NCCL_CHECK(ncclGetUniqueId(&unique));
  std::memcpy(id, unique.internal, kNcclIdBytes);
}

comm::DeviceAllreduce* make_nccl_allreduce(nn::Backend& backend, const std::uint8_t* id, int ranks,
                                           int rank, double timeout) {
  Context* context = context_of(backend);
  if (context == nullptr) {
    usage_error(cat("--allreduce nccl sums GPU memory; the backend is ", backend.description()));
  }
  return new NcclAllreduce(*context, id, ranks, rank, timeout);
}

#else  // built without NCCL: the plugin says so where a run asks for it

std::string nccl_version() {
  return "";
}

void nccl_unique_id(std::uint8_t* /*id*/) {
  usage_error("--allreduce nccl: this mbkit was built without NCCL (nccl.h was not found)");
}

comm::DeviceAllreduce* make_nccl_allreduce(nn::Backend& /*backend*/, const std::uint8_t* /*id*/,
                                           int /*ranks*/, int /*rank*/, double /*timeout*/) {
  usage_error("--allreduce nccl: this mbkit was built without NCCL (nccl.h was not found)");
}

#endif

}  // namespace mbkit::backend::cuda
