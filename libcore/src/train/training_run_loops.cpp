// A training run's loops (training_run.hpp): synchronous steps (one process, ps, allreduce), the
// asynchronous master and workers, and the end of the run.
#include <algorithm>
#include <bit>
#include <csignal>
#include <limits>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/train/emulated_async.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/train/selecting_exchange.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

constexpr int kMaxConsecutiveSkips = 20;  // as training_run_records.cpp's nan policy

}  // namespace

int TrainingRun::train() {
  stop_ = step_ >= planned_ ? kFinished : kContinue;
  if (dbsl_) {
    if (!role_.master) {
      run_dbsl_worker();
    } else if (options_.dbsl.sync) {
      run_dbsl_sync_server();
    } else {
      run_dbsl_server();
    }
  } else if (!role_.async) {
    if (local_sgd(options_)) {
      run_local_sgd();
    } else {
      run_sync();
    }
  } else if (role_.server) {  // the master, or one of several servers
    run_async_master();
  } else {
    run_async_worker();
  }
  return finish();
}

void TrainingRun::run_sync() {
  // --emulate sums in process (under mpirun too: combine_shares adds the ranks' sums).
  SyncExchange exchange(
      world_, role_.parameter_server,
      role_.shared_memory && !emulated_ ? AllreduceVia::kSharedMemory : AllreduceVia::kMpi,
      std::max(1, role_.servers));
  if (nccl_) {
    exchange.set_device_allreduce(*nccl_, net_->gradient_buffer(), net_->parameter_count());
  }
  if (options_.bucket_mb > 0) {
    exchange.set_bucket_floats(std::max<std::size_t>(
        1, static_cast<std::size_t>(options_.bucket_mb * 1024.0 * 1024.0 / sizeof(float))));
  }
  exchange.set_compression(options_.compression);
  if (selection_.drops()) exchange.set_state_contributors(selection_.used_per_step());
  if (emulated_) exchange.set_in_process(role_.workers, role_.parameter_server);
  // A host-accessible backend's gradient buffer is what the exchange sums (zero-copy); a device
  // backend's gradients are copied to the host once per step (gradient_staging_), unless NCCL
  // sums them where they are.
  const bool in_place = net_->backend().host_accessible();
  if (exchange.buckets() && round_ && (in_place || nccl_)) {
    // The backward pass hands finished gradients to the exchange.
    round_->gradients_ready = [&](std::size_t from) {
      exchange.gradients_ready(in_place ? net_->gradients() : std::span<float>(), from);
      return exchange.progress_time();
    };
  }
  // The small per-step values ride in the gradients' message (one collective per step); with
  // shared memory, the backward pass writes the gradients into the shared window.
  std::span<float> tail;
  const std::size_t tail_floats = role_.distributed ? exchange.tail_floats(net_->state_count()) : 0;
  if (!in_place) {
    if (role_.distributed && !nccl_) {
      gradient_staging_.assign(net_->parameter_count() + tail_floats, 0.0f);
      tail = std::span(gradient_staging_).subspan(net_->parameter_count());
    }
  } else if (role_.distributed) {
    tail = net_->gradient_tail(tail_floats);
    if (exchange.shared_memory()) {
      net_->move_gradients_to(exchange.shared_buffer(net_->gradient_buffer().size()));
      tail = net_->gradient_tail(tail_floats);
    }
  }
  std::span<float> gradients = in_place ? net_->gradients()
                               : gradient_staging_.empty()
                                   ? std::span<float>()
                                   : std::span(gradient_staging_).first(net_->parameter_count());
  if (emulated_) {
    // The hosted workers' sum lives apart from the network's gradients, which each worker's
    // backward pass overwrites.
    emulated_sum_.assign(emulated_->sum_floats(net_->parameter_count(), net_->state_count()), 0);
    gradients = std::span(emulated_sum_).first(net_->parameter_count());
    tail = std::span(emulated_sum_).subspan(net_->parameter_count());
  }
  stop_ = first_verdict(exchange);
  if (round_) round_->set_previous_exchange(0, 0, exchange.last_recv_time());
  if (selects_on_wall_clock()) {  // after the start's verdict, in step no more
    SelectingExchange selecting(world_, selection_, net_->parameter_count(), net_->state_count());
    if (role_.master) {
      run_selecting_master(selecting);
    } else {
      run_selecting_worker(selecting);
    }
    return;
  }
  if (delays_on_wall_clock()) return run_delayed();  // AMB-DG (training_run_delayed.cpp)
  while (stop_ == kContinue) {
    stop_ = sync_step(exchange, gradients, tail);
    if (stop_ == kDiverged) break;
    after_step(clock_.now());
  }
  if (round_) round_->gradients_ready = nullptr;
}

