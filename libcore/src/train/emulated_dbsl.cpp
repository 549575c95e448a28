#include "mbkit/train/emulated_dbsl.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>

#include "mbkit/train/roles.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

EmulatedDbslServer::EmulatedDbslServer(Parts parts)
    : parts_(std::move(parts)),
      workers_(static_cast<std::size_t>(parts_.workers.workers())),
      ahead_(parts_.ahead_bytes) {}

void EmulatedDbslServer::use_virtual_clock(double message, double now) {
  clock_.emplace(parts_.workers.workers(), message, now);
}

void EmulatedDbslServer::advance(double seconds) {
  if (clock_) clock_->advance(seconds);
}

void EmulatedDbslServer::start(std::span<const float> parameters, std::span<const float> state,
                               const DbslRound& round) {
  MBKIT_CHECK(clock_.has_value(), "emulated DBSL server without the virtual clock");
  for (int w = 0; w < parts_.workers.workers(); ++w) {
    reply(parts_.workers.rank_of(w), parameters, state, round);
  }
}

void EmulatedDbslServer::reply(int rank, std::span<const float> parameters,
                               std::span<const float> state, const DbslRound& round) {
  const int w = rank - parts_.workers.rank_of(0);
  Worker& worker = workers_.at(static_cast<std::size_t>(w));
  worker.in_flight = true;
  if (!parts_.workers.hosts(w)) {  // another rank's: its round starts a message later
    clock_->replied(w);
    if (!parts_.sync) arrived(w, std::nullopt);  // the ready time its host predicted
    return;
  }
  // The start and --sync reply to every worker with one model: they share it.
  const auto same = [&](const Model& model) {
    return model.size() == parameters.size() + state.size() &&
           std::equal(parameters.begin(), parameters.end(), model.begin()) &&
           std::equal(state.begin(), state.end(), model.begin() + std::ssize(parameters));
  };
  if (!last_reply_ || !same(*last_reply_)) {
    auto model = std::make_shared<Model>(parameters.begin(), parameters.end());
    model->insert(model->end(), state.begin(), state.end());
    last_reply_ = std::move(model);
  }
  worker.pulled = last_reply_;
  worker.round = round;
  clock_->replied(w);
  // The round's permutation, as the DBSL worker policy seeks it after its pull.
  parts_.workers.loader(w).seek(round.step * parts_.workers.workers() + w, 0);
  if (parts_.sync) return;  // all_pushes runs every round at once
  const std::int64_t samples = parts_.plan.workers[static_cast<std::size_t>(w)].samples;
  worker.ready = parts_.workers.round(w).predict_samples_ready(samples);
  arrived(w, worker.ready);
  // Under mpirun its host may compute it from now on (its model is known).
  if (parts_.shares != nullptr && worker.ready) ahead_.started(w, clock_->now() + *worker.ready);
}

void EmulatedDbslServer::arrived(int w, std::optional<double> predicted) {
  double ready = predicted.value_or(std::numeric_limits<double>::quiet_NaN());
  ready_from_host(w, ready);
  if (std::isnan(ready)) {
    usage_error(cat("--emulate ", parts_.workers.workers(), ": worker ", w, " (rank ",
                    parts_.workers.rank_of(w),
                    ") has no --compute-model: the asynchronous DBSL server takes pushes in the "
                    "order they arrive, which must be known before they are computed"));
  }
  clock_->arrived(w, ready);
}

void EmulatedDbslServer::ready_from_host(int w, double& ready) {
  if (parts_.shares == nullptr) return;
  broadcast_ready_time_computing_ahead(
      *parts_.shares, emulated_host(parts_.workers.workers(), parts_.shares->size(), w), ready,
      [&] { return compute_ahead(); });
}

WorkerReport EmulatedDbslServer::run_round(int w, std::span<float> model, std::int64_t step) {
  return taken(w, compute_round(w, model), step);
}

WorkerReport EmulatedDbslServer::taken(int w, WorkerReport report, std::int64_t step) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  report.stop = parts_.stop_of();
  ++worker.rounds;
  if (parts_.worker_line) parts_.worker_line(worker.rounds, report);
  return report.as_carried(parts_.workers.rank_of(w), step);
}

