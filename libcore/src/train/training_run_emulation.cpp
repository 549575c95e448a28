// A training run's emulated cluster (training_run.hpp): at set-up the compute and message
// models, AMB's time limit and DropCompute's threshold, and the full batch they measure; under
// mpirun, the ranks' shares of the emulated workers combined each step.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <span>

#include "mbkit/backend/factory.hpp"
#include "mbkit/config.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/plot/config.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/describe.hpp"
#include "mbkit/train/drop_compute.hpp"
#include "mbkit/train/resume_check.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

namespace {
// A file whose exchange moves in ticks hides a step's compute up to a slack known only at the
// measured sizes.
std::string not_measured_in_ticks(const std::string& file, const char* exchange,
                                  std::uint64_t bytes) {
  return cat("--comm-model ", file, ": its ", exchange,
             " moves in ticks, but not measured at the gradient's ", bytes,
             " bytes: timing a step as compute + exchange (mb-bench-bandwidth --fit --also-bytes ",
             bytes, " measures its slack)");
}
}  // namespace

// Cluster emulation: this rank's compute cost and the cost of a message.
void TrainingRun::set_up_emulation() {
  compute_models_ = options_.compute_model;
  compute_models_.check_ranks(role_.ranks(world_), role_.servers);
  compute_model_ = role_.computes ? compute_models_.for_rank(world_.rank()) : std::nullopt;
  gradient_bytes_ = net_->parameter_count() * sizeof(float);
  cpu_quota_ = options_.cpu_quota;
  if (clock_.is_virtual() && role_.distributed) {
    // Measured on the collectives the run's synchronous exchange calls where it calls them
    // (virtual_clock.hpp); point-to-point exchanges and device sums by ping-pong.
    const bool collectives = !role_.async && !options_.dbsl.enabled &&
                             !options_.compression.enabled() && net_->backend().host_accessible();
    MeasuredExchange how = MeasuredExchange::kPingPong;
    if (collectives && role_.parameter_server && role_.servers == 1) {
      how = MeasuredExchange::kParameterServer;
    } else if (collectives && !role_.parameter_server && options_.allreduce == AllreduceVia::kMpi &&
               options_.bucket_mb == 0) {
      how = MeasuredExchange::kAllreduce;
    }
    comm_model_ = options_.comm_model
                      ? *options_.comm_model
                      : measure_comm_model(world_, gradient_bytes_, how,
                                           measure_idle_for(expected_slowest_round()));
    check_comm_model_for_run(comm_model_, role_.ranks(world_),
                             role_.async || options_.dbsl.enabled);
    // (ps_round_at of a measured size: whether the file's round prices this run's ps step.)
    if (logs_ && role_.parameter_server && !role_.async && !options_.dbsl.enabled &&
        comm_model_.ps_round_ticks() &&
        comm_model_.ps_round_at(comm_model_.ps_round_busy.front().bytes, role_.workers,
                                role_.servers) &&
        !comm_model_.ps_round_at(gradient_bytes_, role_.workers, role_.servers)) {
      log::warn(not_measured_in_ticks(comm_model_.file, "ps round", gradient_bytes_));
    }
    // A synchronous parameter server's worker copies the parameters it receives (the
    // message's per-byte part): CPU its quota pays under the kernel's model.
    if (cpu_quota_.tick > 0 && role_.parameter_server && !role_.async && !options_.dbsl.enabled) {
      cpu_quota_.receive = std::max(
          0.0, comm_model_.message(gradient_bytes_) - comm_model_.message(std::uint64_t{0}));
    }
    // A file's allreduce fit times the exchange it measured, one MPI allreduce of every
    // worker's gradient (the exchange the run would time at start, above); any other exchange
    // keeps the ring of messages.
    if (comm_model_.allreduce_ranks > 0) {
      const bool mpi_allreduce = how == MeasuredExchange::kAllreduce;
      if (mpi_allreduce && comm_model_.allreduce_ranks != role_.workers && logs_) {
        log::warn(cat("--comm-model ", comm_model_.file, ": its allreduce was measured on ",
                      comm_model_.allreduce_ranks, " ranks, this run has ", role_.workers,
                      "; timing the allreduce as a ring of its messages (mpirun -n ", role_.workers,
                      " mb-bench-bandwidth --fit measures this run's)"));
      }
      if (!mpi_allreduce || comm_model_.allreduce_ranks != role_.workers) {
        comm_model_.allreduce_ranks = 0;
        comm_model_.allreduce_points = {};
        comm_model_.allreduce_busy.clear();
      } else if (logs_ && comm_model_.allreduce_ticks() &&
                 !comm_model_.allreduce_at(gradient_bytes_, role_.workers)) {
        log::warn(not_measured_in_ticks(comm_model_.file, "allreduce", gradient_bytes_));
      }
    }
  }
}

