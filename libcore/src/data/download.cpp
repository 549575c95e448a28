#include "mbkit/data/download.hpp"

#include <curl/curl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "mbkit/config.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/term.hpp"

namespace mbkit::data {
namespace {

void global_curl_init() {
  static std::once_flag once;
  std::call_once(once, [] { MBKIT_CURL_CHECK(curl_global_init(CURL_GLOBAL_DEFAULT)); });
}

struct Transfer {
  std::FILE* out = nullptr;
  std::uint64_t written = 0;
  bool write_failed = false;
  int write_errno = 0;
  ProgressBar* progress = nullptr;
};

std::size_t on_data(char* data, std::size_t size, std::size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const std::size_t bytes = size * count;
  if (std::fwrite(data, 1, bytes, transfer->out) != bytes) {
    transfer->write_failed = true;
    transfer->write_errno = errno;
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  transfer->written += bytes;
  return bytes;
}

int on_progress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<Transfer*>(user);
  if (transfer->progress != nullptr) {
    if (total > 0) transfer->progress->set_total(static_cast<std::uint64_t>(total));
    transfer->progress->update(static_cast<std::uint64_t>(now));
  }
  return 0;
}

bool transient(CURLcode code, long http_status) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    case CURLE_HTTP_RETURNED_ERROR:
      return http_status == 408 || http_status == 429 || http_status >= 500;
    default:
      return false;
  }
}

}  // namespace

void download(const std::string& url, const std::string& path, const DownloadOptions& options) {
  global_curl_init();
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) fail("libcurl: cannot create a transfer handle");
  char error_text[CURL_ERROR_SIZE] = {0};
  Transfer transfer;
  ProgressBar progress(options.label.empty() ? url : options.label, options.expected_size);
  transfer.progress = &progress;

  CURL* handle = curl.get();
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_URL, url.c_str()));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 1L));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_MAXREDIRS, 10L));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_FAILONERROR, 1L));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error_text));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT, options.connect_timeout));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_LOW_SPEED_LIMIT, 1L));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_LOW_SPEED_TIME, options.stall_timeout));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_USERAGENT, "mbkit/" MBKIT_VERSION));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_data));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress));
  MBKIT_CURL_CHECK(curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &transfer));

  double delay = options.first_retry_delay;
  for (int attempt = 0;; ++attempt) {
    transfer.out = MBKIT_SYS_CHECK_PTR(std::fopen(path.c_str(), "wb"), path);
    transfer.written = 0;
    error_text[0] = '\0';
    const CURLcode code = curl_easy_perform(handle);
    const int close_result = std::fclose(transfer.out);
    transfer.out = nullptr;
    progress.finish();
    if (transfer.write_failed) {
      fail(cat("cannot write ", path, ": ", std::strerror(transfer.write_errno)));
    }
    if (close_result != 0) fail(cat("cannot write ", path, ": ", std::strerror(errno)));
    long http_status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &http_status);
    if (code == CURLE_OK) return;

    std::string reason;
    if (code == CURLE_HTTP_RETURNED_ERROR) {
      reason = cat("HTTP ", http_status);
    } else {
      reason = error_text[0] != '\0' ? std::string(error_text) : curl_easy_strerror(code);
    }
    if (!transient(code, http_status) || attempt >= options.retries) {
      const std::string attempts = attempt > 0 ? cat(" (", attempt + 1, " attempts)") : "";
      communication_error(cat("download of ", url, " failed: ", reason, attempts));
    }
    log::warn(cat("download of ", url, " failed (", reason, "); retrying in ",
                  strprintf("%.0f", delay), " s"));
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    delay = std::min(delay * 2, 60.0);
  }
}

}  // namespace mbkit::data