double TrainingRun::arrival_of(int worker, double ready) const {
  // Its gradient's message to the master (per pair of ranks in a per-pair model).
  return ready + comm_model_.message(gradient_bytes_, worker_rank(worker, role_.servers), 0);
}

std::vector<double> TrainingRun::gather_arrivals(const WorkerReport& report) const {
  // Every rank's round time (the master's: none), as rank 0 will also read it in the reports.
  const double mine = role_.computes ? report.sleep_time + report.compute_time : 0.0;
  const std::vector<std::uint64_t> all = world_.all_gather(std::bit_cast<std::uint64_t>(mine));
  std::vector<double> arrivals(static_cast<std::size_t>(role_.workers));
  for (int w = 0; w < role_.workers; ++w) {
    const double ready =
        std::bit_cast<double>(all[static_cast<std::size_t>(worker_rank(w, role_.servers))]);
    arrivals[static_cast<std::size_t>(w)] = arrival_of(w, ready);
  }
  return arrivals;
}

int TrainingRun::first_verdict(SyncExchange& exchange) {
  int stop = stop_;
  if (role_.parameter_server && !role_.shares) {
    // The master's verdict before the first step (the run may be complete already).
    return distribute(exchange, logs_ ? std::max(stop, rank0_stop()) : 0);
  }
  if (logs_) stop = std::max(stop, rank0_stop());
  if (role_.distributed) {
    std::int64_t verdict = stop;
    world_.broadcast(
        std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&verdict), sizeof verdict), 0);
    stop = static_cast<int>(verdict);
  }
  return stop;
}

int TrainingRun::distribute(SyncExchange& exchange, int stop) {
  nn::HostView parameters = net_->host_parameters();
  nn::HostView state = net_->host_state();
  const int verdict = exchange.distribute(parameters.values(), state.values(), stop, step_);
  parameters.write_back();
  state.write_back();
  return verdict;
}

