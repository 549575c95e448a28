// A training run's records (training_run.hpp): the start table, rank 0's log of each step,
// evaluations, checkpoints, the nan policy and the stop decision.
#include <cmath>
#include <limits>
#include <tuple>

#include "mbkit/config.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/describe.hpp"
#include "mbkit/train/evaluate.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

constexpr int kMaxConsecutiveSkips = 20;

}  // namespace

void TrainingRun::print_start_table() const {
  log::info(cat("mbkit ", MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, "), ", backend_->description()));
  auto row = [](const char* key, const std::string& value) {
    log::info(strprintf("  %-10s %s", key, value.c_str()));
  };
  const std::string data_text =
      role_.distributed && my_data_.slice_count == 1 && options_.data.find('%') != std::string::npos
          ? cat(options_.data, " (a shard per worker)")
          : (options_.data.find(',') != std::string::npos ? "a file per worker" : options_.data);
  row("data", cat(data_text, ": ", info_.name, ", ", total_rows_, " training images of ",
                  shape_.text(), ", ", info_.num_classes, " classes",
                  options_.augment.enabled() ? cat(", augmented (", options_.augment.text(), ")")
                                             : std::string()));
  row("test",
      has_test_
          ? cat(test_path_,
                options_.test_size > 0
                    ? cat(random_test_ ? ": a random " : ": first ", options_.test_size, " images",
                          random_test_ ? " each time, drawn by rank 0" : "")
                    : "",
                options_.eval_every > 0 ? cat(", every ", options_.eval_every, " steps")
                                        : ", at the end",
                role_.distributed && !master_evaluates_alone() && !random_test_
                    ? cat(", shared out over ", emulated_ ? emulated_eval_slices_ : world_.size(),
                          emulated_ ? " emulated ranks" : " ranks")
                    : "")
          : "none (no test split)");
  row("model",
      cat(describe_model(options_.model), ": ",
          with_commas(static_cast<std::int64_t>(net_->graph().parameter_count())), " parameters"));
  row("optimizer", describe_optimizer(optimizer_config_) +
                       (amb_ && options_.amb.decay_per_micro_batch
                            ? cat(" (", options_.optimizer.weight_decay,
                                  " per micro-batch, as the AMB original)")
                        : options_.weight_decay_on == "sum"
                            ? cat(" (", options_.optimizer.weight_decay, " on the summed loss of ",
                                  micro_size_, " samples, as the AMB original)")
                            : ""));
  if (amb_) {
    const std::int64_t micro_batches = batch_ / micro_size_;
    row("anytime",
        cat("time limit ", short_duration(time_limit_),
            !time_limit_rule_.empty() ? cat(" (auto: ", time_limit_rule_, ")") : "", ", ",
            micro_batches, " micro-batches of ", micro_size_, " samples",
            micro_batches * micro_size_ < batch_
                ? cat(" (", batch_ - micro_batches * micro_size_, " samples of each batch unused)")
                : ""));
    if (options_.delayed_gradients.enabled) {
      row("delayed",
          cat("AMB-DG: round t computes at the parameters of update t - ", delay_rounds_,
              options_.delayed_gradients.auto_delay
                  ? " (auto: the message model's round trip over the time limit, rounded up)"
                  : "",
              delay_rounds_ == 0 ? ", which is AMB's round" : "",
              delays_on_wall_clock()
                  ? "; each worker's rounds back to back, its sums sent as it goes on"
                  : ""));
    }
  }
  if (backend_->can_capture()) {
    row("cuda graph",
        net_->step_graphs() ? std::string("on: the training step recorded once per batch size, "
                                          "then replayed")
        : options_.cuda_graphs == "off" ? std::string("off (--cuda-graphs off)")
                                        : cat("off: ", net_->step_graphs_unavailable()));
  }
  row("schedule", describe_schedule(schedule_config_) +
                      (options_.lr_scaling != "none"
                           ? cat(" (--lr ", options_.schedule.lr, " x ", lr_factor_, ": ",
                                 options_.lr_scaling, " scaling to a batch of ", global_batch_, ")")
                           : ""));
  const std::string nccl_sum =
      nccl_ ? cat(nccl_->description(), " in GPU memory",
                  options_.bucket_mb > 0
                      ? cat(", in buckets of ", options_.bucket_mb, " MiB during the backward pass")
                      : "")
            : "";
  if (!role_.distributed && nccl_) {
    row("allreduce", cat(nccl_sum, " on one rank (--allreduce nccl: the path runs; the sum of ",
                         "one rank is its own gradients)"));
  }
  if (role_.distributed) {
    row("workers",
        cat(role_.workers, " (", role_.comm,
            role_.servers > 1
                ? cat(" with ", role_.servers, " servers, about ",
                      with_commas(static_cast<std::int64_t>(
                          net_->parameter_count() / static_cast<std::size_t>(role_.servers))),
                      " parameters each")
            : role_.parameter_server ? ""
            : emulated_              ? " added up in worker order"
            : nccl_                  ? cat(" with ", nccl_sum)
            : role_.shared_memory    ? " through shared memory"
            : options_.bucket_mb > 0 ? cat(" with MPI_Iallreduce in buckets of ",
                                           options_.bucket_mb, " MiB during the backward pass")
                                     : " with MPI_Allreduce",
            allreduce_trial_ ? cat(": ", short_duration(allreduce_trial_->shared_memory_seconds),
                                   " per sum against MPI_Allreduce's ",
                                   short_duration(allreduce_trial_->mpi_seconds), " at start")
                             : "",
            role_.async && !dbsl_
                ? (options_.async_master_time_limit > 0
                       ? cat(", an update per ", options_.async_master_time_limit,
                             " s window (at least one gradient)")
                   : options_.k_async > 0
                       ? cat(", an update per ", options_.k_async,
                             " gradients of distinct workers (K-async)")
                       : cat(", an update per ", options_.async_min_grads, " gradient",
                             options_.async_min_grads > 1 ? "s" : "")) +
                      (options_.staleness_bound >= 0
                           ? cat(", no worker more than ", options_.staleness_bound,
                                 " rounds ahead of the slowest")
                           : "") +
                      (options_.async_delay_std > 0 ? cat(", gradient messages delayed ",
                                                          options_.async_delay_std, " s x |N(0,1)|")
                                                    : "")
                : "",
            emulated_
                ? cat("), emulated ",
                      role_.shares ? cat("on ", world_.size(),
                                         " ranks hosting shares of the workers (ranks ",
                                         describe_hosts(hosts_, Role{}), ")")
                                   : cat("in this process on ", world_.host()),
                      role_.servers > 1        ? " with the servers"
                      : role_.parameter_server ? " with the master"
                                               : "",
                      emulated_->lanes() > 1 ? cat(", over ", emulated_->lanes(), " threads") : "")
                : cat("), ranks ", describe_hosts(hosts_, role_))));
    if (options_.compression.enabled()) {
      const std::size_t n = net_->parameter_count();
      const double sent = static_cast<double>(options_.compression.encoded_bytes(n));
      row("compress", cat(options_.compression.text(), ": ", human_bytes(sent),
                          " of gradient per worker and step instead of ",
                          human_bytes(static_cast<double>(n * sizeof(float))), " (1/",
                          strprintf("%.1f", static_cast<double>(n * sizeof(float)) / sent), ")",
                          role_.parameter_server ? "; parameters come back as floats" : ""));
    }
    if (!dbsl_)
      row("batch",
          cat(options_.global_batch_size > 0
                  ? cat(worker_batch_size(options_, role_.workers, role_.workers - 1),
                        global_batch_ % role_.workers != 0
                            ? cat(" to ", worker_batch_size(options_, role_.workers, 0))
                            : "")
                  : cat(options_.batch_size),
              " per worker, ", global_batch_,
              role_.async || options_.k_batch_sync > 0 ? " per round of all workers" : " per step",
              ", ", steps_per_epoch_, " steps per epoch"));
    if (options_.k_batch_sync > 0) {
      row("method", cat("K-batch-sync: a step ends when ", options_.k_batch_sync,
                        " batches are done over all workers (", k_batch_samples(),
                        " samples), computed back to back from the step's parameters"));
    }
  } else {
    row("batch", cat(batch_, " per step, ", steps_per_epoch_, " steps per epoch"));
  }
  if (dbsl_) print_dbsl_rows();
  if (stragglers_) row("stragglers", stragglers_->describe());
  if (options_.induce_trace) row("stragglers", cat("trace ", options_.induce_trace->describe()));
  if (!slowdown_.empty()) row("slowdown", slowdown_.describe());
  if (!options_.cpu_quota.empty()) {
    row("cpu quota", cat(options_.cpu_quota.describe(),
                         options_.comm_wait == "spin"
                             ? " (CFS budget, spent computing and "
                               "spinning in waits)"
                             : " (CFS budget, spent computing and in a wait's first 3 ms)"));
  }
  if (clock_.is_virtual()) {
    row("clock", cat("virtual: a core per worker, compute ", compute_models_.describe(),
                     role_.distributed ? cat(", messages ", comm_model_.describe()) : "",
                     "; induced delays are not slept"));
  }
  std::string length =
      planned_ == kUnlimitedSteps ? "until the time budget" : cat(with_commas(planned_), " steps");
  if (options_.epochs > 0) length += cat(" (", options_.epochs, " epochs)");
  if (options_.time_budget > 0) length += cat(", at most ", human_duration(options_.time_budget));
  row("length", length);
  row("seed", cat(options_.seed));
  row("precision", nn::describe_precision(backend_->precision()));
  if (metric_log_) row("log", options_.log);
  if (!options_.checkpoint.empty()) {
    row("checkpoint",
        cat(options_.checkpoint,
            options_.checkpoint_every > 0 ? cat(" every ", options_.checkpoint_every, " steps")
                                          : "",
            options_.checkpoint_every_epoch ? ", NAME-epochNNNN.h5 at every epoch's end" : "",
            " and at the end"));
  }
  log::verbose("layers:\n" + net_->graph().summary());
}