// The slowest worker's round as the master waits for it, from the compute models (a full batch
// at the worker's --slowdown) and the mean induced delay; without a model for every worker, as
// long as kMeasureIdle (the master asleep between polls: a round measured at CPU time is not
// known before the run).
double TrainingRun::expected_slowest_round() const {
  double slowest = 0;
  const int micro = std::max(1, anytime_partitions(options_));
  for (int w = 0; w < role_.workers; ++w) {
    const int rank = worker_rank(w, role_.servers);
    const auto model = compute_models_.for_rank(rank);
    if (!model) return kMeasureIdle;
    const int batch = worker_batch_size(options_, role_.workers, w);
    const int micro_size = std::max(1, batch / micro);
    const double full = (batch / micro_size) * model->cost(micro_size);
    slowest = std::max(slowest, full * slowdown_.factor_for(rank));
  }
  const auto& trace = options_.induce_trace;
  return slowest + (stragglers_ ? stragglers_->expected_delay() : trace ? trace->mean() : 0.0);
}

// AMB's time limit; "auto": the median over the workers of the time a step takes them when
// nothing stops them early, on the run's clock: a full batch (its micro-batches, measured or
// from the compute model) times the worker's --slowdown factor, plus the mean of the --induce
// delay (the AMB experiments' recipe, so that a delayed worker is not cut short as a rule).
void TrainingRun::decide_time_limit() {
  if (!amb_) return;
  const DropComputeOptions& drop = options_.drop_compute;
  if (drop.enabled && !drop.auto_threshold) {
    time_limit_ = drop.threshold.value();
    return;
  }
  if (!drop.enabled && !options_.amb.auto_time_limit) {
    time_limit_ = options_.amb.time_limit.value();
    return;
  }
  const double mine = role_.computes ? measure_full_batch() * slowdown_.factor_for(world_.rank())
                                     : std::numeric_limits<double>::quiet_NaN();
  std::vector<double> measured;
  for (const std::uint64_t bits : world_.all_gather(std::bit_cast<std::uint64_t>(mine))) {
    const double value = std::bit_cast<double>(bits);
    if (!std::isnan(value)) measured.push_back(value);
  }
  if (emulated_) {
    // Each emulated worker's full batch, as its own process would time it: its compute
    // model's cost, else this process's measured batch (the workers share its core).
    const double cpu = compute_models_.empty() ? measure_full_batch() : 0.0;
    for (int w = 0; w < role_.workers; ++w) {
      const int batch = worker_batch_size(options_, role_.workers, w);
      const int micro = batch / anytime_partitions(options_);
      const auto model = emulated_->compute_model(compute_models_, w);
      const double full = model ? (batch / micro) * model->cost(micro) : cpu;
      measured.push_back(full * slowdown_.factor_for(emulated_->rank_of(w)));
    }
  }
  if (drop.enabled) {
    choose_drop_compute_threshold(measured);  // by worker, as gathered
    return;
  }
  std::sort(measured.begin(), measured.end());
  const double full_batch = measured[measured.size() / 2];
  const auto& trace = options_.induce_trace;
  const double delay = stragglers_ ? stragglers_->expected_delay() : trace ? trace->mean() : 0.0;
  time_limit_ = full_batch + delay;
  time_limit_rule_ = cat(
      "median over the workers of a full batch", slowdown_.empty() ? "" : " x slowdown", " (",
      shortest_decimal(full_batch), " s; ", shortest_decimal(measured.front()), " to ",
      shortest_decimal(measured.back()), " s)",
      stragglers_ || trace ? cat(" + the mean induced delay (", shortest_decimal(delay), " s, ",
                                 stragglers_ ? stragglers_->name : cat("trace ", trace->path), ")")
                           : "");
  if (logs_)
    log::verbose(cat("--time-limit auto: ", short_duration(time_limit_), ": ", time_limit_rule_));
}