int TrainingRun::sync_step(SyncExchange& exchange, std::span<float> gradients,
                           std::span<float> tail) {
  nn::Backend& backend = net_->backend();
  const bool staged = !backend.host_accessible();
  const auto step_start = SteadyClock::now();
  const double lr = schedule_->at(step_, epoch_at(step_));
  // 0: the batch's size. A step that drops gradients averages the used ones' samples.
  // K-batch-sync: K batches.
  const std::int64_t nominal =
      options_.k_batch_sync > 0 ? k_batch_samples()
      : !role_.distributed      ? 0
      : selection_.drops()      ? global_batch_ * selection_.used_per_step() / selection_.workers()
                                : global_batch_;
  begin_delayed_round();  // AMB-DG: the round computes at its delayed version
  WorkerReport report;
  std::vector<WorkerReport> hosted;  // --emulate: every worker's
  std::vector<bool> used;            // by worker: whose gradient the step takes (all: empty)
  if (options_.k_batch_sync > 0) {
    // The workers with no batch by the step's end send zeros; the state is the others' mean.
    const KBatchStep plan = plan_k_batches();
    int computing = 0;
    for (const int batches : plan.batches) {
      used.push_back(batches > 0);
      computing += batches > 0 ? 1 : 0;
    }
    exchange.set_state_contributors(computing);
  }
  if (emulated_ && selection_.drops()) used = selection_.select(emulated_arrivals());
  if (emulated_) {
    // The stop codes a rank per worker would send: a signal on every one, rank 0's verdict
    // on worker 0 of allreduce, and the planned end.
    const int signalled = stop_request_.requested() ? kSignalled : kContinue;
    const int rank0 = !role_.parameter_server && step_ + 1 < planned_ ? rank0_stop() : kContinue;
    const int end = !role_.parameter_server && step_ + 1 >= planned_ ? kFinished : kContinue;
    hosted = emulated_->run_step(
        step_, 1.0 / static_cast<double>(nominal), emulated_sum_,
        [&](int w) {
          return std::max({signalled, end, w == 0 ? rank0 : 0});
        },
        used);
    if (role_.shares) combine_shares(emulated_sum_);
  } else if (role_.computes) {
    report = round_->run(step_, nominal > 0 ? 1.0 / static_cast<double>(nominal) : 0.0);
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    if (!role_.parameter_server && logs_ && step_ + 1 < planned_) {
      report.stop = std::max(report.stop, rank0_stop());
    }
    if (!role_.parameter_server && step_ + 1 >= planned_) {
      report.stop = std::max(report.stop, static_cast<int>(kFinished));
    }
  }
  end_delayed_round();
  if (!emulated_ && selection_.drops()) used = selection_.select(gather_arrivals(report));
  const std::int64_t step_nominal = nominal > 0 ? nominal : (round_ ? round_->last_drawn() : 0);
  // A device backend's gradients go to the host only to be exchanged through MPI: alone, or
  // summed by NCCL, a rank copies them only when finish_gradient rescales them.
  const bool exchanged = staged && role_.distributed && !exchange.device_allreduce();
  if (exchanged && role_.computes) backend.copy_to_host(net_->gradient_buffer(), 0, gradients);
  nn::HostView state = net_->host_state();
  // A dropped worker sends zeros (a CPU run: `gradients` are the network's).
  if (!emulated_ && role_.computes && !used.empty() &&
      !used[static_cast<std::size_t>(role_.worker)]) {
    drop_contribution(report, gradients, state.values());
  }
  auto combined = exchange.combine(staged && !exchanged ? std::span<float>() : gradients,
                                   state.values(), report, step_, step_nominal, tail);
  state.write_back();
  if (staged && !exchanged && gradient_rescaled(step_nominal, combined.samples)) {
    nn::HostView rescaled = net_->host_gradients();
    finish_gradient(rescaled.values(), step_nominal, combined.samples);
    rescaled.write_back();
  }
  for (std::size_t w = 0; w < used.size() && w < combined.workers.size(); ++w) {
    combined.workers[w].dropped = !used[w];
  }
  const std::int64_t version = versions_ ? versions_->version_for(step_) : step_;
  for (WorkerReport& r : combined.workers) r.staleness = step_ - version;
  if (role_.computes) worker_line(step_ + 1, report);
  for (const WorkerReport& r : hosted) worker_line(step_ + 1, r);
  // The hosted workers' summed gradients are what the optimizer steps with.
  if (emulated_) std::copy(gradients.begin(), gradients.end(), net_->gradients().begin());
  int verdict = combined.stop;
  double update_time = 0;  // virtual clock: CPU seconds of the update (free with a model)
  if (!role_.parameter_server || role_.server) {
    const int decision = accept_update(combined.mean_loss());
    if (decision == kContinue) {
      const bool timed = clock_.is_virtual() && compute_models_.empty();
      WorkTimer update_timer(clock_, backend);
      const auto update_start = SteadyClock::now();
      if (exchanged) {  // the combined gradients of the part this rank updates
        backend.copy_from_host(gradients.subspan(shard_.first, optimizer_->size()),
                               net_->gradient_buffer(), shard_.first);
      }
      optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), lr, shard_.first);
      const double measured = update_timer.seconds();  // a GPU's update ends with its kernel
      if (timed) update_time = measured;
      if (role_.parameter_server) exchange.set_update_time(seconds_since(update_start));
    } else if (decision == kDiverged) {
      verdict = kDiverged;
    }
  }
  ++step_;
  samples_seen_ += static_cast<double>(combined.samples);
  if (role_.master) {
    verdict = std::max(verdict, rank0_stop());
    if (step_ >= planned_) verdict = std::max(verdict, static_cast<int>(kFinished));
  }
  if (role_.parameter_server) verdict = distribute(exchange, verdict);
  if (role_.shares) verdict = share_verdict(verdict, update_time);
  if (round_) {
    round_->set_previous_exchange(exchange.last_send_time(), exchange.last_wait_time(),
                                  exchange.last_recv_time());
  }
  double step_time = seconds_since(step_start);
  if (clock_.is_virtual() && (logs_ || role_.shares)) {
    // The emulated step: the slowest worker, the exchange, the update (virtual_clock.hpp).
    std::vector<SyncWorkerTime> times;
    for (const auto& r : combined.workers) {
      times.push_back({r.sleep_time, r.compute_time, !r.dropped});
    }
    const auto timing = delayed_timeline_
                            ? delayed_timeline_->step(step_ - 1, version, times, update_time)
                            : sync_step_time(times, role_.parameter_server, comm_model_,
                                             gradient_bytes_, update_time, role_.servers);
    // The round's receive: ps's broadcast of the parameters (allreduce has none of its own).
    for (std::size_t i = 0; i < combined.workers.size(); ++i) {
      combined.workers[i].send_time = timing.sends[i];
      combined.workers[i].wait_time = timing.wait[i];
      combined.workers[i].recv_time = timing.receives[i];
      combined.workers[i].exit_time = 0;
    }
    combined.wait_time = timing.gather;
    step_time = timing.end;
    clock_.advance(timing.end);
  }
  if (logs_) record_step(combined, step_time, lr);
  return verdict;
}