WorkerReport EmulatedDbslServer::compute_round(int w, std::span<float> model) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  MBKIT_CHECK(worker.pulled != nullptr, "emulated DBSL worker ", w, " has no model to train");
  nn::Network& net = parts_.net;
  const std::size_t parameter_floats = net.parameter_count();
  // The server's model waits aside while the worker's round uses the network.
  server_.assign(net.parameters().begin(), net.parameters().end());
  server_.insert(server_.end(), net.state().begin(), net.state().end());
  const Model& pulled = *worker.pulled;
  std::copy(pulled.begin(), pulled.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            net.parameters().begin());
  std::copy(pulled.begin() + static_cast<std::ptrdiff_t>(parameter_floats), pulled.end(),
            net.state().begin());
  worker.pulled.reset();
  if (last_reply_.use_count() == 1) last_reply_.reset();  // no worker holds it any more
  // As the DBSL worker policy: a fresh optimizer each round unless it keeps its state.
  if (!worker.optimizer || !parts_.keep_optimizer_state) {
    worker.optimizer = optim::make_optimizer(parts_.optimizer, parameter_floats, net.backend());
  }
  WorkerRound& round = parts_.workers.round(w);
  round.set_previous_exchange(0, 0);
  const double lr = worker.round.lr;
  WorkerReport report = round.run_samples(
      worker.round.step, parts_.plan.workers[static_cast<std::size_t>(w)].samples,
      [&] { worker.optimizer->step(net.parameter_buffer(), net.gradient_buffer(), lr); });
  if (!parts_.keep_optimizer_state) worker.optimizer.reset();
  if (worker.ready) {
    MBKIT_CHECK(report.sleep_time + report.compute_time == *worker.ready, "worker ", w,
                "'s DBSL round was ready at ", report.sleep_time + report.compute_time,
                " s, predicted ", *worker.ready, " s");
    worker.ready.reset();
  }
  report.based_on = worker.round.step;
  // The push: the worker's model, and the server's back in the network.
  std::copy(net.parameters().begin(), net.parameters().end(), model.begin());
  std::copy(net.state().begin(), net.state().end(),
            model.begin() + static_cast<std::ptrdiff_t>(parameter_floats));
  std::copy(server_.begin(), server_.begin() + static_cast<std::ptrdiff_t>(parameter_floats),
            net.parameters().begin());
  std::copy(server_.begin() + static_cast<std::ptrdiff_t>(parameter_floats), server_.end(),
            net.state().begin());
  return report;
}

bool EmulatedDbslServer::compute_ahead() {
  const std::size_t floats = parts_.net.parameter_count() + parts_.net.state_count();
  const auto w = ahead_.next(floats * sizeof(float) + sizeof(Ahead));
  if (!w) return false;
  std::unique_ptr<Ahead> ahead;
  if (spare_ahead_.empty()) {
    ahead = std::make_unique<Ahead>();
    ahead->model.resize(floats);
  } else {  // its model is overwritten whole
    ahead = std::move(spare_ahead_.back());
    spare_ahead_.pop_back();
  }
  ahead->report = compute_round(*w, ahead->model);
  workers_[static_cast<std::size_t>(*w)].ahead = std::move(ahead);
  return true;
}

WorkerReport EmulatedDbslServer::next_push(std::span<float> model, std::int64_t step) {
  const auto next = clock_->next();
  MBKIT_CHECK(next.has_value(), "no emulated DBSL worker is computing");
  const int w = *next;
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  WorkerReport report;
  const bool was_ahead = worker.ahead != nullptr;
  if (was_ahead) {
    std::copy(worker.ahead->model.begin(), worker.ahead->model.end(), model.begin());
    report = taken(w, worker.ahead->report, step);
    if (spare_ahead_.size() < kSpareAheads) spare_ahead_.push_back(std::move(worker.ahead));
    worker.ahead.reset();
    ahead_.released(model.size_bytes() + sizeof(Ahead));
  } else if (parts_.workers.hosts(w)) {
    ahead_.drop(w);
    report = run_round(w, model, step);
  }
  worker.in_flight = false;
  // Under mpirun every rank merges the push its worker's host computed (computing its own
  // started rounds while it waits).
  if (parts_.shares != nullptr) {
    const comm::World& world = *parts_.shares;
    const int host = emulated_host(parts_.workers.workers(), world.size(), w);
    std::array<comm::Request, 2> pending{
        world.ibroadcast(
            std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&report), sizeof report), host),
        world.ibroadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(model.data()),
                                                 model.size_bytes()),
                         host)};
    wait_computing_ahead(
        world, pending, [&] { return compute_ahead(); }, "an emulated worker's push");
  }
  clock_->take(w, report);
  return report;
}

