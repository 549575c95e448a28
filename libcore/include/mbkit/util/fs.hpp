// Files: reading inputs with clear errors, atomic outputs (temporary name + rename), directory
// locks for processes that write the same output at once, and cleanup of temporaries on signals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mbkit::fs {

bool exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
std::uint64_t file_size(const std::string& path);
/// The directory part of a path ("." when there is none) and the last component.
std::string parent_directory(const std::string& path);
std::string base_name(const std::string& path);
std::string join_path(const std::string& directory, const std::string& name);

/// Reads a whole input file; a missing or unreadable file is a data error (exit code 3)
/// whose message names the file.
std::vector<std::uint8_t> read_file(const std::string& path);
/// Reads a text file into a string (same errors as read_file).
std::string read_text_file(const std::string& path);

/// mkdir -p; errors name the directory that could not be made.
void make_directories(const std::string& path);
/// Fails with a clear message unless `directory` exists, is a directory and is writable.
void require_writable_directory(const std::string& directory, const std::string& purpose);
/// A usage error (exit code 2) "PATH exists; use --force to replace it" when `path` exists and
/// `force` is not set: replacing a result takes a decision on the command line.
void require_replaceable(const std::string& path, bool force);
/// $XDG_CACHE_HOME/mbkit or ~/.cache/mbkit.
std::string default_cache_directory();

/// An output file that appears under its final name only when complete.
///
/// The constructor creates a unique temporary file beside the final path (so the rename is
/// atomic and a read-only or missing directory fails before any work is done). Writers fill
/// temp_path(); commit() fsyncs it and renames it over the final path. If commit() is never
/// reached (an exception, a signal) the temporary is removed.
class AtomicOutput {
 public:
  explicit AtomicOutput(std::string final_path);
  ~AtomicOutput();
  AtomicOutput(AtomicOutput&& other) noexcept;
  AtomicOutput& operator=(AtomicOutput&&) = delete;
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temp_path() const { return temp_path_; }
  const std::string& final_path() const { return final_path_; }
  bool committed() const { return committed_; }

  /// fsync + rename + fsync of the directory. Replaces an existing file at final_path.
  void commit();
  /// Removes the temporary now (also done by the destructor).
  void discard() noexcept;

 private:
  std::string final_path_;
  std::string temp_path_;
  int registry_slot_ = -1;
  bool committed_ = false;
};

/// An exclusive advisory lock (flock) on a directory, held for the object's lifetime: used so
/// that several processes writing the same output (every rank of an mpirun) do the work once.
/// Where the filesystem cannot lock (some NFS setups) it proceeds unlocked: atomic renames
/// still leave one correct file.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& directory);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  bool locked() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// Removes every live AtomicOutput temporary (the signal thread does, before the process ends
/// by a signal; see util/signals.hpp).
void remove_temporaries() noexcept;

}  // namespace mbkit::fs
