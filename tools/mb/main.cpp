// mb: the front of the toolkit (`mb TOOL ARGS` runs mb-TOOL beside it; `mb help TOOL`; `mb`
// lists the tools). Options only; the work is in libcore (mbkit/tools/mb_front.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_front.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "The front of mbkit: `mb TOOL ARGS` runs mb-TOOL from the directory mb is in, "
      "`mb help [TOOL]` opens its manual, `mb` alone lists the tools.",
      "mb"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  // Everything from TOOL on belongs to the tool: mb parses only what comes before it.
  app.prefix_command();
  app.footer(
      "mb TOOL [ARGS...]   run mb-TOOL from mb's directory with ARGS\n"
      "mb help [TOOL]      open the tool's manual (alone: mbkit(7))\n"
      "mb                  list the tools");
  mbkit::tools::front::FrontOptions options;
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    options.command = app.remaining();
    return mbkit::tools::front::run_front(options, std::cout);
  });
}
