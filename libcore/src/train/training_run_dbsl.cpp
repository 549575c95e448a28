// Dual batch size learning on the engine (training_run.hpp, algorithms.md §3): the plan at
// set-up, the parameter server's loop (a merge per push, or per round with --sync) and the
// worker's loop (pull, reshuffle, train its samples at its batch, push).
#include <algorithm>
#include <bit>
#include <cmath>

#include "mbkit/train/dbsl_exchange.hpp"
#include "mbkit/train/dbsl_merge.hpp"
#include "mbkit/train/dbsl_options.hpp"
#include "mbkit/train/emulated_dbsl.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

void TrainingRun::plan_dbsl() {
  std::vector<double> r_squared;
  std::vector<TimeModel> models = options_.dbsl.calibrate
                                      ? calibrate_time_models(r_squared)
                                      : time_models_from_options(options_, role_.workers);
  if (models.empty()) {
    usage_error(
        "the plan needs a time model: --time-model, --time-model-ab, --calibrate or "
        "--compute-model");
  }
  dbsl_plan_ =
      make_dbsl_plan(options_, static_cast<std::int64_t>(total_rows_), role_.workers, models);
  if (options_.dbsl.calibrate) {
    dbsl_plan_.calibrated = models;
    dbsl_plan_.r_squared = r_squared;
  }
  const UpdateFactor kind = parse_update_factor(options_.dbsl.update_factor);
  dbsl_factors_.clear();
  for (const auto& worker : dbsl_plan_.workers) {
    dbsl_factors_.push_back(worker.small ? update_factor(kind, worker.factor) : 1.0);
  }
  if (emulated_) {
    std::vector<int> batches;
    for (const auto& worker : dbsl_plan_.workers) batches.push_back(worker.batch);
    emulated_->read_whole_split(batches);
  }
  if (!role_.computes) return;
  // Every round takes the first d samples of a fresh permutation of the whole split.
  data::LoaderOptions train_options;
  train_options.path = my_data_.path;
  train_options.split = "train";
  train_options.batch_size = dbsl_plan_.workers[static_cast<std::size_t>(role_.worker)].batch;
  train_options.seed = options_.seed;
  train_options.augment = options_.augment;
  train_options.prefetch = options_.prefetch;
  train_loader_.emplace(train_options);
  my_rows_ = train_loader_->rows();
  my_batches_ = train_loader_->batches_per_epoch();
}

double TrainingRun::time_batch(int size) {
  const double slowdown = slowdown_.factor_for(world_.rank());
  if (compute_model_) return slowdown * compute_model_->cost(size);
  const std::size_t image = static_cast<std::size_t>(shape_.channels) *
                            static_cast<std::size_t>(shape_.height) *
                            static_cast<std::size_t>(shape_.width);
  std::vector<float> images(image * static_cast<std::size_t>(size));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(size));
  Rng rng(options_.seed, 0xca1 + static_cast<std::uint64_t>(world_.rank()));
  for (float& x : images) x = static_cast<float>(rng.normal());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(info_.num_classes));
  }
  // Saved in backend memory: no host copy.
  nn::Backend& backend = net_->backend();
  const auto saved_state = backend.make_buffer(net_->state_count());
  backend.copy(net_->state_buffer(), 0, *saved_state, 0, net_->state_count());
  std::vector<double> times;
  WorkTimer timer(clock_, backend);
  for (int round = 0; round < 4; ++round) {
    timer.restart();
    net_->forward(images.data(), labels.data(), size, true, 1);
    net_->backward(1.0, false);
    const double seconds = timer.seconds();  // a GPU's queued work included
    if (round > 0) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  backend.copy(*saved_state, 0, net_->state_buffer(), 0, net_->state_count());
  return slowdown * times[1];
}

