// mb-bench-bandwidth --device cuda (mbkit/bench/device_bench.hpp): device buffers with pinned
// host buffers beside them, one stream for copies and collectives, timing events, and with
// --transport nccl a non-blocking NCCL communicator (nccl_comm.hpp) whose calls run on that
// stream.
#include <array>
#include <cstdint>
#include <memory>

#include "cuda_internal.hpp"
#include "mbkit/backend/cuda/nccl.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "nccl_comm.hpp"

namespace mbkit::backend::cuda {
namespace {

class CudaDeviceBench final : public bench::DeviceBench {
 public:
  CudaDeviceBench(Context& context, const std::uint8_t* nccl_id, int ranks, int rank,
                  double timeout)
      : context_(context), ranks_(ranks) {
    make_stream(context, stream_);
    make_event(context, start_, true);
    make_event(context, stop_, true);
    if (nccl_id == nullptr) return;
#if MBKIT_HAVE_NCCL
    for (auto& event : in_flight_) make_event(context, event, false);
    nccl_ = std::make_unique<NcclComm>(context, stream_.get(), nccl_id, ranks, rank, timeout);
#else
    (void)rank;
    (void)timeout;
    usage_error("--transport nccl: this mbkit was built without NCCL (nccl.h was not found)");
#endif
  }
  ~CudaDeviceBench() override {
#if MBKIT_HAVE_NCCL
    nccl_.reset();  // before the stream it waits on
#endif
  }
  CudaDeviceBench(const CudaDeviceBench&) = delete;
  CudaDeviceBench& operator=(const CudaDeviceBench&) = delete;

  std::string nccl_description() const override {
#if MBKIT_HAVE_NCCL
    if (nccl_) return cat("NCCL ", nccl_version_text());
#endif
    return "";
  }

  void resize(std::size_t send_bytes, std::size_t receive_bytes) override {
    synchronize();  // nothing queued may still use the old buffers
    send_ = DeviceMemory();
    receive_ = DeviceMemory();
    send_ = DeviceMemory(send_bytes);
    receive_ = DeviceMemory(receive_bytes);
    host_send_.reserve(send_bytes);
    host_receive_.reserve(receive_bytes);
    send_bytes_ = send_bytes;
    receive_bytes_ = receive_bytes;
  }

  std::span<std::uint8_t> host_send() override {
    return {host_send_.as<std::uint8_t>(), send_bytes_};
  }
  std::span<std::uint8_t> host_receive() override {
    return {host_receive_.as<std::uint8_t>(), receive_bytes_};
  }

  void copy(bench::DeviceCopy what) override {
    context_.activate();
    const bool send =
        what == bench::DeviceCopy::kSendToDevice || what == bench::DeviceCopy::kSendToHost;
    const bool to_device =
        what == bench::DeviceCopy::kSendToDevice || what == bench::DeviceCopy::kReceiveToDevice;
    void* device = send ? send_.get() : receive_.get();
    void* host = send ? host_send_.get() : host_receive_.get();
    const std::size_t bytes = send ? send_bytes_ : receive_bytes_;
    if (bytes == 0) return;
    MBKIT_CUDA_CHECK(cudaMemcpyAsync(to_device ? device : host, to_device ? host : device, bytes,
                                     to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                     stream_.get()));
  }

  void synchronize() override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  void record_start() override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(start_.get(), stream_.get()));
  }
  void record_stop() override {
    context_.activate();
    MBKIT_CUDA_CHECK(cudaEventRecord(stop_.get(), stream_.get()));
  }
  double recorded_seconds() override {
    float milliseconds = 0;
    MBKIT_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start_.get(), stop_.get()));
    return static_cast<double>(milliseconds) / 1e3;
  }

