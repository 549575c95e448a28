// mb-bench-bandwidth: time and bandwidth of MPI collectives and of the trainers' exchange, as
// nccl-tests measures them. Options only; the work is in libcore
// (mbkit/tools/mb_bench_bandwidth.hpp).
#include <iostream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/tools/mb_bench_bandwidth.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Time MPI collectives (or NCCL's, on GPU buffers) and the trainers' per-step exchange over "
      "a range of sizes, nccl-tests style: time over ranks, algorithm and bus bandwidth, and a "
      "check of every result. Run it under mpirun.",
      "mb-bench-bandwidth"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::bench_bandwidth::BandwidthOptions options;
  app.add_option("--op", options.ops,
                 "reduce-bcast, allreduce, reduce, bcast, gather, allgather, reduce-scatter, "
                 "exchange (every --comm mode of the trainers), a comma-separated list, or all")
      ->capture_default_str()
      ->type_name("OP");
  app.add_option("-b,--min-bytes", options.min_bytes, "Smallest size: bytes, or with K, M, G")
      ->capture_default_str()
      ->type_name("SIZE");
  app.add_option("-e,--max-bytes", options.max_bytes, "Largest size")
      ->capture_default_str()
      ->type_name("SIZE");
  app.add_option("-f,--step-factor", options.step_factor, "Multiply the size by this each step")
      ->capture_default_str();
  app.add_option("--also-bytes", options.also_bytes,
                 "Sizes timed besides the range: bytes, or with K, M, G; a comma-separated list "
                 "(e.g. a model's gradient, whose point a --comm-model file then holds)")
      ->type_name("LIST");
  app.add_option("-n,--iters", options.iters, "Timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup-iters", options.warmup_iters, "Untimed iterations before them")
      ->capture_default_str();
  app.add_option("--large-iters", options.large_iters,
                 "Timed iterations from --large-from on, instead of --iters (as OSU's "
                 "benchmarks time large messages fewer times)")
      ->type_name("N");
  app.add_option("--large-from", options.large_from,
                 "The size from which --large-iters applies: bytes, or with K, M, G")
      ->type_name("SIZE");
  app.add_option("--dtype", options.dtype, "float or double")
      ->capture_default_str()
      ->type_name("float|double");
  app.add_flag("--check,!--no-check", options.check,
               "Check every result against the exact expected values (column wrong; the "
               "default)");
  app.add_option("--servers", options.servers,
                 "--op exchange: ps and ps --async with each of these numbers of server ranks (a "
                 "comma-separated list, as the trainers' --servers)")
      ->capture_default_str()
      ->type_name("LIST");
  app.add_option("--compress", options.compress,
                 "--op exchange: ps and allreduce with each of these gradient encodings (none, "
                 "fp16, bf16, 2bit:THRESHOLD; a comma-separated list, as the trainers' --compress)")
      ->capture_default_str()
      ->type_name("LIST");
  app.add_option("--append", options.append,
                 "Add the run to this HDF5 results file, keyed by ranks and operation")
      ->type_name("FILE");
  mbkit::cli::add_device_option(app, options.device);
  app.add_option("--transport", options.transport,
                 "What moves the buffers: mpi (on a GPU: staged through pinned host memory) or "
                 "nccl (GPU buffers only; allreduce, reduce, bcast, allgather, reduce-scatter). "
                 "Default mpi on cpu, nccl on cuda")
      ->type_name("mpi|nccl");
  app.add_flag("--fit", options.fit,
               "Time messages between every pair of ranks over the sizes (ping-pong, then "
               "streamed windows, then the asynchronous exchange's cycle) and an allreduce of "
               "all, and fit the trainers' message models time = alpha + beta * bytes (alone "
               "unless --op is given)");
  app.add_option("--comm-model", options.comm_model,
                 "With --fit: write the model to this HDF5 file (the trainers' --comm-model "
                 "reads it)")
      ->type_name("FILE");
  app.add_flag("--force", options.force, "Replace an existing --comm-model file");
  app.add_option("--min-r-squared", options.min_r_squared,
                 "With --comm-model: the least r^2 of the message line the file is written with "
                 "(the trainers accept the file's own bar); below it the run ends with status 1")
      ->type_name("R")
      ->capture_default_str();
  app.add_option("--comm-timeout", options.comm_timeout,
                 "Seconds a rank waits for the others before the job ends")
      ->capture_default_str();
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    options.ops_given = app.count("--op") > 0;
    return mbkit::tools::bench_bandwidth::run_bench_bandwidth(options, std::cout);
  });
}