std::vector<TimeModel> TrainingRun::calibrate_time_models(std::vector<double>& r_squared) {
  const int base = options_.dbsl.base_batch;
  std::vector<double> sizes;
  for (const int divisor : {8, 4, 2, 1}) {
    const double size = std::max(1, base / divisor);
    if (sizes.empty() || size != sizes.back()) sizes.push_back(size);
  }
  if (sizes.size() < 2) sizes.push_back(2);  // --base-batch 1: a line needs two sizes
  double mine[3] = {0, 0, 0};                // a, b, r^2 (the server measures nothing)
  if (role_.computes) {
    std::vector<double> seconds;
    for (const double size : sizes) seconds.push_back(time_batch(static_cast<int>(size)));
    const TimeModelFit fit = fit_time_model(sizes, seconds);
    mine[0] = fit.model.a;
    mine[1] = fit.model.b;
    mine[2] = fit.r_squared;
  }
  std::vector<TimeModel> models;
  r_squared.clear();
  std::vector<std::vector<std::uint64_t>> gathered;
  for (const double value : mine)
    gathered.push_back(world_.all_gather(std::bit_cast<std::uint64_t>(value)));
  for (int w = 0; w < role_.workers; ++w) {
    const auto rank = static_cast<std::size_t>(role_.rank_of(w));
    models.push_back(
        {std::bit_cast<double>(gathered[0][rank]), std::bit_cast<double>(gathered[1][rank])});
    r_squared.push_back(std::bit_cast<double>(gathered[2][rank]));
    if (logs_) {
      log::info(cat("--calibrate: rank ", rank, ": t(x) = ", strprintf("%.6g", models.back().a),
                    " x + ", strprintf("%.6g", models.back().b), " s, r^2 ",
                    strprintf("%.4f", r_squared.back())));
    }
    const TimeModel& m = models.back();
    if (!(m.a >= 0 && m.b >= 0 && m.a + m.b > 0)) {
      // Timing noise swamps batches this cheap: a plan from such a line would be meaningless.
      usage_error(cat("--calibrate: rank ", rank, "'s fit t(x) = ", strprintf("%.3g", m.a), " x + ",
                      strprintf("%.3g", m.b), " s (r^2 ", strprintf("%.2f", r_squared.back()),
                      ") is not a cost per sample and per batch; give --time-model-ab A,B"));
    }
  }
  return models;
}

// The start table's rows of the plan (print_start_table's format).
void TrainingRun::print_dbsl_rows() const {
  auto row = [](const char* key, const std::string& value) {
    log::info(strprintf("  %-10s %s", key, value.c_str()));
  };
  row("dbsl", cat("B_L ", options_.dbsl.base_batch, ", k ", options_.dbsl.extra_time, ", ",
                  options_.dbsl.small_workers, " small, update factor ",
                  options_.dbsl.update_factor, options_.dbsl.sync ? ", --sync" : ", async",
                  "; predicted round ", short_duration(dbsl_plan_.target_time)));
  for (std::size_t w = 0; w < dbsl_plan_.workers.size(); ++w) {
    const auto& p = dbsl_plan_.workers[w];
    row(w == 0 ? "plan" : "",
        cat("rank ", w + 1, p.small ? " small" : " large", ": ", p.samples, " samples at batch ",
            p.batch, ", f ", strprintf("%.4g", dbsl_factors_[w]), ", ",
            short_duration(p.predicted_time)));
  }
}

class TrainingRun::DbslWorkerPolicy final : public WorkerPolicy {
 public:
  explicit DbslWorkerPolicy(TrainingRun& run)
      : run_(run),
        worker_(run.world_, run.net_->parameter_count(), run.net_->state_count()),
        mine_(run.dbsl_plan_.workers[static_cast<std::size_t>(run.role_.worker)]) {}

  // The model travels through host views: the buffers themselves on the CPU, counted copies on
  // a device.
  bool receive(std::int64_t /*rounds*/) override {
    nn::HostView parameters = run_.net_->host_parameters();
    nn::HostView state = run_.net_->host_state();
    const bool go = worker_.pull(parameters.values(), state.values(), pulled_);
    parameters.write_back();
    state.write_back();
    return go;
  }

  WorkerReport round(std::int64_t /*rounds*/) override {
    nn::Network& net = *run_.net_;
    // A fresh optimizer each round, as the original compiles its model every round.
    if (!optimizer_ || !run_.options_.dbsl.keep_optimizer_state) {
      optimizer_ =
          optim::make_optimizer(run_.optimizer_config_, net.parameter_count(), net.backend());
    }
    // The round's permutation: a function of the seed, the push count and the worker.
    run_.train_loader_->seek(pulled_.step * run_.role_.workers + run_.role_.worker, 0);
    run_.round_->set_previous_exchange(0, worker_.last_wait());
    WorkerReport report = run_.round_->run_samples(pulled_.step, mine_.samples, [&] {
      optimizer_->step(net.parameter_buffer(), net.gradient_buffer(), pulled_.lr);
    });
    report.based_on = pulled_.step;
    return report;
  }

  void send(const WorkerReport& report) override {
    worker_.push(run_.net_->host_parameters().values(), run_.net_->host_state().values(), report);
  }

  int finish() override { return pulled_.stop; }

 private:
  TrainingRun& run_;
  DbslWorker worker_;
  const DbslWorkerPlan& mine_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  DbslRound pulled_;  // the round the last pull started (or the stop it brought)
};

std::unique_ptr<WorkerPolicy> TrainingRun::make_dbsl_worker() {
  return std::make_unique<DbslWorkerPolicy>(*this);
}