#if MBKIT_HAVE_NCCL
  // A long timed loop queues calls faster than a slow (or dead) peer lets them finish; CUDA's
  // launch queue then fills and the next launch blocks inside NCCL, out of reach of the
  // deadline. So at most kSlots * kBatch calls are in flight: an event every kBatch calls, and
  // the next call waits (here, polled) for the one recorded kSlots events ago.
  bool ready() override {
    if (!communicator().settled()) return false;
    if (calls_ % kBatch != 0) return true;
    const cudaError_t done = cudaEventQuery(in_flight_[(calls_ / kBatch) % kSlots].get());
    if (done == cudaErrorNotReady) return false;
    MBKIT_CUDA_CHECK(done);
    return true;
  }

  void start(bench::Op op, bench::Dtype dtype, std::size_t count) override {
    NcclComm& comm = communicator();
    MBKIT_CHECK(!comm.aborted(), "a collective on an aborted NCCL communicator");
    MBKIT_CHECK(comm.settled(), "an NCCL call before the last one was enqueued");
    const ncclDataType_t type = dtype == bench::Dtype::kFloat ? ncclFloat : ncclDouble;
    const std::size_t size = bench::type_size(dtype);
    const std::size_t block = count / static_cast<std::size_t>(ranks_);
    const bool blocks = op == bench::Op::kAllgather || op == bench::Op::kReduceScatter;
    MBKIT_CHECK(send_bytes_ >= (op == bench::Op::kAllgather ? block : count) * size &&
                    receive_bytes_ >= (op == bench::Op::kReduceScatter ? block : count) * size &&
                    (!blocks || block * static_cast<std::size_t>(ranks_) == count),
                "buffers of ", send_bytes_, " and ", receive_bytes_, " bytes for ",
                bench::op_name(op), " of ", count, " elements");
    context_.activate();
    if (calls_ % kBatch == 0) {  // after every call queued so far (ready() waited for the slot)
      MBKIT_CUDA_CHECK(
          cudaEventRecord(in_flight_[(calls_ / kBatch) % kSlots].get(), stream_.get()));
    }
    ++calls_;
    void* send = send_.get();
    void* receive = receive_.get();
    cudaStream_t stream = stream_.get();
    const int root = 0;
    switch (op) {
      case bench::Op::kAllreduce:
        comm.enqueued(ncclAllReduce(send, receive, count, type, ncclSum, comm.get(), stream),
                      "ncclAllReduce");
        return;
      case bench::Op::kReduce:
        comm.enqueued(ncclReduce(send, receive, count, type, ncclSum, root, comm.get(), stream),
                      "ncclReduce");
        return;
      case bench::Op::kBcast:  // in place, as MPI_Bcast: the root's receive buffer holds the data
        comm.enqueued(ncclBroadcast(receive, receive, count, type, root, comm.get(), stream),
                      "ncclBroadcast");
        return;
      case bench::Op::kAllgather:
        comm.enqueued(ncclAllGather(send, receive, block, type, comm.get(), stream),
                      "ncclAllGather");
        return;
      case bench::Op::kReduceScatter:
        comm.enqueued(ncclReduceScatter(send, receive, block, type, ncclSum, comm.get(), stream),
                      "ncclReduceScatter");
        return;
      default:
        usage_error(cat("--op ", bench::op_name(op), ": NCCL has no such collective"));
    }
  }

  bool poll() override {
    if (nccl_) {
      if (!nccl_->settled()) return false;
      nccl_->check_async("an NCCL collective");
    }
    context_.activate();
    const cudaError_t done = cudaStreamQuery(stream_.get());
    if (done == cudaErrorNotReady) return false;
    MBKIT_CUDA_CHECK(done);
    return true;
  }

  void abort() noexcept override {
    if (nccl_) nccl_->abort();
  }

 private:
  NcclComm& communicator() {
    MBKIT_CHECK(nccl_ != nullptr, "an NCCL call on a bench made without NCCL");
    return *nccl_;
  }

#else
  bool ready() override {
    fail("an NCCL call in a build without NCCL");
  }
  void start(bench::Op, bench::Dtype, std::size_t) override {
    fail("an NCCL call in a build without NCCL");
  }
  bool poll() override {
    context_.activate();
    const cudaError_t done = cudaStreamQuery(stream_.get());
    if (done == cudaErrorNotReady) return false;
    MBKIT_CUDA_CHECK(done);
    return true;
  }
  void abort() noexcept override {}

 private:
#endif

  Context& context_;
  int ranks_;
  OwnedStream stream_;
  OwnedEvent start_, stop_;
  DeviceMemory send_, receive_;
  PinnedMemory host_send_, host_receive_;
  std::size_t send_bytes_ = 0, receive_bytes_ = 0;
#if MBKIT_HAVE_NCCL
  static constexpr std::uint64_t kBatch = 16, kSlots = 8;  ///< 128 calls in flight at most
  std::array<OwnedEvent, kSlots> in_flight_;
  std::uint64_t calls_ = 0;         ///< NCCL calls queued
  std::unique_ptr<NcclComm> nccl_;  ///< reset first by the destructor: it waits on stream_
#endif
};

}  // namespace

bench::DeviceBench* make_device_bench(nn::Backend& backend, const std::uint8_t* nccl_id, int ranks,
                                      int rank, double timeout) {
  Context* context = context_of(backend);
  if (context == nullptr) {
    usage_error(cat("--device: the bench's buffers need a CUDA backend; the backend is ",
                    backend.description()));
  }
  return new CudaDeviceBench(*context, nccl_id, ranks, rank, timeout);
}

}  // namespace mbkit::backend::cuda
