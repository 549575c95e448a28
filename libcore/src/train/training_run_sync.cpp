// A training run's synchronous steps (training_run.hpp): one process, ps, allreduce, the
// workers emulated in process (--emulate) and the ranks hosting shares of them.
#include <algorithm>
#include <bit>

#include "mbkit/train/roles.hpp"
#include "mbkit/train/training_run.hpp"

namespace mbkit::train {

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
  // The wall clock's selection (training_run_selection.cpp) and AMB-DG's
  // (training_run_delayed.cpp): after the start the workers are in step no more, and the master
  // takes their results as they come (AMB-DG makes no exchange when the start's verdict is a stop).
  const bool selects = selects_on_wall_clock();
  if (selects || delays_on_wall_clock()) {
    if (!selects && stop_ != kContinue) return;
    if (role_.master) {
      const auto server = selects ? make_selecting_server() : make_delayed_server();
      run_server(*server);
    } else {
      const auto worker = selects ? make_selecting_worker() : make_delayed_worker();
      run_worker(*worker);
    }
    return;
  }
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

}  // namespace mbkit::train
