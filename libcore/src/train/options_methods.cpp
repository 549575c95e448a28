// The options of the emulation (--emulate) and of the synchronous straggler methods (local SGD,
// step selection, K-batch-sync, DropCompute, AMB-DG), checked by validate() (options.cpp).
#include <cmath>
#include <string>

#include "mbkit/train/options.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

// The first option that makes a run more than synchronous FMB workers on the CPU with one
// server and whole gradients, which local SGD and K-batch-sync build on (nullptr: none).
const char* beyond_plain_sync_fmb(const TrainOptions& o) {
  return o.amb.enabled             ? "mb-train-amb"
         : o.dbsl.enabled          ? "mb-train-dbsl"
         : o.async                 ? "--async"
         : o.drop_compute.enabled  ? "--drop-compute"
         : o.backup_workers > 0    ? "--backup-workers"
         : o.k_sync > 0            ? "--k-sync"
         : o.gradient_coding > 0   ? "--gradient-coding"
         : o.servers > 1           ? "--servers"
         : o.compression.enabled() ? "--compress"
         : o.bucket_mb > 0         ? "--bucket-mb"
         : o.device != "cpu"       ? "--device"
                                   : nullptr;
}

void validate_local_steps(const TrainOptions& o) {
  if (o.adacomm_tau0 < 1) {
    usage_error(cat("--adacomm-tau0 ", o.adacomm_tau0,
                    " must be at least 1 (--local-steps adacomm's first period)"));
  }
  if (!(o.adacomm_interval > 0) || !std::isfinite(o.adacomm_interval)) {
    usage_error(cat("--adacomm-interval ", shortest_decimal(o.adacomm_interval),
                    " must be a positive number of seconds"));
  }
  if (!o.adacomm && (o.adacomm_tau0 != 20 || o.adacomm_interval != 60)) {
    usage_error(cat(o.adacomm_tau0 != 20 ? "--adacomm-tau0" : "--adacomm-interval",
                    " needs --local-steps adacomm"));
  }
  if (o.local_steps < 1) {
    usage_error(cat("--local-steps ", o.local_steps, " must be at least 1 (1: plain FMB)"));
  }
  if (!local_sgd(o)) return;
  const std::string flag = cat("--local-steps ", o.given.local_steps);
  if (o.adacomm && !o.resume.empty()) {
    usage_error(cat(flag,
                    " and --resume: the period AdaComm chose and its losses are not in the "
                    "checkpoint; resume with --local-steps TAU"));
  }
  const char* refused = beyond_plain_sync_fmb(o);
  if (refused != nullptr) {
    usage_error(cat(flag, " and ", refused,
                    ": local SGD averages whole models in synchronous rounds (ps with one "
                    "server, or allreduce) of FMB workers on the CPU"));
  }
}

// --emulate: the synchronous methods of a cluster of N workers inside this process, on the
// virtual clock; what needs real ranks is refused, naming both flags.
// mb-train-dbsl --emulate (emulated_dbsl.hpp): the workers' rounds run one at a time on the
// server's network; the asynchronous server needs each round's ready time before it computes.
void validate_dbsl_emulation(const TrainOptions& o) {
  if (o.threads > 1) {
    usage_error(cat("--emulate ", o.emulate, " --threads ", o.threads,
                    ": DBSL's emulated workers run one at a time on the server's network; give "
                    "--threads 1"));
  }
  if (o.dbsl.calibrate) {
    usage_error(cat("--emulate ", o.emulate,
                    " --calibrate: emulated workers share this process's cores, so timing them "
                    "measures nothing of the cluster; give --compute-model or --time-model-ab"));
  }
  if (!o.dbsl.sync && o.compute_model.empty()) {
    usage_error(cat("--emulate ", o.emulate,
                    " needs --compute-model for DBSL's asynchronous server: it takes the pushes "
                    "in the order they arrive, which must be known before they are computed "
                    "(or give --sync)"));
  }
}

