// A training run's synchronous steps (training_run.hpp): one process, ps, allreduce, the
// workers emulated in process (--emulate) and the ranks hosting shares of them. Here the
// exchange's set-up, the first verdict and the choice of the loops' policies (the step's:
// training_run_sync_step.cpp; the wall clock's selection and AMB-DG's after the start).
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
  run_sync_steps(exchange, gradients, tail);
  if (round_) round_->gradients_ready = nullptr;
}

double TrainingRun::arrival_of(int worker, double ready) const {
  // Its gradient's message to the master (per pair of ranks in a per-pair model).
  return ready + comm_model_.ps_message(gradient_bytes_, role_.workers, role_.servers,
                                        worker_rank(worker, role_.servers), 0);
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

}  // namespace mbkit::train