namespace {

// What a push carries of a report (WorkerReport::as_carried, DbslServer's PushHeader), as
// doubles: exact, as the push's header.
constexpr std::size_t kCarried = 10;
// What a share's rank keeps of pushes computed ahead of the sums it waits for (all_pushes).
constexpr std::size_t kPushesAheadBytes = std::size_t{512} << 20;

void put_carried(const WorkerReport& r, std::vector<double>& out) {
  out.insert(out.end(), {static_cast<double>(r.samples), r.loss_sum, static_cast<double>(r.correct),
                         r.compute_time, r.sleep_time, r.send_time, r.wait_time,
                         static_cast<double>(r.based_on), static_cast<double>(r.stop),
                         static_cast<double>(r.micro_batches)});
}

WorkerReport get_carried(const double* at, int rank, std::int64_t step) {
  WorkerReport r;
  r.samples = static_cast<std::int64_t>(at[0]);
  r.loss_sum = at[1];
  r.correct = static_cast<std::int64_t>(at[2]);
  r.compute_time = at[3];
  r.sleep_time = at[4];
  r.send_time = at[5];
  r.wait_time = at[6];
  r.based_on = static_cast<std::int64_t>(at[7]);
  r.stop = static_cast<int>(at[8]);
  r.micro_batches = static_cast<std::int64_t>(at[9]);
  return r.as_carried(rank, step);
}

}  // namespace

std::vector<WorkerReport> EmulatedDbslServer::all_pushes(const PushTaker& take, std::int64_t step) {
  const EmulatedWorkers& hosted = parts_.workers;
  const int workers = hosted.workers();
  const std::size_t floats = parts_.net.parameter_count() + parts_.net.state_count();
  std::vector<WorkerReport> reports;
  // A share after the first: its first take waits for the sums of the ranks before it. Its
  // rounds are computed ahead meanwhile (within kPushesAheadBytes, a push kept each), so the
  // ranks compute at once; the takes still add in worker order (the one process's bits).
  const int ahead =
      hosted.first() == 0
          ? 0
          : static_cast<int>(std::min<std::size_t>(
                static_cast<std::size_t>(hosted.hosted()),
                kPushesAheadBytes / std::max<std::size_t>(1, floats * sizeof(float))));
  std::vector<std::vector<float>> kept(static_cast<std::size_t>(ahead));
  for (int i = 0; i < ahead; ++i) {
    kept[static_cast<std::size_t>(i)].resize(floats);
    reports.push_back(run_round(hosted.first() + i, kept[static_cast<std::size_t>(i)], step));
  }
  for (int i = 0; i < ahead; ++i) {
    take(hosted.first() + i, kept[static_cast<std::size_t>(i)]);
    std::vector<float>().swap(kept[static_cast<std::size_t>(i)]);  // freed as it is added
  }
  std::vector<float> model(floats);
  for (int w = hosted.first() + ahead; w < hosted.first() + hosted.hosted(); ++w) {
    reports.push_back(run_round(w, model, step));
    take(w, model);
  }
  for (Worker& worker : workers_) worker.in_flight = false;
  if (hosted.hosted() < workers) {  // a share: every rank's reports, in worker order
    std::vector<double> mine;
    for (const auto& r : reports) put_carried(r, mine);
    const std::vector<double> all = parts_.gather_shares(std::move(mine), kCarried);
    reports.clear();
    for (int w = 0; w < workers; ++w) {
      reports.push_back(get_carried(all.data() + static_cast<std::size_t>(w) * kCarried,
                                    hosted.rank_of(w), step));
    }
  }
  for (int w = 0; w < workers; ++w) {
    const auto& r = reports[static_cast<std::size_t>(w)];
    clock_->arrived(w, r.sleep_time + r.compute_time);
  }
  // Taken in worker order once all are in, as DbslServer::all_pushes takes them.
  for (int w = 0; w < workers; ++w) clock_->take(w, reports[static_cast<std::size_t>(w)]);
  return reports;
}

void EmulatedDbslServer::finish(std::int64_t, int) {
  // Every round still in flight would push after the end.
  for (Worker& worker : workers_) {
    if (worker.in_flight) ++discarded_;
    worker.in_flight = false;
    worker.pulled.reset();
    worker.optimizer.reset();
    worker.ahead.reset();
  }
  spare_ahead_.clear();
  last_reply_.reset();
}

}  // namespace mbkit::train
