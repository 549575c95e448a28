// The one exception type of mbkit and the exit codes every tool shares.
//
// Library code throws mbkit::Error with a one-line, user-facing message and an exit code;
// only cli::run_tool turns it into "tool: error: message" on stderr and a process exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace mbkit {

/// Process exit status of every mbkit tool (documented in mbkit(7)).
enum class ExitCode : int {
  kSuccess = 0,
  kFailure = 1,        ///< an error with no more specific class: I/O, internal, resources
  kUsage = 2,          ///< bad command line: unknown flag, bad or conflicting values
  kBadData = 3,        ///< an input file is missing, corrupt, or not what was expected
  kCommunication = 4,  ///< network or MPI: a download failed, a peer was lost, a timeout
  kDiverged = 5,       ///< training produced a non-finite loss
  kInterrupted = 6,    ///< stopped by SIGINT/SIGTERM after saving its state
};

/// How long a rank other than 0 waits before it ends quietly on a usage error that every rank
/// reaches, so that rank 0's message is out before mpirun/srun ends the job.
inline constexpr int kQuietRankGraceMs = 2000;

/// An error with a one-line message meant for the user, an exit code, and (for checks of
/// library calls) the source location of the check, shown with --verbose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ExitCode code = ExitCode::kFailure,
                 std::string where = {});

  ExitCode code() const noexcept { return code_; }
  const std::string& where() const noexcept { return where_; }

 private:
  ExitCode code_;
  std::string where_;
};

/// Throws an Error for a bad command-line value (exit code 2).
[[noreturn]] void usage_error(const std::string& message);
/// Throws an Error for an input file that is missing, corrupt or of the wrong kind (exit code 3).
[[noreturn]] void data_error(const std::string& message);
/// Throws an Error for a failed download or a lost peer (exit code 4).
[[noreturn]] void communication_error(const std::string& message);
/// Throws a generic Error (exit code 1).
[[noreturn]] void fail(const std::string& message);

}  // namespace mbkit
