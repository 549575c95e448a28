// mb: the front of the toolkit, as git is of git-*: `mb TOOL ARGS` runs mb-TOOL from the
// directory mb itself is in, `mb help [TOOL]` opens a man page, `mb` alone lists the tools.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mbkit::tools::front {

struct FrontOptions {
  /// TOOL and its arguments, or `help [TOOL]`; empty: list the tools.
  std::vector<std::string> command;
};

/// A tool and the one-line summary of its man page (NAME section).
struct ToolSummary {
  std::string name;  ///< "dataset" (run as mb-dataset)
  std::string summary;
};

/// The tools mbkit ships, in the order `mb` lists them.
const std::vector<ToolSummary>& known_tools();

/// The directory of the running executable (/proc/self/exe): tools are looked up beside it, so
/// build/bin/mb runs build/bin/mb-dataset even when another mbkit is on PATH.
std::string own_directory();

/// The names (without "mb-") of the executables mb-* in `directory`: the known tools in their
/// order, then any others (a site's own mb-* tools, as git runs any git-*) sorted.
std::vector<std::string> tools_in(const std::string& directory);

/// The man page file for `mb help TOPIC` under `directory` (a tool's bin directory), looked up
/// as installed (../share/man/manN/) and as built (the build tree's share/man, a copy of man/);
/// "" when neither exists. TOPIC: a tool ("dataset"), "mb", "formats" or "mbkit".
std::string man_page_file(const std::string& directory, const std::string& topic);

/// Runs the command: lists the tools on `out`, opens a man page with man(1), or replaces this
/// process with the tool. Returns only on a listing (0) or an error (thrown).
int run_front(const FrontOptions& options, std::ostream& out);

}  // namespace mbkit::tools::front
