// What every mbkit tool shares on its command line: -q/-v/--version, and run_tool, which parses
// the command line and turns exceptions into "tool: error: message" and an exit code.
//
// A tool's main() only declares its options and calls run_tool with a body that calls the
// library's run function, so tests can call the same run function in-process.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "mbkit/util/error.hpp"

namespace mbkit::cli {

struct CommonOptions {
  bool quiet = false;
  int verbose = 0;  // -v repeated: 1 verbose, 2 debug
};

/// Adds -q/--quiet, -v/--verbose and --version to a tool's top-level app.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Parses argv into `app`, applies the common options, installs the signal handlers that remove
/// half-written outputs, and runs `body`. Returns the process exit status:
/// 0 for --help/--version, 2 for a command-line error (one line on stderr), the Error's exit code
/// when body throws mbkit::Error, 1 for any other exception.
int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options,
             const std::function<int()>& body);

/// Runs `body` and maps exceptions to an exit code and a one-line message, without parsing:
/// the part of run_tool that tests call in-process.
int report_errors(const std::string& program, const std::function<int()>& body);

/// The full command line, shell-quoted, for provenance attributes in output files.
std::string command_line(int argc, char** argv);
/// The command line of this process as recorded by run_tool ("" before run_tool).
const std::string& recorded_command_line();

}  // namespace mbkit::cli
