#include "mbkit/tools/mb_front.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::front {
namespace {

struct Page {
  std::string name;  ///< "mb-dataset"
  std::string section;
};

bool executable(const std::string& path) {
  return fs::is_regular_file(path) && ::access(path.c_str(), X_OK) == 0;
}

std::string tool_list(const std::string& directory) {
  return join(tools_in(directory), ", ");
}

Page page_for(const std::string& directory, const std::string& topic) {
  if (topic == "mb") return {"mb", "1"};
  if (topic == "formats" || topic == "mbkit-formats") return {"mbkit-formats", "5"};
  if (topic == "mbkit") return {"mbkit", "7"};
  const std::string tool = starts_with(topic, "mb-") ? topic.substr(3) : topic;
  const auto tools = tools_in(directory);
  if (std::find(tools.begin(), tools.end(), tool) == tools.end()) {
    usage_error(cat("help: no manual for '", topic, "' (tools: ", tool_list(directory),
                    "; also mb, formats, mbkit)"));
  }
  return {"mb-" + tool, "1"};
}

// The tools get the signal mask a process starts with, not the one mb's signal thread set up.
void restore_signal_mask() {
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
}

[[noreturn]] void exec(const std::vector<std::string>& argv, bool search_path) {
  std::vector<char*> pointers;
  for (const std::string& argument : argv) pointers.push_back(const_cast<char*>(argument.c_str()));
  pointers.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  restore_signal_mask();
  if (search_path) {
    ::execvp(pointers[0], pointers.data());
  } else {
    ::execv(pointers[0], pointers.data());
  }
  fail(cat("cannot run ", argv[0], ": ", std::strerror(errno)));
}

void list_tools(const std::string& directory, std::ostream& out) {
  out << "usage: mb [--version] [--help] TOOL [ARGS...]\n"
         "       mb help [TOOL]\n\n"
         "Tools (mb TOOL --help: its options; mb help TOOL: its manual):\n";
  for (const std::string& name : tools_in(directory)) {
    std::string summary = "(not an mbkit tool: see mb-" + name + " --help)";
    for (const ToolSummary& known : known_tools()) {
      if (known.name == name) summary = known.summary;
    }
    out << strprintf("  %-18s %s\n", name.c_str(), summary.c_str());
  }
}

}  // namespace

const std::vector<ToolSummary>& known_tools() {
  // The NAME lines of the man pages (tests/e2e/test_mb.py checks that they agree).
  static const std::vector<ToolSummary> tools = {
      {"dataset", "get, make, split and inspect mbkit dataset files"},
      {"train-fmb", "train a model with fixed mini-batches"},
      {"train-amb", "train a model with anytime mini-batches"},
      {"train-dbsl", "train a model with dual batch size learning on a parameter server"},
      {"eval", "evaluate a checkpoint on a dataset split"},
      {"plot", "draw figures from the metric logs of training runs"},
      {"report", "summarise training runs from their metric logs: time to a target accuracy"},
      {"bench-bandwidth",
       "time MPI collectives and the trainers' per-step exchange, nccl-tests style"},
      {"bench-partitions",
       "time training steps against their split into micro-batches; fit the DBSL time model"},
  };
  return tools;
}

std::string own_directory() {
  std::string path(4096, '\0');
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size());
  if (length <= 0) fail(cat("cannot find mb's own directory: ", std::strerror(errno)));
  path.resize(static_cast<std::size_t>(length));
  return fs::parent_directory(path);
}

std::vector<std::string> tools_in(const std::string& directory) {
  std::vector<std::string> found;
  if (DIR* dir = ::opendir(directory.c_str()); dir != nullptr) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (starts_with(name, "mb-") && name.size() > 3 &&
          executable(fs::join_path(directory, name))) {
        found.push_back(name.substr(3));
      }
    }
    ::closedir(dir);
  }
  std::vector<std::string> ordered;
  for (const ToolSummary& known : known_tools()) {
    if (std::find(found.begin(), found.end(), known.name) != found.end()) {
      ordered.push_back(known.name);
    }
  }
  std::sort(found.begin(), found.end());
  for (const std::string& name : found) {
    if (std::find(ordered.begin(), ordered.end(), name) == ordered.end()) ordered.push_back(name);
  }
  return ordered;
}

std::string man_page_file(const std::string& directory, const std::string& topic) {
  const Page page = page_for(directory, topic);
  const std::string file = cat("man", page.section, "/", page.name, ".", page.section);
  const std::string root = fs::parent_directory(directory);
  // Installed pages are gzipped (man -l reads them so); a build tree's are plain.
  for (const std::string& candidate :
       {fs::join_path(root, "share/man/" + file), fs::join_path(root, "share/man/" + file + ".gz"),
        fs::join_path(root, "man/" + file)}) {
    if (fs::is_regular_file(candidate)) return candidate;
  }
  return "";
}

int run_front(const FrontOptions& options, std::ostream& out) {
  const std::string directory = own_directory();
  const auto& command = options.command;
  if (command.empty()) {
    list_tools(directory, out);
    return 0;
  }
  if (command[0] == "help") {
    if (command.size() > 2) usage_error("help takes one topic: mb help [TOOL]");
    // Bare `mb help`: the overview, which lists the tools, recipes and exit codes.
    const std::string topic = command.size() == 2 ? command[1] : "mbkit";
    const std::string file = man_page_file(directory, topic);
    if (!file.empty()) exec({"man", "-l", file}, true);
    // Not beside this mb: the pages installed where man(1) looks.
    const Page page = page_for(directory, topic);
    exec({"man", page.section, page.name}, true);
  }
  const std::string& tool = command[0];
  const std::string path = fs::join_path(directory, "mb-" + tool);
  if (tool.find('/') != std::string::npos || !executable(path)) {
    usage_error(cat("unknown tool '", tool, "' (tools: ", tool_list(directory), ")"));
  }
  std::vector<std::string> argv = command;
  argv[0] = path;
  exec(argv, false);
}

}  // namespace mbkit::tools::front
