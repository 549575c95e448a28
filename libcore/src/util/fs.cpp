#include "mbkit/util/fs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>

#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit::fs {

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::uint64_t file_size(const std::string& path) {
  struct stat info {};
  MBKIT_SYS_CHECK(::stat(path.c_str(), &info), path);
  return static_cast<std::uint64_t>(info.st_size);
}

std::string parent_directory(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string base_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

std::string join_path(const std::string& directory, const std::string& name) {
  return (std::filesystem::path(directory) / name).string();
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) data_error(cat(path, ": ", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    data_error(cat(path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    data_error(cat(path, ": ", S_ISDIR(info.st_mode) ? "is a directory" : "is not a regular file",
                   S_ISCHR(info.st_mode)    ? " (a character device)"
                   : S_ISBLK(info.st_mode)  ? " (a block device)"
                   : S_ISFIFO(info.st_mode) ? " (a pipe)"
                   : S_ISSOCK(info.st_mode) ? " (a socket)"
                                            : ""));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : 0;
      ::close(fd);
      data_error(
          cat(path, ": read failed: ", err ? std::strerror(err) : "file shrank while reading"));
    }
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return bytes;
}

std::string read_text_file(const std::string& path) {
  const auto bytes = read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail(cat("cannot create directory ", path, ": ", ec.message()));
}

void require_replaceable(const std::string& path, bool force) {
  if (!force && exists(path)) usage_error(cat(path, " exists; use --force to replace it"));
}

void require_writable_directory(const std::string& directory, const std::string& purpose) {
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    fail(cat(purpose, ": directory ", directory, " does not exist"));
  }
  if (!S_ISDIR(info.st_mode)) fail(cat(purpose, ": ", directory, " is not a directory"));
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    fail(cat(purpose, ": directory ", directory, " is not writable: ", std::strerror(errno)));
  }
}

std::string default_cache_directory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return join_path(xdg, "mbkit");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return join_path(join_path(home, ".cache"), "mbkit");
  }
  return join_path(std::filesystem::temp_directory_path().string(), "mbkit-cache");
}

// ---------------------------------------------------------------------------------------------
// Registry of live temporaries, for removal when a signal ends the process: fixed slots of
// owned C strings, read without locks.

namespace {

constexpr int kRegistrySlots = 256;
std::array<std::atomic<char*>, kRegistrySlots> g_temporaries{};

// Held while a temporary is made and registered, and for good once the signal thread removes
// them (the process ends right after): a signal between mkstemp and the registration, or a
// temporary made after the removal, would leave a stray file.
std::mutex g_registry_mutex;

int register_temporary(const std::string& path) {
  char* copy = ::strdup(path.c_str());
  if (copy == nullptr) return -1;
  for (int slot = 0; slot < kRegistrySlots; ++slot) {
    char* expected = nullptr;
    if (g_temporaries[slot].compare_exchange_strong(expected, copy)) return slot;
  }
  std::free(copy);  // registry full: the temporary is still removed by the destructor
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  char* path = g_temporaries[slot].exchange(nullptr);
  std::free(path);
}

void fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems do not allow opening directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void remove_temporaries() noexcept {
  try {
    g_registry_mutex.lock();  // never unlocked: the process ends
  } catch (const std::system_error&) {
    // Remove what is registered anyway.
  }
  for (auto& slot : g_temporaries) {
    if (char* path = slot.load(); path != nullptr) ::unlink(path);  // async-signal-safe
  }
}

namespace {

std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  std::string host(name.data());
  std::replace(host.begin(), host.end(), '/', '_');
  return host.empty() ? "localhost" : host;
}

// The temporaries that processes of this host left in `directory` when they died (kill -9, a
// crash): ".NAME.tmp-HOST-PID-XXXXXX" whose pid no longer runs, whatever the NAME. Those of
// other hosts (a shared filesystem) are left alone, as are names without host and pid (older
// mbkit), which cannot be told apart from live ones. Any output written there sweeps the
// directory, so a killed run's leftovers go with the next write beside them, of any name.
void remove_stale_temporaries(const std::string& directory) noexcept try {
  const std::string marker = ".tmp-" + host_name() + "-";
  std::error_code error;
  std::filesystem::directory_iterator entries(directory, error);
  if (error) return;
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    const auto at = name.rfind(marker);
    if (!name.starts_with(".") || at == std::string::npos || at < 2) continue;
    const std::string rest = name.substr(at + marker.size());  // PID-XXXXXX
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || rest.size() - dash != 7) continue;
    if (rest.find_first_not_of("0123456789") != dash) continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      ::unlink(entry.path().c_str());
    }
  }
} catch (...) {
  // A directory that cannot be listed to the end keeps its leftovers: the write goes on.
}

}  // namespace

AtomicOutput::AtomicOutput(std::string final_path) : final_path_(std::move(final_path)) {
  MBKIT_CHECK(!final_path_.empty(), "empty output path");
  const std::string directory = parent_directory(final_path_);
  if (!is_directory(directory)) {
    fail(cat("cannot write ", final_path_, ": directory ", directory,
             exists(directory) ? " is not a directory" : " does not exist"));
  }
  if (is_directory(final_path_)) fail(cat("cannot write ", final_path_, ": it is a directory"));
  remove_stale_temporaries(directory);
  // Hidden name beside the target: ".NAME.tmp-HOST-PID-XXXXXX" (mkstemp fills in the X's); the
  // host and pid let a later write remove it if this process dies before removing it itself.
  std::string hidden_name = ".";
  hidden_name.append(base_name(final_path_))
      .append(".tmp-")
      .append(host_name())
      .append("-")
      .append(std::to_string(::getpid()))
      .append("-XXXXXX");
  std::string pattern = join_path(directory, hidden_name);
  const std::lock_guard lock(g_registry_mutex);
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) fail(cat("cannot write ", final_path_, ": ", std::strerror(errno)));
  ::close(fd);
  temp_path_ = pattern;
  registry_slot_ = register_temporary(temp_path_);
}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)),
      registry_slot_(other.registry_slot_),
      committed_(other.committed_) {
  other.registry_slot_ = -1;
  other.committed_ = true;  // the moved-from object owns nothing
  other.temp_path_.clear();
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) discard();
}

void AtomicOutput::discard() noexcept {
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  unregister_temporary(registry_slot_);
  registry_slot_ = -1;
}

void AtomicOutput::commit() {
  MBKIT_CHECK(!committed_, "output ", final_path_, " committed twice");
  const int fd = MBKIT_SYS_CHECK(::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC), temp_path_);
  const int sync_result = ::fsync(fd);
  const int sync_errno = errno;
  ::close(fd);
  if (sync_result != 0)
    fail(cat("cannot write ", final_path_, ": fsync: ", std::strerror(sync_errno)));
  // Temporaries are created 0600 by mkstemp; outputs get the usual umask-derived mode.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  MBKIT_SYS_CHECK(::chmod(temp_path_.c_str(), 0666 & ~mask), temp_path_);
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    fail(cat("cannot write ", final_path_, ": rename: ", std::strerror(errno)));
  }
  committed_ = true;
  unregister_temporary(registry_slot_);
  registry_slot_ = -1;
  fsync_directory(parent_directory(final_path_));
}

DirectoryLock::DirectoryLock(const std::string& directory) {
  fd_ = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    log::verbose(
        cat("cannot lock ", directory, " (", std::strerror(errno), "); going on unlocked"));
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace mbkit::fs
