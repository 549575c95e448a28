// Failure paths of the check macros: each turns a library's error code into a one-line message.
#include "mbkit/util/check.hpp"

#include <curl/curl.h>
#include <hdf5.h>
#include <mpi.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mbkit::detail {

std::string call_name(const char* call) {
  std::string_view text(call);
  const auto paren = text.find('(');
  std::string name(trim(text.substr(0, paren)));
  // "::H5Fopen" or "ns::f" -> keep the last component.
  if (const auto colon = name.rfind("::"); colon != std::string::npos)
    name = name.substr(colon + 2);
  return name.empty() ? std::string(call) : name;
}

void check_failed(const char* condition, const char* where, const std::string& message) {
  throw Error(message.empty() ? cat("check failed: ", condition) : message, ExitCode::kFailure,
              where);
}

void sys_failed(const char* call, const std::string& what, int err, const char* where) {
  std::string message = what.empty() ? call_name(call) : what;
  message += ": ";
  message += std::strerror(err);
  throw Error(message, ExitCode::kFailure, cat(where, " (", call_name(call), ")"));
}

namespace {

// Collects the HDF5 error stack, outermost (API) record first.
herr_t collect_h5_error(unsigned /*n*/, const H5E_error2_t* record, void* client) {
  auto* messages = static_cast<std::vector<std::string>*>(client);
  if (record != nullptr && record->desc != nullptr && record->desc[0] != '\0') {
    // Some records hold a ctime() date with its newline: keep every error on one line.
    std::string text = record->desc;
    std::replace(text.begin(), text.end(), '\n', ' ');
    messages->push_back(std::move(text));
  }
  return 0;
}

}  // namespace

void h5_failed(const char* call, const char* where) {
  std::vector<std::string> messages;
  // Walking the default stack of this thread; H5Ewalk2 itself failing leaves messages empty.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_h5_error, &messages);
  H5Eclear2(H5E_DEFAULT);
  std::string message = call_name(call) + " failed";
  if (!messages.empty()) {
    message += ": " + messages.front();
    // The innermost record usually carries the cause (errno text, the bad name).
    if (messages.size() > 1 && messages.back() != messages.front()) {
      message += " (" + messages.back() + ")";
    }
  }
  throw Error(message, ExitCode::kFailure, where);
}

void mpi_failed(int code, const char* call, const char* where) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  // Open MPI aborts when MPI_Error_string is called outside MPI_Init..MPI_Finalize.
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized || MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "MPI error code %d", code);
  }
  throw Error(call_name(call) + " failed: " + text, ExitCode::kCommunication, where);
}

void dnnl_failed(int status, const char* call, const char* where) {
  const char* text = "unknown oneDNN status";
  switch (static_cast<dnnl_status_t>(status)) {
    case dnnl_out_of_memory:
      text = "out of memory";
      break;
    case dnnl_invalid_arguments:
      text = "invalid arguments";
      break;
    case dnnl_unimplemented:
      text = "no implementation for this primitive on this machine";
      break;
    case dnnl_iterator_ends:
      text = "iterator ended";
      break;
    case dnnl_runtime_error:
      text = "runtime error";
      break;
    case dnnl_not_required:
      text = "not required";
      break;
    default:
      break;
  }
  throw Error(cat(call_name(call), " failed: ", text, " (status ", status, ")"), ExitCode::kFailure,
              where);
}

void curl_failed(int code, const char* call, const char* where) {
  throw Error(cat(call_name(call), " failed: ", curl_easy_strerror(static_cast<CURLcode>(code))),
              ExitCode::kFailure, where);
}

}  // namespace mbkit::detail
