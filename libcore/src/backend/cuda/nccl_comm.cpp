#include "nccl_comm.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include "mbkit/plugin/cuda_plugin.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::backend::cuda {

void make_stream(const Context& context, OwnedStream& stream) {
  context.activate();
  MBKIT_CUDA_CHECK(cudaStreamCreateWithFlags(stream.out(), cudaStreamNonBlocking));
}

void make_event(const Context& context, OwnedEvent& event, bool timing) {
  context.activate();
  MBKIT_CUDA_CHECK(
      cudaEventCreateWithFlags(event.out(), timing ? cudaEventDefault : cudaEventDisableTiming));
}

#if MBKIT_HAVE_NCCL
static_assert(NCCL_UNIQUE_ID_BYTES == plugin::kNcclIdBytes,
              "the core carries NCCL's id in 128 bytes");

std::string nccl_version_text() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "";
  return strprintf("%d.%d.%d", version / 10000, (version % 10000) / 100, version % 100);
}

NcclComm::NcclComm(Context& context, cudaStream_t stream, const std::uint8_t* id, int ranks,
                   int rank, double timeout)
    : context_(context), stream_(stream), timeout_(timeout) {
  context_.activate();
  ncclUniqueId unique{};
  std::memcpy(unique.internal, id, plugin::kNcclIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t result = ncclCommInitRankConfig(&comm_, ranks, unique, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) fail(result, "ncclCommInitRankConfig");
  pending_call_ = "ncclCommInitRankConfig";
}

NcclComm::~NcclComm() {
  // Teardown errors are not worth a second exception.
  if (comm_ == nullptr) return;
  const bool current = cudaSetDevice(context_.gpu) == cudaSuccess;  // no throw from here
  const bool idle = current && pending_call_ == nullptr && drained();
  if (idle && finalize()) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

bool NcclComm::settled() {
  if (pending_call_ == nullptr) return true;  // also once aborted: the next call refuses
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
  if (asked != ncclSuccess) fail(asked, "ncclCommGetAsyncError");
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) fail(state, pending_call_);
  pending_call_ = nullptr;
  return true;
}

void NcclComm::wait_settled() {
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
}

bool NcclComm::enqueued(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return true;
  if (result != ncclInProgress) fail(result, call);
  pending_call_ = call;  // NCCL is still queuing it, in the background
  return false;
}

void NcclComm::check_async(const char* call) {
  MBKIT_CHECK(comm_ != nullptr, "polling an aborted NCCL communicator");
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
  if (asked != ncclSuccess) fail(asked, "ncclCommGetAsyncError");
  if (state != ncclSuccess && state != ncclInProgress) fail(state, call);
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
  pending_call_ = nullptr;
}

void NcclComm::fail(ncclResult_t result, const char* call) {
  abort();
  detail::nccl_failed(static_cast<int>(result), call, MBKIT_HERE);
}

// Whether the stream's work ends within a few seconds (a call whose peer is gone never does: the
// communicator is then aborted, not waited for).
bool NcclComm::drained() const {
  const auto since = SteadyClock::now();
  cudaError_t state = cudaStreamQuery(stream_);
  while (state == cudaErrorNotReady && seconds_since(since) < 10.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state = cudaStreamQuery(stream_);
  }
  return state == cudaSuccess;
}

// ncclCommFinalize, waited for a few seconds (it flushes the communicator's work).
bool NcclComm::finalize() {
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

#else

std::string nccl_version_text() {
  return "";
}

#endif

}  // namespace mbkit::backend::cuda
