// Shell completion generated from the tools' own option tables: `TOOL --completion-spec` prints
// what the CLI11 app declares (subcommands, options, which take a value, positionals) and what
// each value may be (model names, figure types, operations... from the library's registries;
// HDF5 files by extension), as bash assignments that share/bash-completion/mbkit.bash reads.
// The build runs every tool with it, so the completion cannot drift from the options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace mbkit::cli {

/// The hidden argument that makes run_tool print the table instead of running the tool.
inline constexpr const char* kCompletionSpecFlag = "--completion-spec";

/// What the value of an option or positional can be completed with.
struct ValueCompletion {
  std::vector<std::string> words;  ///< fixed choices
  /// File name extensions to offer ("h5"), "*" for any file, "/" for directories only.
  std::vector<std::string> files;
  /// The value is a comma-separated list of the words ("allreduce,exchange").
  bool list = false;
  bool empty() const { return words.empty() && files.empty(); }
};

/// The completion of `name` (an option's long name "--model", else its short name "-o", or a
/// positional's name "logs") in `command` ("mb-plot", "mb-dataset fetch").
ValueCompletion value_completion(const std::string& command, const std::string& name);

/// The completion table of `app` (and its subcommands), as bash associative-array assignments.
std::string completion_spec(const CLI::App& app);

}  // namespace mbkit::cli
