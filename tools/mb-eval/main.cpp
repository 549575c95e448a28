// mb-eval: evaluate a checkpoint on a dataset split. Options only; the work is in libcore
// (mbkit/tools/mb_eval.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_eval.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Evaluate a checkpoint on a dataset split: loss, accuracy, top-k, per-class accuracy "
      "and the confusion matrix. Under mpirun the split is shared out between the ranks.",
      "mb-eval"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::eval::EvalOptions options;
  app.add_option("checkpoint", options.checkpoint, "Checkpoint file (from mb-train-*)")
      ->required()
      ->type_name("FILE");
  app.add_option("--data", options.data, "Dataset or shard file")->required()->type_name("FILE");
  app.add_option("--split", options.split, "test or train")
      ->capture_default_str()
      ->type_name("test|train");
  app.add_option("--top-k", options.top_k, "k of the top-k accuracy")->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "Samples per forward pass")
      ->capture_default_str();
  app.add_option("--limit", options.limit, "Evaluate only the first N samples")->type_name("N");
  app.add_option("--threads", options.threads, "Threads (default: all cores)");
  mbkit::cli::add_device_option(app, options.device);
  mbkit::cli::add_precision_option(app, options.precision);
  app.add_flag("--json", options.json, "Print JSON instead of tables");
  app.add_option("-o,--output", options.output, "Also write the result to this HDF5 file")
      ->type_name("FILE");
  app.add_flag("-f,--force", options.force, "Replace an existing output file");
  return mbkit::cli::run_tool(app, argc, argv, common,
                              [&] { return mbkit::tools::eval::run_eval(options, std::cout); });
}