namespace {

// The server's work on the virtual clock: CPU seconds, free under a compute model.
template <class F>
double timed_merge(bool timed, const RunClock& clock, F&& merge) {
  const double start = timed ? clock.cpu_now() : 0;
  merge();
  return timed ? clock.cpu_now() - start : 0;
}

}  // namespace

// DBSL's parameter server: it merges the workers' models (pushes) into its own and replies to
// each with the merged model. The workers' side of the exchange is a rank per worker
// (DbslServer) or the workers emulated in this process (EmulatedDbslServer). A push is a step;
// the subclasses differ in what an update takes: a push as it comes, or (--sync) one of each.
class TrainingRun::DbslServerPolicy : public ServerPolicy {
 public:
  explicit DbslServerPolicy(TrainingRun& run)
      : run_(run),
        parameters_(run.net_->parameter_count()),
        timed_(run.clock_.is_virtual() && run.compute_models_.empty()) {
    if (run.emulated_) {
      server_ = std::make_unique<EmulatedDbslServer>(EmulatedDbslServer::Parts{
          *run.emulated_, *run.net_, run.optimizer_config_, run.dbsl_plan_,
          run.options_.dbsl.keep_optimizer_state, run.options_.dbsl.sync,
          [&run] { return run.stop_request_.requested() ? kSignalled : kContinue; },
          [&run](std::int64_t round, const WorkerReport& report) {
            run.worker_line(round, report);
          },
          [&run](std::vector<double> hosted, std::size_t per_worker) {
            return run.gather_shares(std::move(hosted), per_worker);
          },
          run.role_.shares ? &run.world_ : nullptr, rounds_ahead_bound()});
    } else {
      server_ = std::make_unique<DbslServer>(run.world_, parameters_, run.net_->state_count());
    }
    if (run.clock_.is_virtual()) {
      server_->use_virtual_clock(
          run.comm_model_.message((parameters_ + run.net_->state_count()) * 4),
          run.clock_.virtual_now());
    }
  }

  int start(std::int64_t step, int stop) override {
    if (stop != kContinue) return stop;  // finish() tells the workers
    server_->start(run_.net_->host_parameters().values(), run_.net_->host_state().values(),
                   round_at(step));
    return stop;
  }

  double virtual_now() const override { return server_->virtual_now(); }

  // Every worker whose push the update took gets the merged model.
  void publish(std::int64_t step) override {
    const DbslRound next = round_at(step);
    const nn::HostView merged = run_.net_->host_parameters();
    const nn::HostView state = run_.net_->host_state();
    for (const auto& r : taken_) server_->reply(r.rank, merged.values(), state.values(), next);
  }

  int finish(std::int64_t step, int stop) override {
    server_->finish(step, stop);
    if (server_->discarded() > 0) {
      log::verbose(cat(server_->discarded(), " pushes arrived after the end and were not merged"));
    }
    return stop;
  }

 protected:
  DbslRound round_at(std::int64_t step) const {
    return DbslRound{step, run_.schedule_->at(step, run_.epoch_at(step)), kContinue};
  }

  // The pushes taken as a step: a push each, recorded with the learning rate its round trained
  // at (the one of the step its worker pulled).
  ServerUpdate taken(std::vector<WorkerReport> reports) {
    taken_ = std::move(reports);
    ServerUpdate update;
    for (const auto& r : taken_) {
      update.combined.samples += r.samples;
      update.combined.loss_sum += r.loss_sum;
      update.combined.correct += r.correct;
      update.combined.stop = std::max(update.combined.stop, r.stop);
      update.combined.workers.push_back(r);
    }
    const std::int64_t based_on = taken_.front().based_on;
    update.lr = run_.schedule_->at(based_on, run_.epoch_at(based_on));
    update.steps = static_cast<std::int64_t>(taken_.size());
    return update;
  }

  // Merges into the server's model through host views, timed on the virtual clock.
  template <class F>
  void merge(F&& into) {
    server_->advance(timed_merge(timed_, run_.clock_, [&] {
      nn::HostView merged = run_.net_->host_parameters();
      nn::HostView state = run_.net_->host_state();
      into(merged.values(), state.values());
      merged.write_back();
      state.write_back();
    }));
  }

  TrainingRun& run_;
  const std::size_t parameters_;
  const bool timed_;
  std::unique_ptr<DbslCombiner> server_;
  std::vector<WorkerReport> taken_;
};

// A push merged as it comes (algorithms.md §3): x <- x + f (pushed - x).
class TrainingRun::DbslPushServer final : public DbslServerPolicy {
 public:
  using DbslServerPolicy::DbslServerPolicy;

  ServerUpdate collect(std::int64_t step) override {
    model_.resize(parameters_ + run_.net_->state_count());
    return taken({server_->next_push(model_, step)});
  }

