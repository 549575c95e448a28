// mb-dataset: get, make, split and inspect mbkit dataset files. Options only; the work is in
// libcore (mbkit/tools/mb_dataset.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_dataset.hpp"

int main(int argc, char** argv) {
  namespace ds = mbkit::tools::dataset;
  CLI::App app{"Get, make, split and inspect mbkit dataset files (HDF5; see mbkit-formats(5)).",
               "mb-dataset"};
  app.require_subcommand(1);
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);

  mbkit::data::FetchOptions fetch;
  fetch.deflate_level = ds::kDefaultCompression;
  auto* fetch_cmd = app.add_subcommand(
      "fetch",
      "Download (or read locally) a known dataset, check its published checksums and "
      "write it as one dataset file");
  fetch_cmd->add_option("name", fetch.name, "mnist, fashion-mnist, cifar10 or cifar100")
      ->required()
      ->type_name("NAME");
  fetch_cmd->add_option("-o,--output", fetch.output, "Dataset file to write")
      ->required()
      ->type_name("FILE");
  fetch_cmd
      ->add_option("--from", fetch.from,
                   "Read the published files from this directory (or archive) instead of "
                   "downloading")
      ->type_name("PATH");
  fetch_cmd->add_option("--mirror", fetch.mirror, "Base URL to download the published files from")
      ->type_name("URL");
  fetch_cmd
      ->add_option("--cache-dir", fetch.cache_dir,
                   "Download cache (default $XDG_CACHE_HOME/mbkit or ~/.cache/mbkit)")
      ->type_name("DIR");
  fetch_cmd
      ->add_option("--checksums", fetch.checksums_file,
                   "md5sum/sha256sum-style list to check the files against instead of the "
                   "published checksums")
      ->type_name("FILE");
  fetch_cmd->add_flag(
      "--no-checksum", fetch.no_checksum,
      "Accept files whose checksum differs from the published one (with a warning)");
  fetch_cmd->add_flag("-f,--force", fetch.force, "Rebuild even if a valid output exists");
  fetch_cmd
      ->add_option("--retries", fetch.retries, "Extra attempts after a transient network error")
      ->capture_default_str();
  fetch_cmd
      ->add_option("--timeout", fetch.stall_timeout,
                   "Give up on a transfer that stalls for this many seconds")
      ->capture_default_str();
  fetch_cmd->add_option("--compression", fetch.deflate_level, "Deflate level 0-9 of the output")
      ->capture_default_str();

  ds::ImportOptions import;
  auto* import_cmd = app.add_subcommand(
      "import",
      "Convert local files of a supported format (IDX, CIFAR binary) into a dataset file");
  import_cmd->add_option("format", import.format, "idx, cifar10 or cifar100")
      ->required()
      ->type_name("FORMAT");
  import_cmd->add_option("-o,--output", import.output, "Dataset file to write")
      ->required()
      ->type_name("FILE");
  import_cmd->add_option("--name", import.name, "Dataset name recorded in the file")
      ->type_name("NAME");
  import_cmd->add_option("--train-images", import.idx_files[0], "idx: training images")
      ->type_name("FILE");
  import_cmd->add_option("--train-labels", import.idx_files[1], "idx: training labels")
      ->type_name("FILE");
  import_cmd->add_option("--test-images", import.idx_files[2], "idx: test images")
      ->type_name("FILE");
  import_cmd->add_option("--test-labels", import.idx_files[3], "idx: test labels")
      ->type_name("FILE");
  import_cmd
      ->add_option("--from", import.from, "cifar: the binary archive or its extracted directory")
      ->type_name("PATH");
  import_cmd->add_option("--num-classes", import.num_classes,
                         "idx: number of classes (default: largest label + 1)");
  import_cmd
      ->add_option("--class-names", import.class_names,
                   "Class names, comma-separated, or @FILE with one per line")
      ->type_name("NAMES|@FILE");
  import_cmd->add_flag("-f,--force", import.force, "Replace an existing output file");
  import_cmd->add_option("--compression", import.deflate_level, "Deflate level 0-9")
      ->capture_default_str();

  ds::ImportTraceOptions import_trace;
  auto* import_trace_cmd = app.add_subcommand(
      "import-trace",
      "Convert per-worker, per-step times (an Alibaba PAI mini-batch-time job file, or a "
      "worker,step,seconds CSV) into the HDF5 delay trace that --induce trace:FILE replays");
  import_trace_cmd->add_option("format", import_trace.format, "pai or csv")
      ->required()
      ->type_name("FORMAT");
  import_trace_cmd->add_option("input", import_trace.input, "The file to convert")
      ->required()
      ->type_name("FILE");
  import_trace_cmd->add_option("-o,--output", import_trace.output, "Delay trace file to write")
      ->required()
      ->type_name("FILE");
  import_trace_cmd->add_flag("--whole", import_trace.whole,
                             "pai: keep each worker's whole time, not its excess over the "
                             "iteration's fastest worker");
  import_trace_cmd->add_flag("-f,--force", import_trace.force, "Replace an existing output file");

  ds::SynthOptions synth;
  auto* synth_cmd = app.add_subcommand("synth", "Write a synthetic dataset (seeded)");
  synth_cmd
      ->add_option("kind", synth.kind,
                   "toy (the AMB toy problem, 100 features) or images (random C,H,W images)")
      ->required()
      ->type_name("KIND");
  synth_cmd->add_option("-o,--output", synth.output, "Dataset file to write")
      ->required()
      ->type_name("FILE");
  synth_cmd->add_option("--train", synth.toy.train,
                        "Training samples (toy default 10000, images 1024)");
  synth_cmd->add_option("--test", synth.toy.test, "Test samples (toy default 1000, images 256)");
  synth_cmd->add_option("--seed", synth.toy.seed, "Random seed")->capture_default_str();
  synth_cmd->add_flag("--learnable", synth.toy.learnable,
                      "toy: class-dependent feature means, so that a model can learn");
  synth_cmd
      ->add_option("--separation", synth.toy.separation,
                   "toy: standard deviation of the class means")
      ->capture_default_str();
  synth_cmd->add_option("--classes", synth.images.classes,
                        "Number of classes (toy 10, images 1000)");
  synth_cmd->add_option("--shape", synth.shape, "images: C,H,W (default 3,224,224)")
      ->type_name("C,H,W");
  synth_cmd->add_flag("-f,--force", synth.force, "Replace an existing output file");
  synth_cmd->add_option("--compression", synth.deflate_level, "Deflate level 0-9")
      ->capture_default_str();

  mbkit::data::ShardOptions shard;
  shard.deflate_level = ds::kDefaultCompression;
  std::string shard_method = "random";
  auto* shard_cmd = app.add_subcommand(
      "shard",
      "Split a dataset's training split into N shard files PREFIX-0000i-of-0000N.h5 "
      "(each with the whole test split); prints their paths");
  shard_cmd->add_option("file", shard.input, "Dataset file to split")
      ->required()
      ->type_name("FILE");
  shard_cmd->add_option("-n,--count", shard.count, "Number of shards")->required();
  shard_cmd
      ->add_option("--by", shard_method,
                   "contiguous, strided (as tf.data shard()) or random (class-balanced)")
      ->capture_default_str()
      ->type_name("contiguous|strided|random");
  shard_cmd->add_option("--seed", shard.seed, "Seed of the random method")->capture_default_str();
  shard_cmd->add_option("-o,--output", shard.prefix, "Prefix of the shard files")
      ->required()
      ->type_name("PREFIX");
  shard_cmd->add_option("--compression", shard.deflate_level, "Deflate level 0-9")
      ->capture_default_str();

  ds::InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "Summarise a dataset file");
  info_cmd->add_option("file", info.path, "Dataset file")->required()->type_name("FILE");
  info_cmd->add_flag("--json", info.json, "Print JSON instead of a table");

  ds::VerifyOptions verify;
  auto* verify_cmd = app.add_subcommand(
      "verify",
      "Check dataset files against the format, reading every byte; exit 3 if one is invalid");
  verify_cmd->add_option("files", verify.paths, "Dataset files")->required()->type_name("FILE");
  verify_cmd->add_flag("--json", verify.json, "Print JSON results");

  return mbkit::cli::run_tool(app, argc, argv, common, [&]() -> int {
    if (*fetch_cmd) return ds::run_fetch(fetch);
    if (*import_cmd) return ds::run_import(import);
    if (*import_trace_cmd) return ds::run_import_trace(import_trace);
    if (*synth_cmd) {
      // The toy and images generators share --train/--test/--seed/--classes.
      synth.images.train = synth_cmd->count("--train") ? synth.toy.train : synth.images.train;
      synth.images.test = synth_cmd->count("--test") ? synth.toy.test : synth.images.test;
      synth.images.seed = synth.toy.seed;
      if (synth_cmd->count("--classes")) synth.toy.classes = synth.images.classes;
      return ds::run_synth(synth);
    }
    if (*shard_cmd) {
      shard.method = mbkit::data::parse_shard_method(shard_method);
      return ds::run_shard(shard, std::cout);
    }
    if (*info_cmd) return ds::run_info(info, std::cout);
    return ds::run_verify(verify, std::cout);
  });
}
