// Diagnostics on stderr, prefixed with the tool name. stdout is kept for data (tables, JSON).
#pragma once

#include <string>

#include "mbkit/util/strings.hpp"

namespace mbkit::log {

enum class Level { kQuiet = 0, kNormal = 1, kVerbose = 2, kDebug = 3 };

/// Set once by cli::run_tool from -q/-v.
void set_level(Level level);
Level level();
/// Set once by cli::run_tool: the prefix of every line ("mb-dataset").
void set_program(const std::string& name);
const std::string& program();

/// One line at normal verbosity (suppressed by -q).
void info(const std::string& message);
/// One line shown with -v.
void verbose(const std::string& message);
/// A warning: shown unless -q.
void warn(const std::string& message);

}  // namespace mbkit::log
