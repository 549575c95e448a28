// --allreduce nccl: the gradients summed in GPU memory by NCCL (mbkit/comm/device_allreduce.hpp).
//
// The communicator is non-blocking (nccl_comm.hpp): no NCCL call waits for a peer, so a rank
// whose peer died is never stuck inside NCCL; the core polls with the run's deadline and aborts
// the communicator when it passes. Sums run on a stream of their own, each after an
// event recorded on the compute stream once the bucket's gradients were queued there, so a
// bucket's sum overlaps the rest of the backward pass.
#include <cstring>
#include <memory>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/nccl.hpp"
#include "mbkit/comm/device_allreduce.hpp"
#include "mbkit/config.hpp"
#include "mbkit/nn/buffer.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "nccl_comm.hpp"

namespace mbkit::backend::cuda {

#if MBKIT_HAVE_NCCL

namespace {

class NcclAllreduce final : public comm::DeviceAllreduce {
 public:
  NcclAllreduce(Context& context, const std::uint8_t* id, int ranks, int rank, double timeout)
      : context_(context) {
    make_stream(context, stream_);
    make_event(context, produced_, false);
    make_event(context, summed_, false);
    comm_ = std::make_unique<NcclComm>(context, stream_.get(), id, ranks, rank, timeout);
  }
  NcclAllreduce(const NcclAllreduce&) = delete;
  NcclAllreduce& operator=(const NcclAllreduce&) = delete;

  std::string description() const override { return cat("NCCL ", nccl_version_text()); }

  bool ready() override { return settled(); }

  void start(nn::Buffer& buffer, std::size_t offset, std::size_t count) override {
    MBKIT_CHECK(!comm_->aborted(), "a sum on an aborted NCCL communicator");
    MBKIT_CHECK(offset <= buffer.size() && count <= buffer.size() - offset, "a sum of ", count,
                " floats at ", offset, " in a buffer of ", buffer.size());
    if (count == 0) return;
    // A non-blocking communicator takes the next call only once the last one is enqueued.
    comm_->wait_settled();
    settled();  // records summed_ after a sum that was still being queued
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(produced_.get(), context_.stream));
    MBKIT_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), produced_.get(), 0));
    float* data = buffer.data() + offset;
    if (!comm_->enqueued(
            ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_->get(), stream_.get()),
            "ncclAllReduce")) {
      record_when_settled_ = true;  // NCCL is still queuing the sum: the event must follow it
      return;
    }
    MBKIT_CUDA_CHECK(cudaEventRecord(summed_.get(), stream_.get()));
  }

  bool poll() override {
    MBKIT_CHECK(!comm_->aborted(), "polling an aborted NCCL communicator");
    if (!settled()) return false;
    comm_->check_async("ncclAllReduce");
    const cudaError_t done = cudaEventQuery(summed_.get());
    if (done == cudaErrorNotReady) return false;
    MBKIT_CUDA_CHECK(done);
    return true;
  }

  void abort() noexcept override {
    comm_->abort();
    record_when_settled_ = false;
  }

 private:
  /// Whether the last call NCCL returned ncclInProgress for has been enqueued (or set up).
  bool settled() {
    if (!comm_->settled()) return false;
    if (record_when_settled_) {  // the last sum's kernel is on the stream now
      record_when_settled_ = false;
      context_.activate();
      MBKIT_CUDA_CHECK(cudaEventRecord(summed_.get(), stream_.get()));
    }
    return true;
  }

  Context& context_;
  OwnedStream stream_;
  OwnedEvent produced_;  ///< on the compute stream: the bucket's gradients are queued
  OwnedEvent summed_;    ///< on the NCCL stream: after the last sum started
  /// Declared last, so torn down first: it waits on the stream.
  std::unique_ptr<NcclComm> comm_;
  bool record_when_settled_ = false;  ///< summed_ is recorded once that call is queued
};

}  // namespace

std::string nccl_version() {
  return nccl_version_text();
}

void nccl_unique_id(std::uint8_t* id) {
  ncclUniqueId unique{};
  MBKIT_NCCL_CHECK(ncclGetUniqueId(&unique));
  std::memcpy(id, unique.internal, plugin::kNcclIdBytes);
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
