#include "mbkit/cli/cli.hpp"

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

}  // namespace

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
  // CLI11 reports an unknown subcommand as a missing one; name it and list the known ones.
  if (app.get_require_subcommand_min() > 0) {
    for (int i = 1; i < argc; ++i) {
      const std::string token = argv[i];
      if (token.empty() || token[0] == '-') continue;
      std::vector<std::string> known;
      bool found = false;
      const CLI::App& const_app = app;
      for (const CLI::App* sub : const_app.get_subcommands([](const CLI::App*) { return true; })) {
        known.push_back(sub->get_name());
        found = found || sub->check_name(token);
      }
      if (!found) {
        std::fprintf(stderr, "%s: error: unknown command '%s' (known: %s)\n",
                     app.get_name().c_str(), token.c_str(), join(known, ", ").c_str());
        return static_cast<int>(ExitCode::kUsage);
      }
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    if (quiet_rank()) return quiet_usage_exit();
    const std::string name = invoked_name(app);
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", name.c_str(), error.what(),
                 name.c_str());
    return static_cast<int>(ExitCode::kUsage);
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
