#include "mbkit/cli/cli.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>

#include "mbkit/cli/completion.hpp"
#include "mbkit/nn/precision.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/signals.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::cli {
namespace {

std::string g_command_line;

// "mb-dataset fetch" when a subcommand was given: errors then name what the user ran.
std::string invoked_name(const CLI::App& app) {
  std::string name = app.get_name();
  const CLI::App* current = &app;
  while (true) {
    const auto subcommands = current->get_subcommands();
    if (subcommands.empty()) break;
    current = subcommands.front();
    name += " " + current->get_name();
  }
  return name;
}

// A repeated option keeps its last value, as in most Unix tools (a wrapper script can append
// overrides); list options and counted flags (-vv) keep all their occurrences.
void last_value_wins(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_min() == 1 && option->get_items_expected_max() == 1) {
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
  for (CLI::App* group : app.get_subcommands([](CLI::App*) { return true; }))
    last_value_wins(*group);
}

// Under mpirun every rank parses the same command line: only rank 0 reports what is wrong with
// it; the others stay quiet and leave a moment later, so rank 0's message is out before the
// launcher ends the job.
bool quiet_rank() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(variable); value != nullptr) {
      return std::string(value) != "0";
    }
  }
  return false;
}

int quiet_usage_exit() {
  std::this_thread::sleep_for(std::chrono::milliseconds(kQuietRankGraceMs));
  return static_cast<int>(ExitCode::kUsage);
}

// The long names (without dashes) of the options `app` and its option groups know.
void add_long_names(const CLI::App& app, std::vector<std::string>& names) {
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back(name);
  }
  for (const CLI::App* group :
       app.get_subcommands([](const CLI::App* sub) { return sub->get_name().empty(); })) {
    add_long_names(*group, names);
  }
}

// What the user may have meant: the options of the tool and of the subcommands given.
std::vector<std::string> known_long_names(const CLI::App& app) {
  std::vector<std::string> names;
  add_long_names(app, names);
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const std::string& name : known_long_names(*sub)) names.push_back(name);
  }
  return names;
}

// "--name", "--name=value", "-x": an option, not a value such as -1 or a lone "-" (stdin).
bool looks_like_option(std::string_view token) {
  const std::size_t dashes = token.starts_with("--") ? 2 : token.starts_with("-") ? 1 : 0;
  return dashes > 0 && token.size() > dashes &&
         std::isalpha(static_cast<unsigned char>(token[dashes])) != 0;
}

// "unknown command 'x' (known: ...)" when a tool that needs a subcommand got none it knows
// (CLI11 reports it as a missing one); "" otherwise.
std::string unknown_command_message(const CLI::App& app, int argc, char** argv) {
  if (app.get_require_subcommand_min() == 0) return {};
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token.empty() || token[0] == '-') continue;
    std::vector<std::string> known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name().empty()) continue;
      known.push_back(sub->get_name());
      found = found || sub->check_name(token);
    }
    if (found) return {};
    return cat("unknown command '", token, "' (known: ", join(known, ", "), ")");
  }
  return {};
}

int usage_exit(const CLI::App& app, const std::string& message, bool with_help = true) {
  if (quiet_rank()) return quiet_usage_exit();
  const std::string name = invoked_name(app);
  if (with_help) {
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", name.c_str(), message.c_str(),
                 name.c_str());
  } else {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), message.c_str());
  }
  return static_cast<int>(ExitCode::kUsage);
}

}  // namespace

std::string unknown_option_message(const CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> left = app.remaining(/*recurse=*/true);
  // A prefix command's own options end at its first argument; so do a tool's when that argument
  // is no subcommand it knows (the options that follow may be the intended subcommand's).
  const bool options_end_at_first_argument =
      app.get_prefix_command() ||
      (app.get_require_subcommand_min() > 0 && app.get_subcommands().empty());
  for (int i = 1; i < argc; ++i) {
    const std::string_view token = argv[i];
    if (token == "--") break;  // what follows is positional
    if (!looks_like_option(token)) {
      if (options_end_at_first_argument) break;
      continue;
    }
    if (std::find(left.begin(), left.end(), token) == left.end()) continue;
    const std::string_view name = token.substr(0, token.find('='));
    std::string message = cat("unknown option '", name, "'");
    if (name.starts_with("--")) {
      std::vector<std::string> suggestions;
      for (const std::string& near : nearest_names(name.substr(2), known_long_names(app))) {
        suggestions.push_back("--" + near);
      }
      if (!suggestions.empty()) message += cat(" (did you mean ", join(suggestions, " or "), "?)");
    }
    return message;
  }
  return {};
}

