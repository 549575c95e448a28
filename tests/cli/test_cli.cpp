// run_tool: exit codes and one-line errors for every way a tool can fail.
#include <gtest/gtest.h>

#include <vector>

#include "mbkit/cli/cli.hpp"
#include "mbkit/util/log.hpp"

namespace mbkit {
namespace {

struct Invocation {
  int status = -1;
  std::string out;
  std::string err;
};

// Builds a small tool with a required subcommand and runs it on `args`.
Invocation run(std::vector<std::string> args, const std::function<int()>& body) {
  CLI::App app{"test tool", "mb-test"};
  app.require_subcommand(1);
  cli::CommonOptions common;
  cli::add_common_options(app, common);
  int count = 0;
  auto* sub = app.add_subcommand("go", "do it");
  sub->add_option("-n,--count", count, "how many")->required();
  args.insert(args.begin(), "mb-test");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  Invocation result;
  result.status = cli::run_tool(app, static_cast<int>(argv.size()), argv.data(), common, body);
  result.out = testing::internal::GetCapturedStdout();
  result.err = testing::internal::GetCapturedStderr();
  log::set_level(log::Level::kNormal);
  return result;
}

int count_lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(RunTool, SuccessReturnsTheBodysStatus) {
  const auto result = run({"go", "-n", "3"}, [] { return 0; });
  EXPECT_EQ(result.status, 0);
  EXPECT_EQ(result.err, "");
}

TEST(RunTool, BadFlagValueIsOneUsageLine) {
  const auto result = run({"go", "-n", "three"}, [] { return 0; });
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("mb-test go: error: "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("three"), std::string::npos) << result.err;
}

TEST(RunTool, MissingSubcommandAndUnknownFlag) {
  EXPECT_EQ(run({}, [] { return 0; }).status, 2);
  const auto unknown = run({"go", "-n", "1", "--bogus"}, [] { return 0; });
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("--bogus"), std::string::npos);
}

TEST(RunTool, AnUnknownOptionIsReportedFirstWithTheNearestOnes) {
  // -n missing and "3" left over as well: the misspelt option is what the user needs to hear.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"go", "--cont", "3"},
                                               {"go", "-n", "1", "--cont=3"},
                                               {"go", "--cont", "3", "-n", "1"}}) {
    const auto result = run(args, [] { return 0; });
    EXPECT_EQ(result.status, 2);
    EXPECT_EQ(count_lines(result.err), 1) << result.err;
    EXPECT_EQ(result.err,
              "mb-test go: error: unknown option '--cont' (did you mean --count?) "
              "(see 'mb-test go --help')\n");
  }
  // The tool's own options are known in its subcommand too; far from anything: no hint.
  EXPECT_NE(run({"go", "-n", "1", "--quite"}, [] { return 0; }).err.find("did you mean --quiet?"),
            std::string::npos);
  const auto far = run({"go", "--zzzzzz"}, [] { return 0; });
  EXPECT_NE(far.err.find("unknown option '--zzzzzz' (see"), std::string::npos) << far.err;
  // Before the subcommand, and an unknown subcommand.
  EXPECT_NE(
      run({"--verbos", "go", "-n", "1"}, [] { return 0; }).err.find("did you mean --verbose?"),
      std::string::npos);
  const auto command = run({"og", "-n", "1"}, [] { return 0; });
  EXPECT_EQ(command.status, 2);
  EXPECT_NE(command.err.find("unknown command 'og' (known: go)"), std::string::npos) << command.err;
}

TEST(RunTool, HelpAndVersionExitZero) {
  const auto help = run({"--help"}, [] { return 1; });
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("Usage:"), std::string::npos);
  const auto version = run({"--version"}, [] { return 1; });
  EXPECT_EQ(version.status, 0);
  EXPECT_NE(version.out.find("mb-test (mbkit) "), std::string::npos);
  EXPECT_NE(version.out.find("HDF5"), std::string::npos);
  EXPECT_NE(version.out.find("oneDNN"), std::string::npos);
}

TEST(RunTool, LibraryErrorsKeepTheirExitCode) {
  const auto data = run({"go", "-n", "1"}, []() -> int { data_error("in.h5: not an HDF5 file"); });
  EXPECT_EQ(data.status, 3);
  EXPECT_EQ(data.err, "mb-test go: error: in.h5: not an HDF5 file\n");
  const auto network =
      run({"go", "-n", "1"}, []() -> int { communication_error("download failed: HTTP 404"); });
  EXPECT_EQ(network.status, 4);
  const auto usage = run({"go", "-n", "1"}, []() -> int { usage_error("-n 0: need at least 1"); });
  EXPECT_EQ(usage.status, 2);
}

TEST(RunTool, VerboseShowsWhereAnErrorCameFrom) {
  const auto result = run({"-v", "go", "-n", "1"}, []() -> int {
    throw Error("boom", ExitCode::kFailure, "somefile.cpp:12");
  });
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("boom [somefile.cpp:12]"), std::string::npos) << result.err;
}

TEST(RunTool, ForeignExceptionsAreReportedNotFatal) {
  const auto result =
      run({"go", "-n", "1"}, []() -> int { throw std::out_of_range("vector::at"); });
  EXPECT_EQ(result.status, 1);
  EXPECT_EQ(count_lines(result.err), 1);
}

TEST(RunTool, RecordsTheCommandLineQuoted) {
  run({"go", "-n", "1"}, [] { return 0; });
  EXPECT_EQ(cli::recorded_command_line(), "mb-test go -n 1");
}

}  // namespace
}  // namespace mbkit