// Each server of --servers S is an asynchronous master for its shard (shard_: the whole buffer
// with one server), on its own: it stops by the run's rules applied to its own updates, or when
// every worker is done because another server stopped the run. Server 0 keeps the state, logs
// the steps and, with several servers, gets the others' shards and /servers rows at the end.
void TrainingRun::run_async_master() {
  const int servers = std::max(1, role_.servers);
  const std::size_t first = shard_.first;
  const std::size_t length = shard_.second - shard_.first;
  const std::size_t state_floats = world_.rank() == 0 ? net_->state_count() : 0;
  // The gradients come from a rank per worker, or from the workers emulated in this process.
  std::unique_ptr<AsyncCombiner> combiner;
  if (emulated_) {
    combiner = std::make_unique<EmulatedAsyncMaster>(EmulatedAsyncMaster::Parts{
        *emulated_, *net_, options_, async_parameters_receive(),
        [this] { return stop_request_.requested() ? kSignalled : kContinue; },
        [this](std::int64_t round, const WorkerReport& report) { worker_line(round, report); }});
  } else {
    combiner = std::make_unique<AsyncMaster>(world_, length, state_floats, servers);
  }
  AsyncCombiner& master = *combiner;
  master.use_rule({options_.k_async > 0, options_.staleness_bound});
  if (clock_.is_virtual()) {
    master.use_virtual_clock(comm_model_.message((length + state_floats) * sizeof(float)),
                             clock_.virtual_now());
  }
  master.use_time_window(options_.async_master_time_limit);
  // Host memory for the messages: views on a host-accessible backend, counted copies on a device
  // (and where emulated workers compute their rounds on the network: the sum is kept apart).
  nn::Backend& backend = net_->backend();
  const bool in_place = backend.host_accessible() && !emulated_;
  const auto start = SteadyClock::now();
  master.start(net_->host_parameters().values().subspan(first, length),
               net_->host_state().values().first(state_floats), step_);
  std::vector<float> state(state_floats);
  if (!in_place) gradient_staging_.assign(length, 0.0f);
  const double planned_samples = options_.epochs > 0
                                     ? options_.epochs * static_cast<double>(total_rows_)
                                     : std::numeric_limits<double>::infinity();
  // Several servers: this server's /servers rows (server 0 writes everyone's at the end), with
  // its update and send times of the previous step, as the synchronous servers report them (the
  // first row: no update, and the start's sends).
  std::vector<metrics::ServerRecord> server_rows;
  double update_seconds = 0, send_seconds = seconds_since(start);
  if (samples_seen_ >= planned_samples) stop_ = kFinished;
  stop_ = std::max(stop_, rank0_stop());
  while (stop_ == kContinue) {
    const auto step_start = SteadyClock::now();
    const double virtual_start = clock_.virtual_now();
    const double lr = schedule_->at(step_, epoch_at(step_));
    auto combined =
        master.collect(in_place ? net_->gradients().subspan(first, length) : gradient_staging_,
                       state, async_gradients_per_update(options_), step_);
    if (master.workers_done()) {  // another server stopped the run: no update to make
      stop_ = std::max({stop_, master.workers_stop(), static_cast<int>(kFinished)});
      break;
    }
    const double receive_seconds = seconds_since(step_start);
    if (in_place) {
      std::copy(state.begin(), state.end(), net_->state().begin());
    } else {
      backend.copy_from_host(gradient_staging_, net_->gradient_buffer(), first);
      if (!state.empty()) backend.copy_from_host(state, net_->state_buffer(), 0);
    }
    const int decision = accept_update(combined.mean_loss());
    if (servers > 1) {
      server_rows.push_back(
          {step_ + 1, world_.rank(), static_cast<std::int64_t>(length),
           static_cast<std::int64_t>(combined.workers.size() * length * sizeof(float)),
           receive_seconds, update_seconds, send_seconds});
    }
    if (decision == kContinue) {
      const bool timed = clock_.is_virtual() && compute_models_.empty();
      WorkTimer update_timer(clock_, backend);
      const auto update_start = SteadyClock::now();
      optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), lr, first);
      if (timed || servers > 1) {
        const double measured = update_timer.seconds();  // a GPU's update ends with its kernel
        if (timed) master.advance(measured);
        if (servers > 1) update_seconds = seconds_since(update_start);
      }
    }
    ++step_;
    samples_seen_ += static_cast<double>(combined.samples);
    if (clock_.is_virtual()) clock_.set_virtual_now(master.virtual_now());
    if (logs_) {
      record_step(
          combined,
          clock_.is_virtual() ? clock_.virtual_now() - virtual_start : seconds_since(step_start),
          lr);
    }
    stop_ = std::max(combined.stop, rank0_stop());
    if (decision == kDiverged) stop_ = kDiverged;
    if (step_ >= planned_ || samples_seen_ >= planned_samples) {
      stop_ = std::max(stop_, static_cast<int>(kFinished));
    }
    if (stop_ == kContinue) {
      const auto send_start = SteadyClock::now();
      master.publish(net_->host_parameters().values().subspan(first, length),
                     net_->host_state().values().first(state_floats), step_);
      send_seconds = seconds_since(send_start);
    }
    if (stop_ != kDiverged) after_step(clock_.now());
  }
  master.finish(step_, stop_);
  stop_ = std::max(stop_, master.workers_stop());  // a worker's stop from another server
  if (master.discarded() > 0) {
    log::verbose(cat(master.discarded(), " gradients arrived after the end and were not used"));
  }
  if (servers > 1) gather_async_servers(server_rows);
}

