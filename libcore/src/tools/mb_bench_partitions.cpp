#include "mbkit/tools/mb_bench_partitions.hpp"

#include "mbkit/bench/measure.hpp"
#include "mbkit/bench/partitions.hpp"
#include "mbkit/bench/partitions_fit.hpp"
#include "mbkit/bench/step_timer.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/results/partition_timings.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/machine.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::bench_partitions {
namespace {

using mbkit::bench::RankDevice;
using mbkit::results::Split;

std::vector<Split> splits_of(const PartitionsOptions& o) {
  if (o.sweep) {
    if (!o.batch_sizes.empty()) usage_error("--sweep and --batch-sizes exclude each other");
    return mbkit::bench::sweep_splits(o.sweep_max);
  }
  if (o.batch_sizes.empty()) usage_error("--batch-sizes (or --sweep) is required");
  return mbkit::bench::grid_splits(mbkit::bench::parse_int_list(o.batch_sizes, "--batch-sizes"),
                                   mbkit::bench::parse_int_list(o.partitions, "--partitions"));
}

void warn_of_unusable_fits(const std::vector<train::TimeModelRecord>& records) {
  for (const auto& record : records) {
    if (!(record.fit.model.a > 0)) {
      log::warn(cat("rank ", record.rank,
                    ": the step time does not grow with the batch (a = ", record.fit.model.a,
                    "); larger --batch-sizes or a quieter machine give a usable model"));
    }
  }
}

void check_options(const PartitionsOptions& o) {
  if (o.data.empty()) usage_error("--data is required");
  if (o.steps < 1) usage_error(cat("--steps: ", o.steps, " is below 1"));
  if (o.warmup < 0) usage_error("--warmup must not be negative");
  if (o.threads < 0) usage_error("--threads must not be negative");
  if (!o.time_model.empty() && !o.fit) usage_error("--time-model needs --fit");
  for (const auto& path : {o.output, o.time_model}) {
    if (!path.empty()) fs::require_replaceable(path, o.force);
  }
}

// Every rank's times of one split, by rank (each rank measured itself).
std::vector<mbkit::results::SplitTimes> gather_times(const comm::World& world, const Split& split,
                                                     const std::vector<double>& mine,
                                                     double my_first, double my_load) {
  std::vector<mbkit::results::SplitTimes> rows(static_cast<std::size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    rows[static_cast<std::size_t>(r)].rank = r;
    rows[static_cast<std::size_t>(r)].split = split;
  }
  for (const double seconds : mine) {
    const auto all = mbkit::bench::gather_seconds(world, seconds);
    for (std::size_t r = 0; r < all.size(); ++r) rows[r].seconds.push_back(all[r]);
  }
  const auto firsts = mbkit::bench::gather_seconds(world, my_first);
  for (std::size_t r = 0; r < firsts.size(); ++r) rows[r].first_seconds = firsts[r];
  const auto loads = mbkit::bench::gather_seconds(world, my_load);
  for (std::size_t r = 0; r < loads.size(); ++r) rows[r].load_seconds = loads[r];
  return rows;
}

// What every rank measured on, by rank, for the time-model records.
std::vector<RankDevice> rank_devices(const comm::World& world,
                                     const mbkit::bench::StepTimer& timer) {
  const auto hosts = world.all_gather(world.host());
  const auto threads = world.all_gather(static_cast<std::uint64_t>(timer.threads()));
  const auto backends = world.all_gather(timer.backend());
  std::vector<RankDevice> devices;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    devices.push_back({hosts[r], static_cast<int>(threads[r]), backends[r]});
  }
  return devices;
}

}  // namespace

int run_bench_partitions(const PartitionsOptions& options, std::ostream& out) {
  check_options(options);
  const auto splits = splits_of(options);
  if (options.fit) mbkit::bench::check_fit_splits(splits);
  comm::World world;
  return world.run_collectively([&] {
    mbkit::bench::StepTimerOptions timing;
    timing.model.name = options.model;
    timing.data = options.data;
    timing.device = options.device;
    timing.precision = options.precision;
    timing.threads = options.threads;
    timing.seed = options.seed;
    timing.rank = world.rank();
    mbkit::bench::StepTimer timer(timing);
    mbkit::results::PartitionsRun run;
    run.model = options.model;
    run.data = options.data;
    run.device = options.device;
    run.backend = timer.backend();
    run.cpu_model = util::cpu_model_name();
    run.threads = timer.threads();
    run.ranks = world.size();
    run.steps = options.steps;
    run.warmup_steps = options.warmup;
    run.seed = options.seed;
    for (const Split& split : splits) {
      world.barrier();  // every rank computes at once, as in a run
      double first = 0, load = 0;
      const auto mine = timer.time_steps(split, options.warmup, options.steps, &first, &load);
      for (auto& row : gather_times(world, split, mine, first, load)) {
        run.rows.push_back(std::move(row));
      }
    }
    const auto devices = options.fit ? rank_devices(world, timer) : std::vector<RankDevice>{};
    if (world.rank() == 0) {
      mbkit::results::write_partitions_table(out, run);
      out.flush();
      if (!out) fail("cannot write the table to standard output");
      if (!options.output.empty()) {
        mbkit::results::write_partitions_file(options.output, run);
        log::info(cat("wrote ", options.output));
      }
      if (options.fit) {
        const auto records = mbkit::bench::fit_time_models(run, devices);
        mbkit::bench::write_fits(out, records);
        if (options.time_model.empty()) {
          warn_of_unusable_fits(records);
        } else {  // an unusable fit is refused there, with the same advice
          train::write_time_model(options.time_model, records);
          log::info(cat("wrote ", options.time_model));
        }
      }
    }
    return 0;
  });
}

}  // namespace mbkit::tools::bench_partitions
