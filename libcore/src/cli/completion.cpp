#include "mbkit/cli/completion.hpp"

#include <algorithm>

#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/config.hpp"
#include "mbkit/data/catalog.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/optim/optimizer.hpp"
#include "mbkit/optim/schedule.hpp"
#include "mbkit/plot/bench_figures.hpp"
#include "mbkit/plot/figure_types.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::cli {
namespace {

using Words = std::vector<std::string>;

// "sgd, momentum, rmsprop, adam" (the known_*() lists of the messages) as words.
Words listed(const std::string& text) {
  Words words;
  for (const std::string& part : split(text, ',')) words.emplace_back(trim(part));
  return words;
}

ValueCompletion words(Words list) {
  return {std::move(list), {}};
}

ValueCompletion files(Words extensions) {
  return {{}, std::move(extensions)};
}

// Words go into single-quoted bash strings and compgen -W lists: only plain characters.
bool plain_word(const std::string& word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("._+=/:@%,-").find(c) != std::string_view::npos;
  });
}

std::string bash_words(const Words& list) {
  Words kept;
  for (const std::string& word : list) {
    if (plain_word(word)) kept.push_back(word);
  }
  return "'" + join(kept, " ") + "'";
}

struct Context {
  Words options;  ///< every name: -o --output
  Words takes;    ///< the names of options that take a value
  Words positionals;
  std::vector<std::pair<std::string, ValueCompletion>> values;  ///< by name
};

std::string primary_name(const CLI::Option& option) {
  if (!option.get_lnames().empty()) return "--" + option.get_lnames().front();
  if (!option.get_snames().empty()) return "-" + option.get_snames().front();
  return option.get_name();
}

// An app's options, those of its option groups (nameless subcommands) included.
void collect(const CLI::App& app, const std::string& command, Context& context, bool in_group) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty()) continue;               // hidden
    if (in_group && option == app.get_help_ptr()) continue;  // the app's own -h, not another
    Words names;
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    const ValueCompletion value = value_completion(
        command,
        option->get_positional() && names.empty() ? option->get_name() : primary_name(*option));
    if (names.empty()) {
      const bool variadic = option->get_items_expected_max() > 1;
      context.positionals.push_back(option->get_name() + (variadic ? "..." : ""));
      context.values.emplace_back(option->get_name(), value);
      continue;
    }
    context.options.insert(context.options.end(), names.begin(), names.end());
    if (option->get_items_expected_max() == 0) continue;  // a flag
    context.takes.insert(context.takes.end(), names.begin(), names.end());
    for (const std::string& name : names) context.values.emplace_back(name, value);
  }
  for (const CLI::App* group : app.get_subcommands({})) {
    if (group->get_name().empty()) collect(*group, command, context, true);
  }
}

void emit(const CLI::App& app, const std::string& command, std::string& out) {
  Context context;
  collect(app, command, context, false);
  Words subcommands;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (!sub->get_name().empty()) subcommands.push_back(sub->get_name());
  }
  const std::string key = "['" + command + "']=";
  out += "_mbkit_subs" + key + bash_words(subcommands) + "\n";
  out += "_mbkit_opts" + key + bash_words(context.options) + "\n";
  out += "_mbkit_takes" + key + bash_words(context.takes) + "\n";
  out += "_mbkit_pos" + key + bash_words(context.positionals) + "\n";
  for (const auto& [name, value] : context.values) {
    const std::string value_key = "['" + command + " " + name + "']=";
    if (!value.words.empty()) out += "_mbkit_words" + value_key + bash_words(value.words) + "\n";
    if (!value.files.empty()) out += "_mbkit_files" + value_key + bash_words(value.files) + "\n";
    if (value.list) out += "_mbkit_lists" + value_key + "1\n";
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (!sub->get_name().empty()) emit(*sub, command + " " + sub->get_name(), out);
  }
}

}  // namespace

