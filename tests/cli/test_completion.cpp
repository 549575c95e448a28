// The completion table a tool prints (--completion-spec), and the fixed choices it offers, each
// fed back to the parser that the tools check it with.
#include <gtest/gtest.h>

#include <string>

#include "mbkit/bench/device_bench.hpp"
#include "mbkit/cli/cli.hpp"
#include "mbkit/cli/completion.hpp"
#include "mbkit/cli/train_options.hpp"
#include "mbkit/data/shard.hpp"
#include "mbkit/train/dbsl_merge.hpp"
#include "mbkit/train/options.hpp"

namespace mbkit {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(Completion, SpecListsSubcommandsOptionsValuesAndPositionals) {
  CLI::App app{"test tool", "mb-plot"};
  cli::CommonOptions common;
  cli::add_common_options(app, common);
  std::string model, output, type;
  std::vector<std::string> logs;
  bool force = false;
  app.add_option("logs", logs, "Metric logs");
  app.add_option("-t,--type", type, "Figure type");
  app.add_option("-o,--output", output, "Figure");
  app.add_flag("-f,--force", force, "Replace");
  app.add_option("--secret", model, "Not shown")->group("");
  auto* group = app.add_option_group("Model");
  group->add_option("--model", model, "Model");
  auto* sub = app.add_subcommand("fetch", "Fetch");
  std::string name;
  sub->add_option("name", name, "Dataset")->required();

  const std::string spec = cli::completion_spec(app);
  EXPECT_TRUE(has_line(spec, "_mbkit_subs['mb-plot']='fetch'")) << spec;
  EXPECT_TRUE(has_line(spec,
                       "_mbkit_opts['mb-plot']='-h --help -q --quiet -v --verbose --version -t "
                       "--type -o --output -f --force --model'"))
      << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_takes['mb-plot']='-t --type -o --output --model'")) << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_pos['mb-plot']='logs...'")) << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_files['mb-plot logs']='h5'")) << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_files['mb-plot -o']='png svg pdf'")) << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_files['mb-plot --output']='png svg pdf'")) << spec;
  EXPECT_NE(spec.find("_mbkit_words['mb-plot --type']='loss-vs-step "), std::string::npos) << spec;
  EXPECT_NE(spec.find("_mbkit_words['mb-plot --model']='mlp "), std::string::npos) << spec;
  EXPECT_EQ(spec.find("secret"), std::string::npos) << spec;
  EXPECT_TRUE(has_line(spec, "_mbkit_pos['mb-plot fetch']='name'")) << spec;
  EXPECT_TRUE(
      has_line(spec, "_mbkit_words['mb-plot fetch name']='mnist fashion-mnist cifar10 cifar100'"))
      << spec;
}

TEST(Completion, HdfFilesByExtensionOtherOutputsAsThemselves) {
  using cli::value_completion;
  EXPECT_EQ(value_completion("mb-train-fmb", "--data").files, std::vector<std::string>{"h5"});
  EXPECT_EQ(value_completion("mb-eval", "checkpoint").files, std::vector<std::string>{"h5"});
  EXPECT_EQ(value_completion("mb-dataset fetch", "--output").files, std::vector<std::string>{"h5"});
  EXPECT_EQ(value_completion("mb-report", "--output").files, std::vector<std::string>{"*"});
  EXPECT_EQ(value_completion("mb-plot", "--script").files, std::vector<std::string>{"/"});
  EXPECT_TRUE(value_completion("mb-train-fmb", "--lr").empty());
  EXPECT_TRUE(value_completion("mb-bench-bandwidth", "--op").list);
  EXPECT_FALSE(value_completion("mb-train-fmb", "--model").list);
  const auto resume = value_completion("mb-train-fmb", "--resume");
  EXPECT_EQ(resume.words, std::vector<std::string>{"auto"});
  EXPECT_EQ(resume.files, std::vector<std::string>{"h5"});
}

// A choice the completion offers but the tool refuses would be worse than none.
TEST(Completion, FixedChoicesAreWhatTheParsersAccept) {
  const auto choices = [](const char* command, const char* name) {
    const auto words = cli::value_completion(command, name).words;
    EXPECT_FALSE(words.empty()) << name;
    return words;
  };
  const auto valid = [](const std::function<void(train::TrainOptions&)>& set) {
    train::TrainOptions options;
    options.epochs = 1;
    options.data = "data.h5";
    set(options);
    train::validate(options);
  };
  // --comm and --clock are enums that the command line parses.
  const auto parses = [](const std::string& flag, const std::string& word) {
    CLI::App app;
    train::TrainOptions options;
    cli::add_distribution_options(app, options);
    app.parse(flag + " " + word, false);
  };
  for (const auto& word : choices("mb-train-fmb", "--comm")) {
    EXPECT_NO_THROW(parses("--comm", word)) << word;
  }
  for (const auto& word : choices("mb-train-fmb", "--clock")) {
    EXPECT_NO_THROW(parses("--clock", word)) << word;
  }
  EXPECT_THROW(parses("--clock", "sundial"), CLI::ValidationError);
  for (const auto& word : choices("mb-train-fmb", "--nan-policy")) {
    EXPECT_NO_THROW(valid([&](train::TrainOptions& o) { o.nan_policy = word; })) << word;
  }
  for (const auto& word : choices("mb-train-fmb", "--cuda-graphs")) {
    EXPECT_NO_THROW(valid([&](train::TrainOptions& o) {
      o.device = "cuda";  // on is refused on the CPU
      o.cuda_graphs = word;
    })) << word;
  }
  EXPECT_THROW(valid([](train::TrainOptions& o) { o.cuda_graphs = "on"; }), Error);
  EXPECT_THROW(valid([](train::TrainOptions& o) { o.cuda_graphs = "yes"; }), Error);
  for (const auto& word : choices("mb-train-fmb", "--comm-wait")) {
    EXPECT_NO_THROW(valid([&](train::TrainOptions& o) { o.comm_wait = word; })) << word;
  }
  for (const auto& word : choices("mb-train-fmb", "--allreduce")) {
    EXPECT_NO_THROW(train::parse_allreduce_via(word)) << word;
  }
  for (const auto& word : choices("mb-train-dbsl", "--update-factor")) {
    EXPECT_NO_THROW(train::parse_update_factor(word)) << word;
  }
  for (const auto& word : choices("mb-train-fmb", "--precision")) {
    EXPECT_NO_THROW(valid([&](train::TrainOptions& o) {
      o.device = "cuda";  // the CPU computes in fp32 only
      o.precision = word;
    })) << word;
  }
  EXPECT_THROW(valid([](train::TrainOptions& o) { o.precision = "fp16"; }), Error);
  EXPECT_THROW(valid([](train::TrainOptions& o) { o.precision = "bf16"; }), Error);
  for (const auto& word : choices("mb-dataset shard", "--by")) {
    EXPECT_NO_THROW(data::parse_shard_method(word)) << word;
  }
  for (const auto& word : choices("mb-train-fmb", "--prefetch")) {
    EXPECT_NO_THROW(train::prefetch_depth(word)) << word;
  }
  for (const auto& word : choices("mb-train-amb", "--time-limit")) {
    train::AmbOptions amb;
    EXPECT_NO_THROW(train::parse_time_limit(word, amb)) << word;
  }
  for (const auto& word : choices("mb-bench-bandwidth", "--transport")) {
    EXPECT_NO_THROW(bench::parse_transport(word)) << word;
  }
}

}  // namespace
}  // namespace mbkit
