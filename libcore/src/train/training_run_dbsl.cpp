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

void TrainingRun::run_dbsl_worker() {
  DbslWorker worker(world_, net_->parameter_count(), net_->state_count());
  const DbslWorkerPlan& mine = dbsl_plan_.workers[static_cast<std::size_t>(role_.worker)];
  std::unique_ptr<optim::Optimizer> optimizer;
  DbslRound round;
  std::int64_t rounds = 0;
  // The model travels through host views: the buffers themselves on the CPU, counted copies on
  // a device.
  const auto pull = [&] {
    nn::HostView parameters = net_->host_parameters();
    nn::HostView state = net_->host_state();
    const bool go = worker.pull(parameters.values(), state.values(), round);
    parameters.write_back();
    state.write_back();
    return go;
  };
  while (pull()) {
    // A fresh optimizer each round, as the original compiles its model every round.
    if (!optimizer || !options_.dbsl.keep_optimizer_state) {
      optimizer =
          optim::make_optimizer(optimizer_config_, net_->parameter_count(), net_->backend());
    }
    // The round's permutation: a function of the seed, the push count and the worker.
    train_loader_->seek(round.step * role_.workers + role_.worker, 0);
    round_->set_previous_exchange(0, worker.last_wait());
    auto report = round_->run_samples(round.step, mine.samples, [&] {
      optimizer->step(net_->parameter_buffer(), net_->gradient_buffer(), round.lr);
    });
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    report.based_on = round.step;
    worker.push(net_->host_parameters().values(), net_->host_state().values(), report);
    worker_line(++rounds, report);
  }
  stop_ = round.stop;
}

void TrainingRun::record_pushes(const std::vector<WorkerReport>& reports, double step_time) {
  CombinedStep combined;
  for (const auto& r : reports) {
    combined.samples += r.samples;
    combined.loss_sum += r.loss_sum;
    combined.correct += r.correct;
    combined.workers.push_back(r);
  }
  // The learning rate the round trained at: the one of the step its worker pulled.
  const std::int64_t based_on = reports.front().based_on;
  record_step(combined, step_time, schedule_->at(based_on, epoch_at(based_on)));
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

// The workers' side of the exchange: a rank per worker, or the workers emulated in this process.
std::unique_ptr<DbslCombiner> TrainingRun::make_dbsl_server() {
  if (emulated_) {
    return std::make_unique<EmulatedDbslServer>(EmulatedDbslServer::Parts{
        *emulated_, *net_, optimizer_config_, dbsl_plan_, options_.dbsl.keep_optimizer_state,
        options_.dbsl.sync, [this] { return stop_request_.requested() ? kSignalled : kContinue; },
        [this](std::int64_t round, const WorkerReport& report) { worker_line(round, report); }});
  }
  return std::make_unique<DbslServer>(world_, net_->parameter_count(), net_->state_count());
}

void TrainingRun::run_dbsl_server() {
  const std::size_t parameters = net_->parameter_count();
  const std::unique_ptr<DbslCombiner> combiner = make_dbsl_server();
  DbslCombiner& server = *combiner;
  if (clock_.is_virtual()) {
    server.use_virtual_clock(comm_model_.message((parameters + net_->state_count()) * 4),
                             clock_.virtual_now());
  }
  auto round_at = [&](std::int64_t step) {
    return DbslRound{step, schedule_->at(step, epoch_at(step)), kContinue};
  };
  stop_ = std::max(stop_, rank0_stop());
  if (stop_ == kContinue) {
    server.start(net_->host_parameters().values(), net_->host_state().values(), round_at(step_));
  }
  std::vector<float> model(parameters + net_->state_count());
  const bool timed = clock_.is_virtual() && compute_models_.empty();
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double virtual_start = server.virtual_now();
    const WorkerReport report = server.next_push(model, step_);
    const double f = dbsl_factors_[static_cast<std::size_t>(report.rank - 1)];
    const int decision = accept_update(
        report.loss_sum / static_cast<double>(std::max<std::int64_t>(report.samples, 1)));
    if (decision == kContinue) {
      server.advance(timed_merge(timed, clock_, [&] {
        nn::HostView merged = net_->host_parameters();
        nn::HostView state = net_->host_state();
        merge_push(merged.values(), std::span(model).first(parameters), f);
        merge_push(state.values(), std::span(model).subspan(parameters), f);
        merged.write_back();
        state.write_back();
      }));
    }
    ++step_;
    samples_seen_ += static_cast<double>(report.samples);
    if (clock_.is_virtual()) clock_.set_virtual_now(server.virtual_now());
    record_pushes({report}, clock_.is_virtual() ? server.virtual_now() - virtual_start
                                                : seconds_since(step_start));
    stop_ = std::max(report.stop, rank0_stop());
    if (decision == kDiverged) stop_ = kDiverged;
    if (step_ >= planned_) stop_ = std::max(stop_, static_cast<int>(kFinished));
    if (stop_ == kContinue) {
      server.reply(report.rank, net_->host_parameters().values(), net_->host_state().values(),
                   round_at(step_));
    }
    if (stop_ != kDiverged) after_step(clock_.now());
  }
  server.finish(step_, stop_);
  if (server.discarded() > 0) {
    log::verbose(cat(server.discarded(), " pushes arrived after the end and were not merged"));
  }
}