RunFacts TrainingRun::run_facts() const {
  RunFacts facts;
  facts.planned_steps = planned_;
  facts.world_size = role_.ranks(world_);
  facts.workers = role_.workers;
  facts.time_limit = time_limit_;
  facts.time_limit_rule = time_limit_rule_;
  facts.delay_rounds = delay_rounds_;
  facts.allreduce = allreduce_used_;
  if (nccl_) facts.allreduce_library = nccl_->description();
  facts.trial = allreduce_trial_;
  if (dbsl_) {
    facts.dbsl = &dbsl_plan_;
    facts.dbsl_factors = dbsl_factors_;
  }
  if (backend_->can_capture()) facts.step_graphs = net_->step_graphs();
  if (!comm_model_.file.empty()) facts.comm_model_values = comm_model_.spec();
  return facts;
}

void TrainingRun::checkpoint_now(double elapsed, const std::string& path) {
  // With several servers: the whole optimizer state, gathered from the servers' shards (under
  // --emulate this process's optimizer is the whole already, or with several asynchronous
  // servers this process's S shard optimizers are put together).
  std::vector<std::vector<float>> state;
  if (emulated_async_servers()) state = emulated_servers_optimizer_state();
  if (role_.servers > 1 && role_.server && role_.emulated == 0) {
    const std::size_t n = net_->parameter_count();
    constexpr int kStateTag = 14;  // beside exchange_internal.hpp's tags
    for (const auto& [name, values] : optimizer_->state()) {
      std::vector<float> shard(values->size());  // host memory, also on a GPU
      net_->backend().copy_to_host(*values, 0, shard);
      if (world_.rank() != 0) {
        comm::Request sent = world_.isend(shard.data(), shard.size() * sizeof(float), 0, kStateTag);
        world_.wait(sent, cat("sending the optimizer state ", name, " to rank 0"));
        continue;
      }
      state.emplace_back(n);
      std::copy(shard.begin(), shard.end(), state.back().begin());
      for (int server = 1; server < role_.servers; ++server) {
        const auto [first, last] = server_shard(n, server, role_.servers);
        comm::Request received = world_.irecv(state.back().data() + first,
                                              (last - first) * sizeof(float), server, kStateTag);
        world_.wait(received, cat("the optimizer state ", name, " of server ", server));
      }
    }
  }
  // Collective under shares: every rank sends its workers' budgets.
  if (!options_.cpu_quota.empty()) quota_budgets_ = quota_budgets();
  if (logs_) save_checkpoint_to(path.empty() ? options_.checkpoint : path, elapsed, state);
}