void validate_emulation(const TrainOptions& o) {
  if (o.emulate < 0) usage_error(cat("--emulate ", o.emulate, " must not be negative"));
  if (o.emulate == 0) return;
  if (o.clock != ClockMode::kVirtual) {
    usage_error(cat("--emulate ", o.emulate,
                    " runs the workers on this process's threads, not a core each: it needs "
                    "--clock virtual"));
  }
  const char* refused = o.compression.enabled()              ? "--compress"
                        : o.bucket_mb > 0                    ? "--bucket-mb"
                        : o.allreduce == AllreduceVia::kMpi  ? "--allreduce mpi"
                        : o.allreduce == AllreduceVia::kNccl ? "--allreduce nccl"
                        : o.device != "cpu"                  ? "--device"
                                                             : nullptr;
  if (refused != nullptr) {
    usage_error(cat("--emulate ", o.emulate, ": ", refused,
                    " is not emulated inside one process yet (synchronous ps and allreduce, "
                    "ps --async and mb-train-dbsl are); run a rank per worker under mpirun"));
  }
  if (o.servers > 1 && o.async && !o.cpu_quota.empty()) {
    // Under mpirun --cpu-quota is refused; with one server its periods follow the master's
    // round starts, with several each server starts a round on its own clock.
    usage_error(cat("--emulate ", o.emulate, " --servers ", o.servers,
                    " --async: --cpu-quota's periods follow a worker's round start, which each "
                    "asynchronous server places on its own clock; give --servers 1"));
  }
  if (o.dbsl.enabled) validate_dbsl_emulation(o);
  if (o.async && o.threads > 1) {
    usage_error(cat("--emulate ", o.emulate, " --async --threads ", o.threads,
                    ": the emulated asynchronous master runs the workers' rounds one at a time "
                    "on its network; give --threads 1"));
  }
  if (o.async && o.compute_model.empty()) {
    usage_error(cat("--emulate ", o.emulate,
                    " --async needs --compute-model: the master takes the gradients in the order "
                    "they arrive, which must be known before they are computed"));
  }
  if (!o.comm_model) {
    usage_error(cat("--emulate ", o.emulate,
                    ": give the emulated cluster's messages with --comm-model ALPHA,BETA "
                    "(nothing to measure inside one process; mb-bench-bandwidth measures a real "
                    "network's)"));
  }
  if (o.data.find('%') != std::string::npos || o.data.find(',') != std::string::npos) {
    usage_error(cat("--emulate ", o.emulate, ": --data '", o.data,
                    "': emulated workers take slices of one dataset file, not shard files"));
  }
}

// The straggler methods that drop late gradients (step_selection.hpp): the step must choose
// its gradients before they are summed, which the synchronous ps round does (from the ready
// times on the virtual clock, as the gradients arrive at the master on the wall clock); what sums
// during the backward pass or asynchronously is refused, naming both flags. DropCompute: the
// anytime round of mb-train-fmb's synchronous workers.
void validate_drop_compute(const TrainOptions& o) {
  if (!o.drop_compute.enabled) {
    if (o.drop_compute.micro_batches != 4) {
      usage_error(cat("--micro-batches ", o.drop_compute.micro_batches,
                      " splits DropCompute's batch: give --drop-compute too"));
    }
    return;
  }
  const std::string flag = cat("--drop-compute ", o.given.drop_compute);
  const char* refused = o.amb.enabled    ? "mb-train-amb (its --time-limit is this rule)"
                        : o.dbsl.enabled ? "mb-train-dbsl"
                        : o.async        ? "--async"
                                         : nullptr;
  if (refused != nullptr) {
    usage_error(cat(flag, " and ", refused,
                    ": DropCompute is the synchronous FMB workers' round (mb-train-fmb)"));
  }
  if (o.drop_compute.micro_batches < 1) {
    usage_error(cat("--micro-batches ", o.drop_compute.micro_batches, " must be at least 1"));
  }
}

// K-batch-sync (k_batch_sync.hpp): on the virtual clock the workers' batch counts are chosen
// before they compute, from their batches' completion times, which a compute model gives; on the
// wall clock the master takes the first K batches as they arrive (selecting_exchange.hpp), over
// one parameter server.
void validate_k_batch_sync(const TrainOptions& o) {
  if (o.k_batch_sync == 0) return;
  const std::string flag = cat("--k-batch-sync ", o.k_batch_sync);
  if (o.k_batch_sync < 0) usage_error(cat(flag, " must be at least 1"));
  const char* refused = beyond_plain_sync_fmb(o);
  if (refused != nullptr) {
    usage_error(cat(flag, " and ", refused,
                    ": K-batch-sync is the synchronous FMB workers' round on the CPU (one "
                    "server, whole gradients)"));
  }
  if (o.clock != ClockMode::kVirtual) {
    if (o.comm != CommMode::kPs) {
      usage_error(cat(flag,
                      " and --comm allreduce: on the wall clock the master (--comm ps) takes "
                      "the first K batches as they arrive"));
    }
    return;
  }
  if (o.compute_model.empty()) {
    usage_error(cat(flag,
                    " needs --compute-model: each worker's batch count is chosen from its "
                    "batches' completion times before it computes them"));
  }
}

