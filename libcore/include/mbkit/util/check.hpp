// Check macros for every external call: each reports the failing call and the library's own
// message, and throws mbkit::Error. The macros evaluate to the call's result, so they wrap
// expressions:  hid_t file = MBKIT_H5_CHECK(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
//
// Library headers are not included here: the failure paths live in check.cpp, so a file that
// checks an MPI call does not pull in HDF5 and the other way round.
#pragma once

#include <cerrno>
#include <string>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

#define MBKIT_STRINGIFY_DETAIL(x) #x
#define MBKIT_STRINGIFY(x) MBKIT_STRINGIFY_DETAIL(x)
#define MBKIT_HERE __FILE__ ":" MBKIT_STRINGIFY(__LINE__)

/// Internal invariant or user-visible precondition; the message is built from the extra
/// arguments with mbkit::cat. Throws Error with exit code 1.
#define MBKIT_CHECK(cond, ...) \
  ((cond) ? (void)0 : ::mbkit::detail::check_failed(#cond, MBKIT_HERE, ::mbkit::cat(__VA_ARGS__)))

/// libc/POSIX calls that return -1 and set errno. `what` names the object (usually a path).
#define MBKIT_SYS_CHECK(expr, what) ::mbkit::detail::sys_check((expr), #expr, (what), MBKIT_HERE)
/// libc calls that return a null pointer and set errno (fopen, opendir...).
#define MBKIT_SYS_CHECK_PTR(expr, what) \
  ::mbkit::detail::sys_check_ptr((expr), #expr, (what), MBKIT_HERE)
/// HDF5 calls: negative hid_t/herr_t/htri_t means failure; the HDF5 error stack is reported.
#define MBKIT_H5_CHECK(expr) ::mbkit::detail::h5_check((expr), #expr, MBKIT_HERE)
/// MPI calls (on communicators whose error handler is MPI_ERRORS_RETURN).
#define MBKIT_MPI_CHECK(expr) ::mbkit::detail::mpi_check((expr), #expr, MBKIT_HERE)
/// oneDNN C API calls returning dnnl_status_t.
#define MBKIT_DNNL_CHECK(expr) \
  ::mbkit::detail::dnnl_check(static_cast<int>(expr), #expr, MBKIT_HERE)
/// libcurl easy calls returning CURLcode.
#define MBKIT_CURL_CHECK(expr) \
  ::mbkit::detail::curl_check(static_cast<int>(expr), #expr, MBKIT_HERE)

namespace mbkit::detail {

[[noreturn]] void check_failed(const char* condition, const char* where,
                               const std::string& message);
[[noreturn]] void sys_failed(const char* call, const std::string& what, int err, const char* where);
[[noreturn]] void h5_failed(const char* call, const char* where);
[[noreturn]] void mpi_failed(int code, const char* call, const char* where);
[[noreturn]] void dnnl_failed(int status, const char* call, const char* where);
[[noreturn]] void curl_failed(int code, const char* call, const char* where);

template <class T>
T sys_check(T result, const char* call, const std::string& what, const char* where) {
  if (result == static_cast<T>(-1)) sys_failed(call, what, errno, where);
  return result;
}
template <class T>
T* sys_check_ptr(T* result, const char* call, const std::string& what, const char* where) {
  if (result == nullptr) sys_failed(call, what, errno, where);
  return result;
}
template <class T>
T h5_check(T result, const char* call, const char* where) {
  if (result < 0) h5_failed(call, where);
  return result;
}
inline int mpi_check(int code, const char* call, const char* where) {
  if (code != 0) mpi_failed(code, call, where);  // MPI_SUCCESS is 0 by the standard
  return code;
}
inline int dnnl_check(int status, const char* call, const char* where) {
  if (status != 0) dnnl_failed(status, call, where);  // dnnl_success is 0
  return status;
}
inline int curl_check(int code, const char* call, const char* where) {
  if (code != 0) curl_failed(code, call, where);  // CURLE_OK is 0
  return code;
}

/// The function name of a call expression: "H5Fopen(path, ...)" -> "H5Fopen".
std::string call_name(const char* call);

}  // namespace mbkit::detail