void TrainingRun::save_checkpoint_to(const std::string& path, double elapsed,
                                     const std::vector<std::vector<float>>& optimizer_state) {
  Checkpoint checkpoint;
  checkpoint.model = options_.model.name;
  checkpoint.model_config = options_.model.to_map();
  checkpoint.input_shape = {shape_.channels, shape_.height, shape_.width};
  checkpoint.num_classes = info_.num_classes;
  // Explicit, counted copies out of the backend's buffers (checkpoint.hpp).
  capture_model(checkpoint, *net_, *optimizer_, optimizer_state);
  checkpoint.optimizer = options_.optimizer.name;
  checkpoint.optimizer_config = optimizer_map(options_.optimizer);
  checkpoint.step = step_;
  checkpoint.epoch = step_ / steps_per_epoch_;
  checkpoint.batch_in_epoch = step_ % steps_per_epoch_;
  checkpoint.epoch_progress = epoch_at(step_);
  checkpoint.workers = role_.workers;
  checkpoint.comm = role_.comm;
  if (versions_) checkpoint.delayed_parameters = versions_->saved(step_);
  if (delayed_timeline_) checkpoint.delayed_timeline = delayed_timeline_->saved();
  checkpoint.cpu_quota_budgets = quota_budgets_;
  checkpoint.cpu_quota_state_size =
      static_cast<std::int64_t>(emulation::QuotaBudget::state_size(options_.cpu_quota_tick));
  checkpoint.seed = options_.seed;
  checkpoint.elapsed = elapsed;
  checkpoint.wall_elapsed = clock_.wall_now();
  checkpoint.dataset = info_.name;
  checkpoint.mean = info_.mean;
  checkpoint.std = info_.std;
  checkpoint.config_json = config_json(options_, net_->graph(), run_facts());
  checkpoint.created_by = cat(tool_name(options_), " ", MBKIT_VERSION);
  // The log first: a run killed after the checkpoint then has a log that reaches its step, so
  // the resumed run's rows follow on without a gap.
  if (metric_log_ && metric_log_->is_open()) metric_log_->flush();
  write_checkpoint(path, checkpoint);
}

