// HTTP(S)/file downloads with libcurl: retries with backoff for transient failures, stall and
// connect timeouts (nothing waits forever), and a progress bar on a terminal.
#pragma once

#include <cstdint>
#include <string>

namespace mbkit::data {

struct DownloadOptions {
  int retries = 3;                  ///< extra attempts after a transient failure
  double first_retry_delay = 1.0;   ///< seconds; doubles after each attempt
  long connect_timeout = 30;        ///< seconds to establish a connection
  long stall_timeout = 60;          ///< abort when no byte arrives for this many seconds
  std::uint64_t expected_size = 0;  ///< for the progress bar when the server sends no length
  std::string label;                ///< shown in the progress bar (the file name)
};

/// Downloads `url` into `path` (created or truncated). Throws a communication error (exit code
/// 4) naming the URL: HTTP errors such as 404 fail at once, connection failures, server errors
/// and transfers closed early are retried `retries` times first.
void download(const std::string& url, const std::string& path, const DownloadOptions& options);

}  // namespace mbkit::data