// --drop-compute auto (drop_compute.hpp): the workers' micro-batch costs (their full batches /
// the micro-batches), 200 trials of their delays (fewer past 1,000 workers) drawn from the
// --induce profile or read from the trace on a stream of their own, and the step's exchange
// under the comm model (the measured one's, else none).
void TrainingRun::choose_drop_compute_threshold(const std::vector<double>& full_batches) {
  const int micro_batches = batch_ / micro_size_;
  std::vector<double> costs;
  for (const double full : full_batches) costs.push_back(full / micro_batches);
  const int workers = static_cast<int>(costs.size());
  const int trials = std::clamp(200000 / std::max(1, workers), 20, 200);
  std::vector<std::vector<double>> delays(static_cast<std::size_t>(trials),
                                          std::vector<double>(costs.size(), 0.0));
  const auto& trace = options_.induce_trace;
  if (stragglers_ || trace) {
    for (int w = 0; w < workers; ++w) {
      std::unique_ptr<emulation::DelaySource> source;
      if (trace) {
        source = std::make_unique<emulation::TraceReplay>(trace, w);
      } else {
        // Not the workers' own streams (Rng(seed, rank)): choosing draws nothing of theirs.
        source = std::make_unique<emulation::StragglerSampler>(*stragglers_,
                                                               options_.seed ^ 0xd7095c0ULL, w + 1);
      }
      for (auto& trial : delays) trial[static_cast<std::size_t>(w)] = source->next();
    }
  }
  const double exchange = !role_.distributed ? 0.0
                          : role_.parameter_server
                              ? 2 * comm_model_.ps_message(gradient_bytes_, workers, role_.servers)
                              : comm_model_.allreduce(gradient_bytes_, workers);
  const auto choice =
      train::choose_drop_compute_threshold(costs, micro_batches, micro_size_, delays, exchange);
  time_limit_ = choice.threshold;
  time_limit_rule_ =
      cat("DropCompute auto: ", shortest_decimal(choice.samples_per_second),
          " samples/s expected against ", shortest_decimal(choice.full_batches_per_second),
          " with nothing dropped (", trials, " draws of ", workers, " workers' delays",
          stragglers_ ? cat(", ", stragglers_->name)
          : trace     ? cat(", trace ", trace->path)
                      : "",
          ")");
  if (logs_) {
    log::verbose(cat("--drop-compute auto: ", short_duration(time_limit_), ": ", time_limit_rule_));
  }
}

// A full batch's time, measured on random inputs of the data's shape so that the data stream
// is untouched; the model's state is put back afterwards.
double TrainingRun::measure_full_batch() {
  const int micro_batches = batch_ / micro_size_;
  if (compute_model_) return micro_batches * compute_model_->cost(micro_size_);
  const std::size_t image = static_cast<std::size_t>(shape_.channels) *
                            static_cast<std::size_t>(shape_.height) *
                            static_cast<std::size_t>(shape_.width);
  std::vector<float> images(image * static_cast<std::size_t>(micro_size_));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(micro_size_));
  Rng rng(options_.seed, 0xa3b + static_cast<std::uint64_t>(world_.rank()));
  for (float& x : images) x = static_cast<float>(rng.normal());
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(info_.num_classes));
  // Saved in backend memory: no host copy.
  nn::Backend& backend = net_->backend();
  const auto saved_state = backend.make_buffer(net_->state_count());
  backend.copy(net_->state_buffer(), 0, *saved_state, 0, net_->state_count());
  std::vector<double> times;
  WorkTimer timer(clock_, backend);
  for (int round = 0; round < 4; ++round) {  // one to warm up, the median of three
    timer.restart();
    for (int k = 0; k < micro_batches; ++k) {
      net_->train(images.data(), labels.data(), micro_size_, 1, 1.0, k > 0);
    }
    const double seconds = timer.seconds();  // a GPU's queued work included
    if (round > 0) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  backend.copy(*saved_state, 0, net_->state_buffer(), 0, net_->state_count());
  return times[1];
}