void TrainingRun::run_dbsl_sync_server() {
  const std::size_t parameters = net_->parameter_count();
  const std::unique_ptr<DbslCombiner> combiner = make_dbsl_server();
  DbslCombiner& server = *combiner;
  if (clock_.is_virtual()) {
    server.use_virtual_clock(comm_model_.message((parameters + net_->state_count()) * 4),
                             clock_.virtual_now());
  }
  const DbslRound first{step_, schedule_->at(step_, epoch_at(step_)), kContinue};
  stop_ = std::max(stop_, rank0_stop());
  if (stop_ == kContinue) {
    server.start(net_->host_parameters().values(), net_->host_state().values(), first);
  }
  std::vector<std::vector<float>> models;
  const bool timed = clock_.is_virtual() && compute_models_.empty();
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double virtual_start = server.virtual_now();
    const auto reports = server.all_pushes(models, step_);
    double loss = 0;
    std::int64_t samples = 0;
    int stop = kContinue;
    for (const auto& r : reports) {
      loss += r.loss_sum;
      samples += r.samples;
      stop = std::max(stop, r.stop);
    }
    const int decision =
        accept_update(loss / static_cast<double>(std::max<std::int64_t>(samples, 1)));
    if (decision == kContinue) {
      server.advance(timed_merge(timed, clock_, [&] {
        std::vector<std::span<const float>> params, states;
        for (const auto& m : models) {
          params.push_back(std::span<const float>(m).first(parameters));
          states.push_back(std::span<const float>(m).subspan(parameters));
        }
        nn::HostView merged = net_->host_parameters();
        nn::HostView state = net_->host_state();
        merge_sync(merged.values(), params, dbsl_factors_);
        merge_sync(state.values(), states, dbsl_factors_);
        merged.write_back();
        state.write_back();
      }));
    }
    // Every worker's push counts: a round of all of them is `workers` steps.
    step_ += static_cast<std::int64_t>(reports.size());
    samples_seen_ += static_cast<double>(samples);
    if (clock_.is_virtual()) clock_.set_virtual_now(server.virtual_now());
    record_pushes(reports, clock_.is_virtual() ? server.virtual_now() - virtual_start
                                               : seconds_since(step_start));
    stop_ = std::max(stop, rank0_stop());
    if (decision == kDiverged) stop_ = kDiverged;
    if (step_ >= planned_) stop_ = std::max(stop_, static_cast<int>(kFinished));
    if (stop_ == kContinue) {
      const DbslRound next{step_, schedule_->at(step_, epoch_at(step_)), kContinue};
      const nn::HostView merged = net_->host_parameters();
      const nn::HostView state = net_->host_state();
      for (const auto& r : reports) server.reply(r.rank, merged.values(), state.values(), next);
    }
    if (stop_ != kDiverged) after_step(clock_.now());
  }
  server.finish(step_, stop_);
}

}  // namespace mbkit::train