void TrainingRun::run_evaluation(double elapsed) {
  if (!has_test_) return;
  EvalResult result;
  if (test_loader_ && random_test_) {
    // The draw is the step's: a resumed run draws what the uninterrupted one did.
    const std::int64_t draws = test_loader_->batches_per_epoch();
    result = evaluate_batch(*net_, *test_loader_, step_ / draws, step_ % draws);
  } else if (emulated_) {
    // Every rank holds the model: rank 0 evaluates every emulated rank's slice, alone.
    if (logs_) result = evaluate_emulated_slices();
  } else if (test_loader_) {
    result = evaluate(*net_, *test_loader_);
  }
  if (!master_evaluates_alone() && role_.distributed && !random_test_ && !emulated_) {
    world_.rendezvous(cat("evaluation at step ", step_));
    result.reduce(world_);
  }
  if (!logs_) return;
  last_accuracy_ = result.accuracy();
  last_eval_step_ = step_;
  progress_->note(
      strprintf("eval at step %lld (epoch %.2f): loss %.4f, accuracy %.2f%% on %lld images",
                static_cast<long long>(step_), epoch_at(step_), result.loss(),
                100.0 * result.accuracy(), static_cast<long long>(result.samples)));
  if (metric_log_) {
    metric_log_->add(metrics::EvalRecord{step_, elapsed, epoch_at(step_), result.loss(),
                                         result.accuracy(), result.samples, clock_.wall_now()});
  }
}

EvalResult TrainingRun::evaluate_emulated_slices() {
  std::vector<EvalResult> slices;
  for (int slice = 0; slice < emulated_eval_slices_; ++slice) {
    data::LoaderOptions options = test_loader_->options();
    options.slice_index = slice;
    data::DataLoader loader(options);
    slices.push_back(evaluate(*net_, loader));
  }
  return EvalResult::sum_in_rank_order(slices);
}