void TrainingRun::gather_async_servers(std::vector<metrics::ServerRecord> rows) {
  // Beside the exchanges' tags and checkpoint_now's.
  constexpr int kCountTag = 15, kRowsTag = 16, kShardTag = 17, kStopTag = 18;
  constexpr std::size_t kFields = 7;
  if (world_.rank() != 0) {
    std::vector<double> packed;
    for (const auto& r : rows) {
      packed.insert(
          packed.end(),
          {static_cast<double>(r.step), static_cast<double>(r.rank), static_cast<double>(r.floats),
           static_cast<double>(r.bytes_received), r.recv_time, r.update_time, r.send_time});
    }
    const std::int64_t count[2] = {static_cast<std::int64_t>(rows.size()), stop_};
    nn::HostView parameters = net_->host_parameters();
    const auto shard = parameters.values().subspan(shard_.first, shard_.second - shard_.first);
    comm::Request sent = world_.isend(count, sizeof count, 0, kCountTag);
    world_.wait(sent, "sending the server's step count to rank 0");
    sent = world_.isend(packed.data(), packed.size() * sizeof(double), 0, kRowsTag);
    world_.wait(sent, "sending the server's log rows to rank 0");
    sent = world_.isend(shard.data(), shard.size_bytes(), 0, kShardTag);
    world_.wait(sent, "sending the server's shard of the parameters to rank 0");
    // The servers end the run alike (a checkpoint is their collective), as rank 0 decides.
    comm::Request verdict = world_.irecv(&stop_, sizeof stop_, 0, kStopTag);
    world_.wait(verdict, "the end of the run from rank 0");
    return;
  }
  // Rank 0: the whole model for the evaluation, and every server's rows in step order.
  nn::HostView parameters = net_->host_parameters();
  for (int server = 1; server < role_.servers; ++server) {
    std::int64_t count[2] = {0, 0};  // rows, its StopCode
    comm::Request received = world_.irecv(count, sizeof count, server, kCountTag);
    world_.wait(received, cat("the step count of server ", server));
    stop_ = std::max(stop_, static_cast<int>(count[1]));
    std::vector<double> packed(static_cast<std::size_t>(count[0]) * kFields);
    received = world_.irecv(packed.data(), packed.size() * sizeof(double), server, kRowsTag);
    world_.wait(received, cat("the log rows of server ", server));
    for (std::size_t i = 0; i < packed.size(); i += kFields) {
      rows.push_back(
          {static_cast<std::int64_t>(packed[i]), static_cast<std::int64_t>(packed[i + 1]),
           static_cast<std::int64_t>(packed[i + 2]), static_cast<std::int64_t>(packed[i + 3]),
           packed[i + 4], packed[i + 5], packed[i + 6]});
    }
    const auto [begin, end] = server_shard(parameters.values().size(), server, role_.servers);
    received = world_.irecv(parameters.values().data() + begin, (end - begin) * sizeof(float),
                            server, kShardTag);
    world_.wait(received, cat("the shard of the parameters of server ", server));
  }
  parameters.write_back();
  for (int server = 1; server < role_.servers; ++server) {
    comm::Request sent = world_.isend(&stop_, sizeof stop_, server, kStopTag);
    world_.wait(sent, cat("telling server ", server, " how the run ended"));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  if (metric_log_ && metric_log_->is_open()) {
    for (const auto& row : rows) metric_log_->add(row);
  }
}

bool TrainingRun::refresh_from(AsyncWorker& worker, bool wait, std::int64_t& based_on) {
  nn::HostView parameters = net_->host_parameters();
  nn::HostView state = net_->host_state();
  const bool go = worker.refresh(parameters.values(), state.values(), wait, based_on);
  parameters.write_back();
  state.write_back();
  return go;
}

void TrainingRun::run_async_worker() {
  const int servers = std::max(1, role_.servers);
  AsyncWorker worker(world_, net_->parameter_count(), net_->state_count(), servers);
  std::int64_t based_on = 0;
  std::int64_t rounds = 0;
  // AMB, as the original's async strategy: newer parameters are taken between micro-batches
  // (the virtual clock's master decides at round starts, so not there).
  bool master_stopped = false;
  if (amb_ && !clock_.is_virtual()) {
    round_->between_micro_batches = [&] {
      if (!master_stopped && !refresh_from(worker, false, based_on)) master_stopped = true;
    };
  }
  // Under the virtual clock the master decides which parameters each round starts from.
  std::int64_t skipped_before = 0;
  double received = 0;  // seconds of the refresh the round starts from
  const auto refresh = [&] {
    const auto start = SteadyClock::now();
    // Under --staleness-bound every round starts at the master's go (async_rule.hpp).
    const bool go = refresh_from(
        worker, rounds == 0 || clock_.is_virtual() || options_.staleness_bound >= 0, based_on);
    received = seconds_since(start);
    return go;
  };
  const double modelled_receive = async_parameters_receive();
  double send_wait = 0;
  while (!master_stopped && refresh()) {
    round_->set_previous_exchange(0, send_wait, clock_.is_virtual() ? modelled_receive : received);
    auto report = round_->run(based_on + rounds, 1.0);
    report.queued_updates = worker.skipped() - skipped_before;
    skipped_before = worker.skipped();
    report.stop = stop_request_.requested() ? kSignalled : kContinue;
    report.based_on = based_on;
    if (options_.async_delay_std > 0) {
      report.comm_delay =
          emulation::message_delay(options_.async_delay_std, options_.seed, role_.worker, rounds);
    }
    const auto send_start = SteadyClock::now();
    worker.send(net_->host_gradients().values(), net_->host_state().values(), report);
    send_wait = seconds_since(send_start);  // waiting for the previous send to finish
    ++rounds;
    worker_line(rounds, report);
  }
  round_->between_micro_batches = nullptr;
  worker.finish();
  stop_ = worker.stop_code();
  if (worker.skipped() > 0) {
    log::verbose(cat(worker.skipped(), " parameter sets were overtaken before being used"));
  }
}

double TrainingRun::async_parameters_receive() const {
  // On the virtual clock a parameter message costs what the master's model says.
  // With several servers, the largest of the shards arriving side by side.
  const int servers = std::max(1, role_.servers);
  double modelled = 0;
  for (int server = 0; server < servers; ++server) {
    const auto [first, last] = server_shard(net_->parameter_count(), server, servers);
    const std::size_t floats = last - first + (server == 0 ? net_->state_count() : 0);
    modelled = std::max(modelled, comm_model_.message(floats * sizeof(float)));
  }
  return modelled;
}

int TrainingRun::finish() {
  const double elapsed = clock_.now();
  if (stop_ == kDiverged) {
    if (metric_log_) metric_log_->close();
    const std::string where = cat("non-finite loss at step ", step_ - 1, " (epoch ",
                                  strprintf("%.2f", epoch_at(step_ - 1)), ")");
    const std::string message =
        options_.nan_policy == "skip"
            ? cat(where, ", ", consecutive_skips_, " steps in a row: --nan-policy skip ",
                  "gives up after ", kMaxConsecutiveSkips, "; lower --lr")
            : cat(where, "; lower --lr, or --nan-policy skip to skip such steps");
    if (logs_) throw Error(message, ExitCode::kDiverged);
    return static_cast<int>(ExitCode::kDiverged);
  }
  if (stop_ == kSignalled) {
    const int signal_number = stop_request_.signal() != 0 ? stop_request_.signal() : SIGTERM;
    const char* name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";
    if (metric_log_) metric_log_->close();
    if (!options_.checkpoint.empty()) {
      checkpoint_now(elapsed);
      if (logs_) {
        progress_->note(cat("stopped by ", name, " at step ", step_, "; state saved in ",
                            options_.checkpoint, " (--resume ", options_.checkpoint,
                            " continues)"));
      }
      return static_cast<int>(ExitCode::kInterrupted);
    }
    if (logs_) {
      progress_->note(
          cat("stopped by ", name, " at step ", step_, "; no --checkpoint, state not saved"));
    }
    return 128 + signal_number;
  }
  if (!evaluated_now_) run_evaluation(elapsed);
  if (!options_.checkpoint.empty()) checkpoint_now(elapsed);
  if (metric_log_) metric_log_->close();
  if (logs_) {
    progress_->note(
        cat("done: ", step_, " steps (", strprintf("%.2f", epoch_at(step_)), " epochs) in ",
            human_duration(clock_.since_start()),
            clock_.is_virtual()
                ? cat(" (", human_duration(clock_.virtual_now() - clock_.elapsed_before()),
                      " emulated)")
                : "",
            skipped_ > 0 ? cat(", ", skipped_, " steps skipped for non-finite loss") : "",
            finished_early_ > 0 ? cat("; ", finished_early_,
                                      " worker rounds did their whole batch before the time limit")
                                : ""));
  }
  return 0;
}

}  // namespace mbkit::train