  void update(ServerUpdate& /*update*/) override {
    const double f = run_.dbsl_factors_[static_cast<std::size_t>(taken_.front().rank - 1)];
    merge([&](std::span<float> parameters, std::span<float> state) {
      merge_push(parameters, std::span(model_).first(parameters_), f);
      merge_push(state, std::span(model_).subspan(parameters_), f);
    });
  }

 private:
  std::vector<float> model_;
};

// --sync: a round of every worker's push merged at once. Each push is added into merge_sync's
// sums (in double) as it is taken, in worker order, so no pushed model is kept: thousands of
// emulated workers cost a model's sums, not a model each.
class TrainingRun::DbslRoundServer final : public DbslServerPolicy {
 public:
  using DbslServerPolicy::DbslServerPolicy;

  ServerUpdate collect(std::int64_t step) override {
    sums_.assign(parameters_ + run_.net_->state_count() + 1, 0.0);  // then the merge's seconds
    return taken(
        server_->all_pushes([&](int w, std::span<const float> model) { add(w, model); }, step));
  }

  void update(ServerUpdate& /*update*/) override {
    if (run_.role_.shares) {
      merge_shares();
      return;
    }
    server_->advance(sums_.back());  // the additions are the merge's work too
    const auto sums = std::span<const double>(sums_).first(sums_.size() - 1);
    merge([&](std::span<float> parameters, std::span<float> state) {
      divide_weighted(parameters, sums.first(parameters_), run_.dbsl_factors_);
      divide_weighted(state, sums.subspan(parameters_), run_.dbsl_factors_);
    });
  }

 private:
  static constexpr int kMergeTag = 19;  // beside training_run_async.cpp's tags

  // Worker w's push into the sums: f_w w, timed. Ranks hosting shares of the emulated workers
  // pass the sums from rank to rank: rank r takes them from rank r - 1 before adding its first
  // hosted worker's push and hands them on after its last's (the one process's additions, in
  // its order: its bits). So a rank's rounds after its first wait for the ranks before it.
  void add(int w, std::span<const float> model) {
    const comm::World& world = run_.world_;
    const int rank = world.rank(), last = world.size() - 1;
    const EmulatedWorkers* hosted = run_.role_.shares ? run_.emulated_.get() : nullptr;
    const std::size_t bytes = sums_.size() * sizeof(double);
    if (hosted && rank > 0 && w == hosted->first()) {
      comm::Request received = world.irecv(sums_.data(), bytes, rank - 1, kMergeTag);
      world.wait(received, cat("the DBSL merge's sums of ranks 0-", rank - 1));
    }
    const auto sums = std::span(sums_).first(sums_.size() - 1);
    sums_.back() += timed_merge(timed_, run_.clock_, [&] {
      add_weighted(sums, model, run_.dbsl_factors_[static_cast<std::size_t>(w)]);
    });
    if (hosted && rank < last && w == hosted->first() + hosted->hosted() - 1) {
      comm::Request sent = world.isend(sums_.data(), bytes, rank + 1, kMergeTag);
      world.wait(sent, cat("sending the DBSL merge's sums to rank ", rank + 1));
    }
  }

  // Shares: the last rank divides the sums and broadcasts the merged model. The server's merge
  // time is the ranks' parts added up (CPU seconds without a compute model).
  void merge_shares() {
    const comm::World& world = run_.world_;
    const int last = world.size() - 1;
    const std::size_t floats = sums_.size() - 1;
    merged_.resize(floats);
    if (world.rank() == last) {
      sums_.back() += timed_merge(timed_, run_.clock_, [&] {
        divide_weighted(merged_, std::span(sums_).first(floats), run_.dbsl_factors_);
      });
    }
    world.broadcast(merged_, last);
    double seconds = sums_.back();
    world.broadcast(std::span(reinterpret_cast<std::uint8_t*>(&seconds), sizeof seconds), last);
    nn::HostView parameters = run_.net_->host_parameters();
    nn::HostView state = run_.net_->host_state();
    std::copy_n(merged_.begin(), parameters_, parameters.values().begin());
    std::copy(merged_.begin() + static_cast<std::ptrdiff_t>(parameters_), merged_.end(),
              state.values().begin());
    parameters.write_back();
    state.write_back();
    server_->advance(seconds);
  }

  std::vector<double> sums_;   ///< merge_sync's sums of the round's pushes so far, then seconds
  std::vector<float> merged_;  ///< shares: the merged model, from the last rank
};

std::unique_ptr<ServerPolicy> TrainingRun::make_dbsl_server() {
  if (options_.dbsl.sync) return std::make_unique<DbslRoundServer>(*this);
  return std::make_unique<DbslPushServer>(*this);
}

}  // namespace mbkit::train
