#include "mbkit/backend/cuda/check.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "mbkit/config.hpp"
#if MBKIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace mbkit::backend::detail {

using mbkit::detail::call_name;

void cuda_failed(int code, const char* call, const char* where) {
  const auto error = static_cast<cudaError_t>(code);
  throw Error(
      cat(call_name(call), " failed: ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)),
      ExitCode::kFailure, where);
}

void cudnn_failed(int code, const char* call, const char* where) {
  char last[256] = {0};
  cudnnGetLastErrorString(last, sizeof last);  // cuDNN 9: detail of the most recent failure
  std::string message =
      cat(call_name(call), " failed: ", cudnnGetErrorString(static_cast<cudnnStatus_t>(code)));
  if (last[0] != '\0') message += cat(" (", last, ")");
  throw Error(message, ExitCode::kFailure, where);
}

void cublas_failed(int code, const char* call, const char* where) {
  const auto status = static_cast<cublasStatus_t>(code);
  throw Error(cat(call_name(call), " failed: ", cublasGetStatusName(status), ": ",
                  cublasGetStatusString(status)),
              ExitCode::kFailure, where);
}

void nccl_failed(int code, const char* call, const char* where) {
#if MBKIT_HAVE_NCCL
  const auto result = static_cast<ncclResult_t>(code);
  std::string message = cat(call_name(call), " failed: ", ncclGetErrorString(result));
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && last[0] != '\0') {
    message += cat(" (", last, ")");
  }
  // Remote and system errors mean a peer or the network: a communication failure.
  const bool remote = result == ncclRemoteError || result == ncclSystemError;
  throw Error(message, remote ? ExitCode::kCommunication : ExitCode::kFailure, where);
#else
  throw Error(cat(call_name(call), " failed: NCCL error ", code), ExitCode::kFailure, where);
#endif
}

}  // namespace mbkit::backend::detail