// --emulate under mpirun: each rank's sum of its hosted workers (their gradients and state in
// worker order, their report slots) goes to rank 0, which adds them in rank order, rank 0's
// first: the additions of one process hosting them all, grouped by rank. MPI_Reduce would add
// in an order Open MPI chooses (README.md), so the sums are gathered and added here.
void TrainingRun::combine_shares(std::span<float> sum) {
  const std::size_t floats = sum.size();
  const std::size_t bytes = floats * sizeof(float);
  const auto mine = std::as_bytes(std::span<const float>(sum));
  const bool root = world_.rank() == 0;
  if (root) share_sums_.resize(floats * static_cast<std::size_t>(world_.size() - 1));
  world_.gather_blocks(
      root ? std::span<const std::uint8_t>()
           : std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(mine.data()),
                                           bytes),
      root ? std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(share_sums_.data()),
                                     share_sums_.size() * sizeof(float))
           : std::span<std::uint8_t>(),
      bytes, 0, 1);
  if (root) {
    float* total = sum.data();
    for (int r = 1; r < world_.size(); ++r) {
      const float* share = share_sums_.data() + static_cast<std::size_t>(r - 1) * floats;
      for (std::size_t i = 0; i < floats; ++i) total[i] += share[i];
    }
  }
  world_.broadcast(sum, 0);
}

std::vector<double> TrainingRun::emulated_arrivals() {
  return gather_shares(emulated_->predict_arrivals(
                           selection_, [&](int w, double ready) { return arrival_of(w, ready); }),
                       1);
}

std::vector<double> TrainingRun::gather_shares(std::vector<double> hosted,
                                               std::size_t per_worker) const {
  if (!role_.shares) return hosted;
  // A block per rank, as large as the largest share (the first rank's), of which rank r's
  // first emulated_share(...).second workers' values are its hosted workers'.
  const int ranks = world_.size();
  const std::size_t block =
      static_cast<std::size_t>(emulated_share(role_.workers, ranks, 0).second) * per_worker;
  std::vector<double> blocks(block * static_cast<std::size_t>(ranks), 0.0);
  std::copy(hosted.begin(), hosted.end(),
            blocks.begin() + static_cast<std::ptrdiff_t>(block) * world_.rank());
  world_.all_gather_in_place(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(blocks.data()),
                                                     blocks.size() * sizeof(double)),
                             block * sizeof(double));
  std::vector<double> all;
  all.reserve(static_cast<std::size_t>(role_.workers) * per_worker);
  for (int r = 0; r < ranks; ++r) {
    const auto first = blocks.begin() + static_cast<std::ptrdiff_t>(block) * r;
    const auto values =
        static_cast<std::size_t>(emulated_share(role_.workers, ranks, r).second) * per_worker;
    all.insert(all.end(), first, first + static_cast<std::ptrdiff_t>(values));
  }
  return all;
}

int TrainingRun::share_verdict(int verdict, double& update_time) {
  struct {
    std::int64_t verdict;
    double update_time;
  } mine{verdict, update_time};
  // Polled, not MPI_Bcast: rank 0 comes later (it records the step, or finishes a round it
  // computes ahead) and MPI_Bcast spins meanwhile, on a machine with fewer cores than ranks
  // taking the core rank 0 needs (a quarter of rank 1's CPU in an asynchronous DBSL run).
  comm::Request pending = world_.ibroadcast(
      std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&mine), sizeof mine), 0);
  world_.wait(pending, "rank 0's verdict on the step");
  update_time = mine.update_time;
  return static_cast<int>(mine.verdict);
}

}  // namespace mbkit::train
