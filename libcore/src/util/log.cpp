#include "mbkit/util/log.hpp"

#include <cstdio>
#include <mutex>

namespace mbkit::log {
namespace {

Level g_level = Level::kNormal;
std::string g_program = "mbkit";
std::mutex g_mutex;  // keeps lines from a background thread whole

void emit(const char* tag, const std::string& message) {
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s: %s%s\n", g_program.c_str(), tag, message.c_str());
  std::fflush(stderr);
}

}  // namespace

void set_level(Level level) {
  g_level = level;
}
Level level() {
  return g_level;
}
void set_program(const std::string& name) {
  g_program = name;
}
const std::string& program() {
  return g_program;
}

void info(const std::string& message) {
  if (g_level >= Level::kNormal) emit("", message);
}
void verbose(const std::string& message) {
  if (g_level >= Level::kVerbose) emit("", message);
}
void warn(const std::string& message) {
  if (g_level >= Level::kNormal) emit("warning: ", message);
}

}  // namespace mbkit::log