void add_common_options(CLI::App& app, CommonOptions& options) {
  // -q/-v work before or after a subcommand: `mb-dataset fetch ... -q`.
  app.fallthrough();
  app.add_flag("-q,--quiet", options.quiet, "Print nothing but errors on stderr");
  // An integer flag counts its occurrences: -vv is 2.
  app.add_flag("-v,--verbose", options.verbose,
               "More detail on stderr (repeat for debug output); errors then show their source");
  const std::string tool = app.get_name();
  app.set_version_flag(
      "--version", [tool] { return version_text(tool); },
      "Print the version and the libraries in use, then exit");
}

CLI::Option* add_device_option(CLI::App& app, std::string& device) {
  return app
      .add_option(
          "--device", device,
          "Backend: cpu, or cuda / cuda:N (the GPU of the local rank, or GPU N) where built")
      ->capture_default_str()
      ->type_name("NAME");
}

CLI::Option* add_precision_option(CLI::App& app, std::string& precision) {
  return app
      .add_option("--precision", precision,
                  "Convolutions and dense layers in fp32, tf32 (TF32 tensor cores) or bf16 (bf16 "
                  "operands, fp32 accumulation and weights); tf32 and bf16 on a GPU only")
      ->capture_default_str()
      ->type_name("fp32|tf32|bf16")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (nn::find_precision(text)) return {};
            return "unknown precision '" + text + "' (known: fp32, tf32, bf16)";
          },
          ""));  // no description: CLI11 would append it to the type name in --help
}

std::string command_line(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) text += ' ';
    text += shell_quote(argv[i]);
  }
  return text;
}

const std::string& recorded_command_line() {
  return g_command_line;
}

int report_errors(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& error) {
    if (error.code() == ExitCode::kUsage && quiet_rank()) return quiet_usage_exit();
    std::string line = program + ": error: " + error.what();
    if (log::level() >= log::Level::kVerbose && !error.where().empty()) {
      line += " [" + error.where() + "]";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    return static_cast<int>(error.code());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", program.c_str());
    return static_cast<int>(ExitCode::kFailure);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), error.what());
    return static_cast<int>(ExitCode::kFailure);
  }
}

int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& options,
             const std::function<int()>& body) {
  // The build asks every tool for its options to generate the shell completion (hidden: it is
  // not an option of the tool, and only alone on the command line).
  if (argc == 2 && std::string(argv[1]) == kCompletionSpecFlag) {
    std::fputs(completion_spec(app).c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : static_cast<int>(ExitCode::kFailure);
  }
  // Before any other thread exists: signals go to one thread of their own.
  start_signal_thread();
  g_command_line = command_line(argc, argv);
  log::set_program(app.get_name());
  last_value_wins(app);
  try {
    app.parse(argc, argv);
    // A prefix command (mb) hands what follows its TOOL on, unparsed: what precedes it must be
    // its own options.
    if (app.get_prefix_command()) {
      if (const std::string unknown = unknown_option_message(app, argc, argv); !unknown.empty()) {
        return usage_exit(app, unknown);
      }
    }
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    // A misspelt option first: CLI11 would report what follows from it ("--data is required",
    // its value as an unexpected argument) instead.
    if (std::string unknown = unknown_option_message(app, argc, argv); !unknown.empty()) {
      return usage_exit(app, unknown);
    }
    if (std::string unknown = unknown_command_message(app, argc, argv); !unknown.empty()) {
      return usage_exit(app, unknown, /*with_help=*/false);
    }
    return usage_exit(app, error.what());
  }
  if (options.quiet) {
    log::set_level(log::Level::kQuiet);
  } else if (options.verbose >= 2) {
    log::set_level(log::Level::kDebug);
  } else if (options.verbose == 1) {
    log::set_level(log::Level::kVerbose);
  }
  const std::string program = invoked_name(app);
  log::set_program(program);
  return report_errors(program, body);
}

}  // namespace mbkit::cli