void TrainingRun::worker_line(std::int64_t at_step, const WorkerReport& r) const {
  if (!options_.worker_log) return;
  log::info(
      cat(emulated_            ? cat("rank ", r.rank, " (emulated): ")
          : world_.rank() == 0 ? "rank 0: "
                               : "",
          strprintf("%s %lld: %lld samples, loss %.4f, compute %.1f ms, sleep %.1f ms, "
                    "previous send %.1f ms, wait %.1f ms",
                    role_.async ? "round" : "step", static_cast<long long>(at_step),
                    static_cast<long long>(r.samples),
                    r.samples > 0 ? r.loss_sum / static_cast<double>(r.samples) : 0.0,
                    1e3 * r.compute_time, 1e3 * r.sleep_time, 1e3 * r.send_time, 1e3 * r.wait_time),
          role_.async ? cat(", on parameters of step ", r.based_on) : ""));
}

// The batch is the step's (a resumed run evaluates what the uninterrupted one did), in
// evaluation mode, so that it changes no batch-norm statistics of the model being trained.
std::pair<double, double> TrainingRun::master_batch_loss() {
  const std::int64_t batches = master_loader_->batches_per_epoch();
  master_loader_->seek((step_ - 1) / batches, (step_ - 1) % batches);
  const data::Batch& batch = master_loader_->next();
  const auto outcome = net_->forward(batch.images.data(), batch.labels.data(), batch.size, false);
  const double size = static_cast<double>(batch.size);
  return {outcome.loss_sum / size, static_cast<double>(outcome.correct) / size};
}

void TrainingRun::record_step(const CombinedStep& combined, double step_time, double lr) {
  const double samples = static_cast<double>(std::max<std::int64_t>(combined.samples, 1));
  double loss = combined.mean_loss();
  double accuracy = static_cast<double>(combined.correct) / samples;
  if (master_loader_) std::tie(loss, accuracy) = master_batch_loss();
  epoch_loss_sum_ += loss * static_cast<double>(combined.samples);
  epoch_samples_ += static_cast<double>(combined.samples);
  ++epoch_steps_;
  const double elapsed = clock_.now();
  if (metric_log_) {
    try {
      record_step_rows(combined, step_time, lr, elapsed, loss, accuracy);
    } catch (const Error& error) {
      log_write_failed(error, elapsed);
    }
  }
  for (const auto& r : combined.workers) {
    if (!r.finished_early) continue;
    if (finished_early_++ == 0) {
      log::warn(cat("step ", step_, ": ",
                    role_.distributed ? cat("rank ", r.rank, " did its") : "the",
                    " whole batch of ", r.samples,
                    " samples before the time limit: grow "
                    "--batch-size or shrink --time-limit (counted in the log's "
                    "/workers/finished_early)"));
    }
  }
  progress_->step(step_, loss, combined.correct, static_cast<int>(combined.samples), step_time,
                  budget_ - (clock_.now() - clock_.elapsed_before()));
}

void TrainingRun::log_write_failed(const Error& error, double elapsed) {
  try {
    metric_log_.reset();  // its destructor's last flush fails quietly
  } catch (...) {
  }
  if (options_.checkpoint.empty()) throw error;
  // Rank 0 alone (a failed write ends its loop): with several server ranks the checkpoint then
  // holds rank 0's optimizer shard for the whole buffer, so it is refused in that case.
  if (role_.servers > 1 && role_.emulated == 0) throw error;
  save_checkpoint_to(options_.checkpoint, elapsed,
                     emulated_async_servers() ? emulated_servers_optimizer_state()
                                              : std::vector<std::vector<float>>{});
  throw Error(cat(error.what(), "; state saved in ", options_.checkpoint, " (--resume ",
                  options_.checkpoint, " continues)"),
              error.code());
}

