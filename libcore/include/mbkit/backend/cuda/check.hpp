// Check macros for CUDA runtime, cuDNN, cuBLAS and NCCL calls (built only with MBKIT_CUDA).
// Each throws mbkit::Error naming the call and carrying the library's own error string.
#pragma once

#include "mbkit/util/check.hpp"

#define MBKIT_CUDA_CHECK(expr) \
  ::mbkit::backend::detail::cuda_check(static_cast<int>(expr), #expr, MBKIT_HERE)
#define MBKIT_CUDNN_CHECK(expr) \
  ::mbkit::backend::detail::cudnn_check(static_cast<int>(expr), #expr, MBKIT_HERE)
#define MBKIT_CUBLAS_CHECK(expr) \
  ::mbkit::backend::detail::cublas_check(static_cast<int>(expr), #expr, MBKIT_HERE)
#define MBKIT_NCCL_CHECK(expr) \
  ::mbkit::backend::detail::nccl_check(static_cast<int>(expr), #expr, MBKIT_HERE)
/// After a kernel launch: reports launch-configuration errors at the launch site.
#define MBKIT_CUDA_CHECK_LAUNCH() MBKIT_CUDA_CHECK(cudaGetLastError())

namespace mbkit::backend::detail {

[[noreturn]] void cuda_failed(int code, const char* call, const char* where);
[[noreturn]] void cudnn_failed(int code, const char* call, const char* where);
[[noreturn]] void cublas_failed(int code, const char* call, const char* where);
[[noreturn]] void nccl_failed(int code, const char* call, const char* where);

inline int cuda_check(int code, const char* call, const char* where) {
  if (code != 0) cuda_failed(code, call, where);  // cudaSuccess
  return code;
}
inline int cudnn_check(int code, const char* call, const char* where) {
  if (code != 0) cudnn_failed(code, call, where);  // CUDNN_STATUS_SUCCESS
  return code;
}
inline int cublas_check(int code, const char* call, const char* where) {
  if (code != 0) cublas_failed(code, call, where);  // CUBLAS_STATUS_SUCCESS
  return code;
}
inline int nccl_check(int code, const char* call, const char* where) {
  if (code != 0) nccl_failed(code, call, where);  // ncclSuccess
  return code;
}

}  // namespace mbkit::backend::detail