ValueCompletion value_completion(const std::string& command, const std::string& name) {
  const Words parts = split(command, ' ');
  const std::string tool = parts.front();
  const std::string sub = parts.size() > 1 ? parts[1] : "";
  // Values from the registries the tools check them against.
  if (name == "--model") return words(models::model_names());
  if (name == "--type" && tool == "mb-plot") {
    Words types;
    for (const plot::FigureType& type : plot::figure_types()) types.push_back(type.name);
    for (const std::string& type : plot::bench_figure_names()) types.push_back(type);
    return words(types);
  }
  if (name == "--subset" && tool == "mb-plot") {  // the panes of a panel
    Words panes;
    for (const plot::FigureType& type : plot::figure_types()) {
      if (type.kind != plot::FigureKind::kPanel) panes.push_back(type.name);
    }
    return {panes, {}, true};
  }
  if (name == "--op") {
    Words ops = bench::op_names();
    ops.push_back("all");
    return {ops, {}, true};
  }
  if (name == "--optimizer") return words(listed(optim::known_optimizers()));
  if (name == "--lr-schedule") return words(listed(optim::known_schedules()));
  if (name == "--induce") return words(listed(emulation::known_straggler_profiles()));
  if (name == "--device") {
    // What this build can run, whether or not the machine that generates the script has a GPU
    // (available_backends() would ask the driver, and load CUDA to do so).
    return words(MBKIT_HAVE_CUDA ? Words{"cpu", "cuda"} : Words{"cpu"});
  }
  if (name == "name" && sub == "fetch") {
    Words names;
    for (const data::CatalogEntry& entry : data::catalog()) names.push_back(entry.name);
    return words(names);
  }
  // Fixed choices that the option parsers spell out (tests/cli/test_completion.cpp feeds each
  // back to its parser).
  if (name == "--activation") return words({"relu", "sigmoid", "tanh"});
  if (name == "--comm") return words({"ps", "allreduce"});
  if (name == "--allreduce") return words({"auto", "shm", "mpi", "nccl"});
  if (name == "--clock") return words({"wall", "virtual"});
  if (name == "--nan-policy") return words({"stop", "skip"});
  if (name == "--cuda-graphs") return words({"on", "off"});
  if (name == "--comm-wait") return words({"yield", "spin"});
  if (name == "--update-factor") return words({"linear", "sqrt", "none"});
  if (name == "--split") return words({"test", "train"});
  if (name == "--dtype") return words({"float", "double"});
  if (name == "--transport") return words({"mpi", "nccl"});
  if (name == "--precision") return words({"fp32", "tf32", "bf16"});
  if (name == "--by") return words({"contiguous", "strided", "random"});
  if (name == "--prefetch" || name == "--time-limit") return words({"auto"});
  if (name == "format" && sub == "import") return words({"idx", "cifar10", "cifar100"});
  if (name == "format" && sub == "import-trace") return words({"pai", "csv"});
  if (name == "input" && sub == "import-trace") return files({"csv"});
  if (name == "kind" && sub == "synth") return words({"toy", "images"});
  if (name == "--resume") return {{"auto"}, {"h5"}};
  // Files: HDF5 ones by their extension.
  if (name == "--output") {
    if (tool == "mb-plot") return files({"png", "svg", "pdf"});
    if (tool == "mb-report" || sub == "shard") return files({"*"});  // text; a prefix
    return files({"h5"});
  }
  if (name == "--trace") return files({"json"});  // mb-report's Chrome trace
  for (const char* hdf5 : {"--data", "--test-data", "--log", "--checkpoint", "--time-model",
                           "--append", "checkpoint", "logs", "file", "files"}) {
    if (name == hdf5) return files({"h5"});
  }
  for (const char* any : {"--checksums", "--from", "--csv", "--train-images", "--train-labels",
                          "--test-images", "--test-labels"}) {
    if (name == any) return files({"*"});
  }
  if (name == "--cache-dir" || name == "--script") return files({"/"});
  return {};
}

std::string completion_spec(const CLI::App& app) {
  std::string out = "# " + app.get_name() + " --completion-spec\n";
  emit(app, app.get_name(), out);
  return out;
}

}  // namespace mbkit::cli