void TrainingRun::record_step_rows(const CombinedStep& combined, double step_time, double lr,
                                   double elapsed, double loss, double accuracy) {
  {
    metric_log_->add(metrics::StepRecord{
        step_, elapsed, epoch_at(step_), loss, accuracy, lr, combined.samples, step_time,
        // An emulated step can take no time (gradients arriving together at a master
        // whose update is free under a compute model): its rate is undefined.
        step_time > 0 ? static_cast<double>(combined.samples) / step_time
                      : std::numeric_limits<double>::quiet_NaN(),
        clock_.wall_now()});
    if (role_.distributed || amb_) {
      for (const auto& r : combined.workers) {
        metric_log_->add(metrics::WorkerRecord{
            step_, r.rank, r.samples, r.compute_time, r.sleep_time, r.send_time, r.wait_time,
            r.staleness, r.micro_batches, r.finished_early ? 1 : 0, r.recv_time, r.exit_time,
            r.queued_updates, r.comm_delay, r.dropped ? 1 : 0});
      }
      metric_log_->end_worker_step(step_);
    }
    if (role_.distributed) {
      // The gradients the step used (a dropped worker's is not).
      const auto used = std::count_if(combined.workers.begin(), combined.workers.end(),
                                      [](const WorkerReport& r) { return !r.dropped; });
      metric_log_->add(metrics::CollectRecord{step_, static_cast<std::int64_t>(used),
                                              combined.samples, combined.wait_time});
    }
    for (const auto& r : combined.servers) {
      metric_log_->add(metrics::ServerRecord{step_, r.rank, r.floats, r.bytes_received, r.recv_time,
                                             r.update_time, r.send_time});
    }
    metric_log_->flush_if_due();
  }
}

// The nan policy, decided where the update is made (identically on every rank of allreduce).
int TrainingRun::accept_update(double loss) {
  if (std::isfinite(loss)) {
    consecutive_skips_ = 0;
    return kContinue;
  }
  if (options_.nan_policy == "skip") {
    ++skipped_;
    if (++consecutive_skips_ > kMaxConsecutiveSkips) return kDiverged;
    if (logs_) {
      log::warn(cat("non-finite loss at step ", step_, "; update skipped (--nan-policy skip)"));
    }
    return -1;  // skip this update
  }
  return kDiverged;
}

// Every rank that calls this knows the epoch alike (steps, or the async master's samples).
void TrainingRun::after_step(double elapsed) {
  evaluated_now_ = false;
  const double whole = std::floor(epoch_at(step_));
  const bool epoch_ended = whole > whole_epochs_;
  whole_epochs_ = whole;
  if ((options_.eval_every > 0 && step_ % options_.eval_every == 0) ||
      (epoch_ended && options_.eval_every_epoch)) {
    run_evaluation(elapsed);
    evaluated_now_ = true;
  }
  if (logs_ && epoch_ended) end_epoch(elapsed);
  if (epoch_ended && options_.checkpoint_every_epoch) {
    std::string stem = options_.checkpoint;
    if (stem.ends_with(".h5")) stem.resize(stem.size() - 3);
    checkpoint_now(elapsed,
                   strprintf("%s-epoch%04lld.h5", stem.c_str(), static_cast<long long>(whole)));
  }
  if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) {
    checkpoint_now(elapsed);
  }
}

// The line the MXNet lab and the numpy exercise print per epoch: the epoch, its mean training
// loss (over its steps' samples), the test accuracy at its end, its time on the run's clock.
void TrainingRun::end_epoch(double elapsed) {
  const auto epoch = static_cast<long long>(whole_epochs_);
  const double loss = epoch_samples_ > 0 ? epoch_loss_sum_ / epoch_samples_ : 0.0;
  const std::string accuracy = last_eval_step_ == step_
                                   ? strprintf("test accuracy %.2f%%", 100.0 * last_accuracy_)
                                   : std::string("no evaluation at its end");
  progress_->note(strprintf("epoch %lld: train loss %.4f over %lld steps, %s, %s", epoch, loss,
                            static_cast<long long>(epoch_steps_), accuracy.c_str(),
                            short_duration(elapsed - epoch_started_).c_str()));
  epoch_started_ = elapsed;
  epoch_loss_sum_ = epoch_samples_ = 0;
  epoch_steps_ = 0;
}

int TrainingRun::rank0_stop() const {
  if (stop_request_.requested()) return static_cast<int>(kSignalled);
  if (clock_.now() - clock_.elapsed_before() >= budget_) return static_cast<int>(kFinished);
  return static_cast<int>(kContinue);
}

double TrainingRun::epoch_at(std::int64_t step) const {
  if (role_.async && !dbsl_) return samples_seen_ / static_cast<double>(total_rows_);
  return epoch_base_ +
         static_cast<double>(step - step_base_) / static_cast<double>(steps_per_epoch_);
}

}  // namespace mbkit::train
