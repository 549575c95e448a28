// Shared by the libFuzzer targets of tests/fuzz: the one rule every target checks (a reader
// or parser given any bytes either returns or throws mbkit::Error; anything else - a crash, a
// sanitizer report, another exception, a hang, an allocation over libFuzzer's limit - is a
// finding) and a scratch file for the readers that take a path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "mbkit/util/error.hpp"

namespace mbkit::fuzz {

/// Runs `body`; an mbkit::Error is the expected answer to bad input and is swallowed, every
/// other exception escapes and aborts the run (libFuzzer then saves the input).
template <class Body>
void expect_errors_only(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

/// The input as text.
inline std::string text_of(std::span<const std::uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// A file of this process under $TMPDIR (or /tmp) that each input is written to in turn, for
/// readers that open a path (HDF5 files, tar archives). Removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(std::string_view suffix) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/mbkit-fuzz-" + std::to_string(::getpid()) +
            std::string(suffix);
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Replaces the file's content with `bytes` and returns its path.
  const std::string& write(std::span<const std::uint8_t> bytes) {
    std::FILE* file = std::fopen(path_.c_str(), "wb");
    if (!file) std::abort();  // the harness itself cannot run: not a finding of the target
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size())
      std::abort();
    if (std::fclose(file) != 0) std::abort();
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace mbkit::fuzz
