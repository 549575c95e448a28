// mb-bench-partitions: the time of a training step against its split into micro-batches, and
// the DBSL time model. Options only; the work is in libcore (mbkit/tools/mb_bench_partitions.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_bench_partitions.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Time training steps of a model that loop over P micro-batches of B/P samples and apply "
      "one update (the AMB worker's round without a deadline), for lists of batch sizes B and "
      "partition counts P or the AMB original's sweep; with --fit, fit the DBSL time model "
      "t(B) = a B + b. Under mpirun every rank measures itself.",
      "mb-bench-partitions"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::bench_partitions::PartitionsOptions options;
  app.add_option("--model", options.model, "Model from the zoo (mb-train-fmb.1)")
      ->capture_default_str()
      ->type_name("NAME");
  app.add_option("--data", options.data, "Dataset file (its training split)")
      ->required()
      ->type_name("FILE");
  app.add_option("--batch-sizes", options.batch_sizes, "Batch sizes B, comma-separated")
      ->type_name("B,...");
  app.add_option("--partitions", options.partitions,
                 "Micro-batch counts P, comma-separated; each must divide every B")
      ->capture_default_str()
      ->type_name("P,...");
  app.add_flag("--sweep", options.sweep,
               "The original's sweep: B = 4, 8, ... up to --sweep-max, P = 1, 2, ... B/2");
  app.add_option("--sweep-max", options.sweep_max, "Largest batch of --sweep")
      ->capture_default_str();
  app.add_option("--steps", options.steps, "Timed steps per (B, P)")->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed steps before them")->capture_default_str();
  app.add_option("--threads", options.threads, "Threads (default: all cores)");
  mbkit::cli::add_device_option(app, options.device);
  mbkit::cli::add_precision_option(app, options.precision);
  app.add_option("--seed", options.seed, "Seed of the model and the data order")
      ->capture_default_str();
  app.add_option("-o,--output", options.output, "Also write the timings to this HDF5 file")
      ->type_name("FILE");
  app.add_flag("-f,--force", options.force, "Replace existing output files");
  app.add_flag("--fit", options.fit,
               "Fit t(B) = a B + b to the median step time at P = 1 over the batch sizes");
  app.add_option("--time-model", options.time_model,
                 "With --fit: write the time model to this HDF5 file (mb-train-dbsl reads it)")
      ->type_name("FILE");
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    return mbkit::tools::bench_partitions::run_bench_partitions(options, std::cout);
  });
}
