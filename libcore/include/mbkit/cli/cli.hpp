// What every mbkit tool shares on its command line: -q/-v/--version, and run_tool, which parses
// the command line and turns exceptions into "tool: error: message" and an exit code.
//
// A tool's main() only declares its options and calls run_tool with a body that calls the
// library's run function, so tests can call the same run function in-process.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <functional>
#include <limits>
#include <string>
#include <system_error>

#include "mbkit/util/error.hpp"

namespace mbkit::cli {

struct CommonOptions {
  bool quiet = false;
  int verbose = 0;  // -v repeated: 1 verbose, 2 debug
};

/// A CLI11 check that a value is a whole number of type T, in T's range: "-1" for an unsigned
/// option or 10^20 for a 64-bit one are refused with the range, where a plain conversion would
/// wrap or saturate (a --seed -1 silently 2^64-1, a --steps 10^20 that never ends).
template <class T>
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) {
          return "'" + text + "' is out of range (" +
                 std::to_string(std::numeric_limits<T>::min()) + " to " +
                 std::to_string(std::numeric_limits<T>::max()) + ")";
        }
        if (error != std::errc() || stop != end) return "'" + text + "' is not a whole number";
        return {};
      },
      // No description: CLI11 appends it to the option's type name in --help ("INT:INT").
      "");
}

/// Adds -q/--quiet, -v/--verbose and --version to a tool's top-level app.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Adds --device (cpu, cuda, cuda:N), worded alike in every tool that computes on a backend.
CLI::Option* add_device_option(CLI::App& app, std::string& device);

/// Adds --precision (fp32, tf32, bf16) beside --device; an unknown name is refused here, a
/// precision the device cannot compute at by backend::make_backend.
CLI::Option* add_precision_option(CLI::App& app, std::string& precision);

/// Parses argv into `app`, applies the common options, installs the signal handlers that remove
/// half-written outputs, and runs `body`. Returns the process exit status:
/// 0 for --help/--version, 2 for a command-line error (one line on stderr; an unknown option
/// before anything else), the Error's exit code
/// when body throws mbkit::Error, 1 for any other exception.
int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options,
             const std::function<int()>& body);

/// After a parse of argv into `app`: "unknown option '--epoch' (did you mean --epochs?)" for
/// the first option on the command line that neither the tool nor its subcommand knows, with the
/// nearest known names; "" when there is none. run_tool reports it before any other error.
std::string unknown_option_message(const CLI::App& app, int argc, char** argv);

/// Runs `body` and maps exceptions to an exit code and a one-line message, without parsing:
/// the part of run_tool that tests call in-process.
int report_errors(const std::string& program, const std::function<int()>& body);

/// The full command line, shell-quoted, for provenance attributes in output files.
std::string command_line(int argc, char** argv);
/// The command line of this process as recorded by run_tool ("" before run_tool).
const std::string& recorded_command_line();

}  // namespace mbkit::cli