// AMB-DG: mb-train-amb's synchronous ps round on the virtual clock, whose master keeps the
// parameter versions the workers still compute at.
void validate_delayed_gradients(const TrainOptions& o) {
  if (!o.delayed_gradients.enabled) return;
  const std::string flag = cat("--delayed-gradients ", o.given.delayed_gradients);
  if (o.delayed_gradients.auto_delay && o.clock != ClockMode::kVirtual) {
    usage_error(cat(flag,
                    " reads the round trip from the virtual clock's message model: give "
                    "--clock virtual, or the delay in rounds (0 to ",
                    kMaxDelayRounds, ") on the wall clock"));
  }
  const char* refused = !o.amb.enabled            ? tool_name(o)
                        : o.async                 ? "--async"
                        : o.comm != CommMode::kPs ? "--comm allreduce"
                        : o.servers > 1           ? "--servers"
                        : o.backup_workers > 0    ? "--backup-workers"
                        : o.k_sync > 0            ? "--k-sync"
                        : o.gradient_coding > 0   ? "--gradient-coding"
                        : o.device != "cpu"       ? "--device"
                                                  : nullptr;
  if (refused != nullptr) {
    usage_error(cat(flag, " and ", refused,
                    ": AMB-DG is mb-train-amb's synchronous round over one parameter server "
                    "(--comm ps) on the CPU, with every worker's sum used"));
  }
}

void validate_step_selection(const TrainOptions& o) {
  const std::pair<const char*, int> given[] = {{"--backup-workers", o.backup_workers},
                                               {"--k-sync", o.k_sync},
                                               {"--gradient-coding", o.gradient_coding}};
  std::vector<std::string> set;
  for (const auto& [name, value] : given) {
    if (value < 0) usage_error(cat(name, " ", value, " must not be negative"));
    if (value > 0) set.push_back(cat(name, " ", value));
  }
  if (set.empty()) return;
  const std::string& flag = set.front();
  if (set.size() > 1) {
    usage_error(cat(flag, " and ", set[1], " choose the step's gradients each: give one"));
  }
  // On the wall clock the master takes the gradients as they arrive (selecting_exchange.hpp);
  // --emulate needs the virtual clock anyway (validate_emulation).
  const char* refused = o.dbsl.enabled            ? "mb-train-dbsl"
                        : o.async                 ? "--async"
                        : o.comm != CommMode::kPs ? "--comm allreduce"
                        : o.servers > 1           ? "--servers"
                        : o.compression.enabled() ? "--compress"
                        : o.bucket_mb > 0         ? "--bucket-mb"
                        : o.device != "cpu"       ? "--device"
                                                  : nullptr;
  if (refused != nullptr) {
    usage_error(cat(flag, " and ", refused,
                    ": late gradients are dropped by the synchronous parameter server "
                    "(--comm ps, one server) on the CPU"));
  }
  if (o.gradient_coding > 0) {
    if (o.global_batch_size > 0) {
      usage_error(cat(flag,
                      " and --global-batch-size: a group's workers compute the same "
                      "batch, so every worker takes --batch-size"));
    }
    if (o.data.find('%') != std::string::npos || o.data.find(',') != std::string::npos) {
      usage_error(cat(flag, " and --data '", o.data,
                      "': a group's workers read one slice of one dataset file, not shard files"));
    }
  }
  if (o.emulate > 0 && o.compute_model.empty()) {
    usage_error(cat(flag, " with --emulate ", o.emulate,
                    " needs --compute-model: the emulated workers' ready times must be known "
                    "before their gradients are added"));
  }
}

}  // namespace

// Called by validate() (options.cpp), in this order.
void validate_methods(const TrainOptions& o) {
  validate_local_steps(o);
  validate_emulation(o);
  validate_step_selection(o);
  validate_k_batch_sync(o);
  validate_drop_compute(o);
  validate_delayed_gradients(o);
}

}  // namespace mbkit::train
