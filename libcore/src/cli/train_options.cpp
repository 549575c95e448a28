#include "mbkit/cli/train_options.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/cli/cli.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::cli {
namespace {

// An option whose value is one of an enum's names (train's to_string): parsed here, once, into
// the enum; another word is CLI11's one line naming the flag ("--clock: 'cpu' is not wall or
// virtual") and a usage exit. The help shows the default as the name it is given by.
template <class Enum>
CLI::Option* add_enum_option(CLI::App& group, const std::string& flag, Enum& value,
                             std::initializer_list<Enum> values, const std::string& description) {
  const std::vector<Enum> known(values);
  std::string names;         // "ps|allreduce"
  std::string alternatives;  // "ps or allreduce"
  for (std::size_t i = 0; i < known.size(); ++i) {
    names += cat(i > 0 ? "|" : "", train::to_string(known[i]));
    alternatives += cat(i == 0                 ? ""
                        : i + 1 < known.size() ? ", "
                                               : " or ",
                        train::to_string(known[i]));
  }
  const auto find = [known](const std::string& text) -> std::optional<Enum> {
    for (const Enum candidate : known) {
      if (text == train::to_string(candidate)) return candidate;
    }
    return std::nullopt;
  };
  return group
      .add_option_function<std::string>(
          flag, [&value, find](const std::string& text) { value = *find(text); }, description)
      ->check(CLI::Validator(
          [find, alternatives](std::string& text) -> std::string {
            return find(text) ? std::string() : cat("'", text, "' is not ", alternatives);
          },
          ""))  // no description: CLI11 would append it to the type name in --help
      ->default_str(train::to_string(value))
      ->type_name(names);
}

// --async and its rules of when the master updates (mb-train-fmb and mb-train-amb).
void add_async_options(CLI::App& dist, train::TrainOptions& o) {
  dist.add_flag("--async", o.async, "ps: the master updates as soon as gradients arrive");
  dist.add_option("--async-min-grads", o.async_min_grads, "--async: gradients combined per update")
      ->capture_default_str()
      ->check(whole_number<int>());
  dist.add_option("--async-master-time-limit", o.async_master_time_limit,
                  "--async: each update applies the gradients that arrived within SECONDS of "
                  "the master's step start (at least one: else the first to arrive); the "
                  "AMB original's time rule, instead of --async-min-grads (0: off)")
      ->type_name("SECONDS");
  dist.add_option("--async-delay-std", o.async_delay_std,
                  "--async: delay each worker->master message by SECONDS x |N(0,1)|, seeded "
                  "per worker and round (the AMB original's communication stragglers; 0: off)")
      ->type_name("SECONDS");
  dist.add_option("--k-batch-async", o.k_batch_async,
                  "K-batch-async SGD (Dutta et al. 2018) by name: --async --async-min-grads K, "
                  "an update per K gradients in order of arrival, a fast worker's several "
                  "among them")
      ->check(whole_number<int>())
      ->type_name("K");
  dist.add_option("--k-async", o.k_async,
                  "K-async SGD (Dutta et al. 2018), implies --async: an update per K gradients "
                  "of K distinct workers; a worker's next gradient waits for a later update")
      ->check(whole_number<int>())
      ->type_name("K");
  dist.add_option("--staleness-bound", o.staleness_bound,
                  "Stale synchronous parallel (Ho et al. 2013), implies --async: no worker "
                  "starts a round more than s rounds ahead of the slowest (0: bulk-synchronous)")
      ->check(whole_number<int>())
      ->type_name("s");
}

}  // namespace

void add_train_options(CLI::App& app, train::TrainOptions& o) {
  auto* data = app.add_option_group("Data");
  data->add_option("--data", o.data,
                   "Dataset to train on (its train split); distributed: one file sliced by "
                   "worker, a shard pattern 'sh-%05d-of-%05d.h5', or one file per worker, "
                   "comma-separated")
      ->required()
      ->type_name("FILE");
  data->add_option("--test-data", o.test_data,
                   "File whose test split evaluations use (default: --data)")
      ->type_name("FILE");
  data->add_option("--batch-size", o.batch_size, "Samples per step and worker")
      ->capture_default_str()
      ->check(whole_number<int>());
  data->add_option("--global-batch-size", o.global_batch_size,
                   "Samples per step over all workers, split among them (the first G mod W "
                   "workers take one more); instead of --batch-size")
      ->check(whole_number<std::int64_t>())
      ->type_name("G");
  data->add_option_function<std::vector<std::string>>(
          "--augment",
          [&o](const std::vector<std::string>& given) {
            // Bare --augment is the CIFAR recipe, as before --augment took a list.
            o.given.augment = given.empty() || given.front().empty()
                                  ? data::default_augmentation().text()
                                  : given.front();
          },
          "Augment training batches, per sample: a comma-separated list of crop:PAD (zero-pad "
          "by PAD pixels, crop at random), shift:FRACTION (Keras' width/height shift, fill "
          "nearest), flip (horizontal, p = 1/2); bare --augment is crop:4,flip")
      ->expected(0, 1)
      ->type_name("LIST");
  data->add_flag("--drop-last", o.drop_last, "Skip the last partial batch of each epoch");
  data->add_option("--prefetch", o.given.prefetch,
                   "Batches prepared ahead by a background thread, or auto: 2, but 0 (the "
                   "computing thread loads) when the process is pinned to one core")
      ->capture_default_str()
      ->type_name("auto|N");

  auto* model = app.add_option_group("Model");
  model
      ->add_option("--model", o.model.name,
                   "Model: mlp, mnist-cnn, cifar10-cnn, toy-fc, toy-conv, resnet<6n+2> (resnet8 .. "
                   "resnet110), resnet18, resnet50, alexnet, vgg16, inception3, densenet40, "
                   "densenet100")
      ->capture_default_str()
      ->type_name("NAME");
  model->add_option("--hidden", o.model.hidden, "mlp: hidden layer sizes, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  model->add_option("--activation", o.model.activation, "mlp: relu, sigmoid or tanh")
      ->capture_default_str()
      ->type_name("NAME");

  auto* optimizer = app.add_option_group("Optimizer (TensorFlow 1 semantics)");
  optimizer->add_option("--optimizer", o.optimizer.name, "sgd, momentum, rmsprop or adam")
      ->capture_default_str()
      ->type_name("NAME");
  optimizer->add_option("--lr", o.schedule.lr, "Learning rate")->capture_default_str();
  optimizer->add_option("--weight-decay", o.optimizer.weight_decay, "L2 weight decay")
      ->capture_default_str();
  optimizer
      ->add_option("--weight-decay-on", o.weight_decay_on,
                   "mean (the default, mbkit's): --weight-decay is added to the mean gradient; "
                   "sum (the AMB original's --weight_decay): added to the summed loss's "
                   "gradient per batch (AMB: per micro-batch), so W at batch B is W/B on mean")
      ->capture_default_str()
      ->type_name("mean|sum");
  optimizer->add_option("--momentum", o.optimizer.momentum,
                        "momentum: m (default 0.9); rmsprop: momentum (default 0)");
  optimizer->add_flag("--nesterov", o.optimizer.nesterov, "Nesterov momentum");
  optimizer
      ->add_option("--rmsprop-decay", o.optimizer.rmsprop_decay,
                   "rmsprop: decay of the mean square")
      ->capture_default_str();
  optimizer->add_option("--beta1", o.optimizer.adam_beta1, "adam: beta1")->capture_default_str();
  optimizer->add_option("--beta2", o.optimizer.adam_beta2, "adam: beta2")->capture_default_str();
  // Read after parsing (the default depends on the optimizer), so CLI11 knows no type to show.
  optimizer->add_option("--epsilon", "rmsprop (default 1e-10) and adam (default 1e-8): epsilon")
      ->type_name("FLOAT");

  auto* schedule = app.add_option_group("Learning-rate schedule");
  schedule
      ->add_option("--lr-schedule", o.schedule.kind,
                   "constant, exponential, multistep, linear or epochs")
      ->capture_default_str()
      ->type_name("KIND");
  schedule->add_option("--decay-steps", o.schedule.decay_steps, "exponential: steps per decay")
      ->capture_default_str();
  schedule->add_option("--decay-rate", o.schedule.decay_rate, "exponential: factor per decay_steps")
      ->capture_default_str();
  schedule->add_flag("--staircase,!--smooth", o.schedule.staircase,
                     "exponential: decay in steps (default) or smoothly");
  schedule->add_option("--milestones", o.schedule.milestones, "multistep: epochs, comma-separated")
      ->delimiter(',');
  schedule->add_option("--gamma", o.schedule.gamma, "multistep: factor at each milestone")
      ->capture_default_str();
  schedule->add_option("--end-lr", o.schedule.end_lr, "linear: learning rate at the end")
      ->capture_default_str();
  schedule
      ->add_option("--lr-every", o.schedule.every_epochs,
                   "epochs: epochs per decay (the AMB original's --lrate_epochs_every)")
      ->capture_default_str();
  schedule
      ->add_option("--lr-frac", o.schedule.frac,
                   "epochs: factor per --lr-every epochs (the original's --lrate_epochs_frac)")
      ->capture_default_str();
  schedule->add_option("--warmup-epochs", o.warmup_epochs,
                       "Linear warm-up over this many epochs (with --lr-scaling: from the "
                       "unscaled --lr, Goyal et al.'s gradual warm-up)");
  schedule
      ->add_option("--lr-scaling", o.lr_scaling,
                   "Scale --lr (and the schedule) by global batch / --lr-base-batch: none, "
                   "linear or sqrt")
      ->capture_default_str()
      ->type_name("none|linear|sqrt");
  schedule
      ->add_option("--lr-base-batch", o.lr_base_batch,
                   "--lr-scaling: the batch --lr is meant for (default: --batch-size)")
      ->check(whole_number<std::int64_t>());

  auto* length = app.add_option_group("Length (the first reached ends the run)");
  length->add_option("--epochs", o.epochs, "Epochs (fractions allowed)");
  length->add_option("--steps", o.steps, "Optimizer steps in total")
      ->check(whole_number<std::int64_t>());
  length->add_option("--time-budget", o.time_budget, "Seconds of training");

  auto* evaluation = app.add_option_group("Evaluation");
  evaluation
      ->add_option("--eval-every", o.eval_every,
                   "Evaluate on the test split every N steps (and at the end)")
      ->check(whole_number<std::int64_t>())
      ->type_name("N");
  evaluation->add_flag("--eval-every-epoch", o.eval_every_epoch,
                       "Also evaluate at the end of every epoch");
  evaluation->add_option("--test-size", o.test_size, "Test samples per evaluation (default: all)")
      ->check(whole_number<std::int64_t>());
  evaluation
      ->add_option("--test-sample", o.test_sample,
                   "--test-size N: fixed (the first N test images every time) or random (a fresh "
                   "random batch of N per evaluation, as the AMB original)")
      ->capture_default_str()
      ->type_name("fixed|random");
  evaluation
      ->add_option("--train-loss", o.train_loss,
                   "The steps' training loss: workers (their mean over the step's samples) or "
                   "master (rank 0 evaluates the updated model on a training batch of its own, as "
                   "the AMB original)")
      ->capture_default_str()
      ->type_name("workers|master");
  evaluation->add_option("--eval-batch-size", o.eval_batch_size, "Batch size of evaluations")
      ->capture_default_str()
      ->check(whole_number<int>());

  auto* run = app.add_option_group("Run");
  run->add_option("--seed", o.seed, "Seed of initialisation, shuffling, augmentation and dropout")
      ->capture_default_str()
      ->check(whole_number<std::uint64_t>());
  run->add_option("--threads", o.threads,
                  "Threads (default: all cores); with --emulate, the threads the emulated "
                  "workers are spread over (default 1), the same bits for every count")
      ->check(whole_number<int>());
  add_device_option(*run, o.device);
  add_precision_option(*run, o.precision);
  run->add_option("--cuda-graphs", o.cuda_graphs,
                  "Record the training step once per batch size as a CUDA graph and replay it "
                  "(default: on with --device cuda, off on the CPU)")
      ->type_name("on|off");
  run->add_option("--log", o.log, "Metric log to write (HDF5, see mbkit-formats(5))")
      ->type_name("FILE");
  run->add_flag("-f,--force", o.force, "Replace an existing log or checkpoint");
  run->add_option("--flush-interval", o.flush_interval, "Seconds between flushes of the log")
      ->capture_default_str();
  run->add_option("--checkpoint", o.checkpoint,
                  "Checkpoint file, written at the end (and on SIGINT/SIGTERM)")
      ->type_name("FILE");
  run->add_option("--checkpoint-every", o.checkpoint_every,
                  "Also write the checkpoint every N steps")
      ->check(whole_number<std::int64_t>())
      ->type_name("N");
  run->add_flag("--checkpoint-every-epoch", o.checkpoint_every_epoch,
                "Also keep a checkpoint of every epoch's end, NAME-epochNNNN.h5 beside "
                "--checkpoint NAME.h5");
  run->add_option("--resume", o.resume,
                  "Continue from this checkpoint, or 'auto': from --checkpoint if it exists")
      ->type_name("FILE|auto");
  run->add_flag("--resume-anyway", o.resume_anyway,
                "--resume although the seed, batch size, learning rate, threads, dataset or "
                "another option that changes the training differs from the checkpoint's");
  run->add_option("--nan-policy", o.nan_policy, "On a non-finite loss: stop, or skip the step")
      ->capture_default_str()
      ->type_name("stop|skip");
  run->add_option("--print-every", o.print_every,
                  "Progress line every N steps when stderr is not a terminal (default: every 10 s)")
      ->check(whole_number<std::int64_t>())
      ->type_name("N");
}

namespace {

// --comm, --allreduce, --bucket-mb, --servers, --compress: how the gradients travel.
void add_gradient_exchange_options(CLI::Option_group& dist, train::TrainOptions& o) {
  add_enum_option(dist, "--comm", o.comm, {train::CommMode::kPs, train::CommMode::kAllreduce},
                  "Gradient exchange: ps (rank 0 is the master) or allreduce (every rank "
                  "computes)");
  dist.add_option("--allreduce", o.given.allreduce,
                  "How --comm allreduce sums: shm (memory shared by ranks on one host), mpi "
                  "(MPI_Allreduce), nccl (NCCL in GPU memory, --device cuda) or auto (nccl on "
                  "GPUs, else shm when every rank is on one host); --comm ps takes shm: the "
                  "workers' gradients added in rank order, as --emulate adds them")
      ->capture_default_str()
      ->type_name("auto|shm|mpi|nccl");
  dist.add_option(
          "--bucket-mb", o.bucket_mb,
          "--allreduce mpi or nccl: sum the gradients in buckets of MB MiB, each started as soon "
          "as the backward pass finished it (0: one sum after the pass)")
      ->capture_default_str()
      ->type_name("MB");
  dist.add_option("--servers", o.servers,
                  "ps: ranks 0..S-1 are servers, each keeping and updating a contiguous shard "
                  "of the parameters; the other ranks are workers (MXNet's key sharding)")
      ->capture_default_str()
      ->check(whole_number<int>())
      ->type_name("S");
  dist.add_option("--compress", o.given.compress,
                  "Gradients on the wire: 2bit:THRESHOLD (MXNet's, with error feedback), fp16, "
                  "bf16 or none (synchronous ps and allreduce)")
      ->capture_default_str()
      ->type_name("ENCODING");
}

}  // namespace

void add_distribution_options(CLI::App& app, train::TrainOptions& o, bool straggler_methods) {
  auto* dist = app.add_option_group("Distribution (under mpirun or srun)");
  // mb-train-dbsl's exchange is its server's merge of models: none of the gradient
  // exchange's choices (transport, buckets, servers, compression) are its options at all.
  if (straggler_methods) add_gradient_exchange_options(*dist, o);
  // What mb-train-dbsl refuses is not its option at all: its server is asynchronous already.
  if (straggler_methods) add_async_options(*dist, o);
  dist->add_option("--induce", o.given.induce,
                   "Induced stragglers: niagara, cedar, MEAN:STD:WEIGHT,... (seconds), "
                   "exp:MEAN (exponential delays), or trace:FILE (each worker's delay at each "
                   "step, replayed from a CSV or HDF5 trace; mb-train-fmb.1)")
      ->type_name("PROFILE");
  dist->add_option("--trace-scale", o.trace_scale,
                   "--induce trace:FILE: multiply every delay of the trace by X")
      ->capture_default_str()
      ->type_name("X");
  dist->add_option("--slowdown", o.given.slowdown,
                   "Persistently slower workers: RANK=FACTOR,... (sleep (FACTOR-1) x compute)")
      ->type_name("RANK=FACTOR,...");
  dist->add_option("--cpu-quota", o.given.cpu_quota,
                   "--clock virtual: workers under a CFS quota, QUOTA seconds of CPU in each "
                   "PERIOD (seconds, from time 0), spent computing and waiting on the CPU (a "
                   "wait's first 3 ms; all of it under --comm-wait spin), stopped once spent")
      ->type_name("RANK=QUOTA/PERIOD,...");
  dist->add_option("--cpu-quota-tick", o.cpu_quota_tick,
                   "--cpu-quota as the kernel applies it, checked at this scheduler tick "
                   "(1/CONFIG_HZ, e.g. 0.004) and at waits, overrunning between checks; 0: "
                   "checked continuously")
      ->capture_default_str()
      ->type_name("SECONDS");
  dist->add_option("--comm-timeout", o.comm_timeout,
                   "Seconds a rank waits for another before the job fails")
      ->capture_default_str();
  dist->add_option("--comm-wait", o.comm_wait,
                   "Waiting ranks: yield (sleep between polls) or spin (busy-poll)")
      ->capture_default_str()
      ->type_name("yield|spin");
  dist->add_flag("--worker-log", o.worker_log, "A line per worker per step on stderr");
  dist->add_option("--worker-table", o.worker_table,
                   "What the log's /workers holds: every worker's rows, per-step quantiles over "
                   "the workers (/worker_summary), or K workers' rows and the quantiles "
                   "(default: all up to 64 workers, summary above)")
      ->type_name("all|summary|sample:K");

  auto* emulation = app.add_option_group("Cluster emulation (--clock virtual)");
  add_enum_option(*emulation, "--clock", o.clock,
                  {train::ClockMode::kWall, train::ClockMode::kVirtual},
                  "wall (real time) or virtual (emulate a cluster with a core per worker: CPU "
                  "time, induced delays without sleeping, modelled messages)");
  emulation
      ->add_option("--comm-model", o.given.comm_model,
                   "virtual: ALPHA,BETA seconds per message and per byte, or the FILE.h5 of "
                   "mb-bench-bandwidth --fit --comm-model (default: measured at start)")
      ->type_name("ALPHA,BETA|FILE");
  emulation
      ->add_option("--compute-model", o.given.compute_model,
                   "virtual: [RANKS=]A,B[,W[,L]] seconds per sample and per micro-batch "
                   "instead of CPU time, W more in a worker's first step, L the loader "
                   "thread's CPU per sample that --cpu-quota pays (repeat for ranks: 3=A,B or "
                   "2-5=A,B)")
      ->allow_extra_args(false)
      ->type_name("[RANKS=]A,B[,W[,L]]");
  emulation
      ->add_option("--emulate", o.emulate,
                   "virtual: N workers (and the ps master or servers) inside this one process, "
                   "with the bits of a run with a process per worker (needs --comm-model)")
      ->check(whole_number<int>())
      ->type_name("N");
  if (!straggler_methods) return;

  auto* methods = app.add_option_group("Straggler methods (sync ps)");
  methods
      ->add_option("--backup-workers", o.backup_workers,
                   "Backup workers (Chen et al. 2016): each step uses the first W-b of the W "
                   "workers' gradients to be ready and drops the b late ones")
      ->check(whole_number<int>())
      ->type_name("b");
  methods
      ->add_option("--k-sync", o.k_sync,
                   "K-sync SGD (Dutta et al. 2018): each step uses the first K gradients to be "
                   "ready and drops the rest")
      ->check(whole_number<int>())
      ->type_name("K");
  methods
      ->add_option("--gradient-coding", o.gradient_coding,
                   "Gradient coding (Tandon et al. 2017, fractional repetition): groups of s+1 "
                   "workers hold the same data; each step uses the first gradient of each group, "
                   "tolerating any s stragglers per group")
      ->check(whole_number<int>())
      ->type_name("s");
  methods
      ->add_option("--local-steps", o.given.local_steps,
                   "Local SGD (periodic averaging), mb-train-fmb, any clock, ps or allreduce: "
                   "each worker takes tau SGD steps on its own model, then the workers' "
                   "parameters, state and optimizer state are averaged; 1: plain FMB; "
                   "adacomm: tau chosen by AdaComm (Wang & Joshi 2018)")
      ->capture_default_str()
      ->type_name("tau|adacomm");
  methods
      ->add_option("--adacomm-tau0", o.adacomm_tau0,
                   "--local-steps adacomm: the first tau, and the scale of the later ones")
      ->capture_default_str()
      ->check(whole_number<int>())
      ->type_name("N");
  methods
      ->add_option("--adacomm-interval", o.adacomm_interval,
                   "--local-steps adacomm: seconds of the run's clock between choices of tau")
      ->capture_default_str()
      ->type_name("SECONDS");
  methods
      ->add_option("--k-batch-sync", o.k_batch_sync,
                   "K-batch-sync SGD (Dutta et al. 2018), mb-train-fmb: every worker computes "
                   "batches back to back from the step's parameters; the step ends when K "
                   "batches are done over all workers and sums them (needs --compute-model)")
      ->check(whole_number<int>())
      ->type_name("K");
  methods
      ->add_option("--drop-compute", o.given.drop_compute,
                   "DropCompute (Giladi et al. 2023), mb-train-fmb: a worker computes its batch "
                   "in --micro-batches and drops those it would start after SECONDS into its "
                   "round; auto: the threshold that maximises the expected samples per second")
      ->type_name("SECONDS|auto");
  methods
      ->add_option("--micro-batches", o.drop_compute.micro_batches,
                   "--drop-compute: micro-batches per batch")
      ->capture_default_str()
      ->check(whole_number<int>())
      ->type_name("M");
}

void add_amb_options(CLI::App& app, train::TrainOptions& o) {
  auto* amb = app.add_option_group("Anytime mini-batch");
  amb->add_option("--time-limit", o.given.time_limit,
                  "Seconds a worker computes per step (induced delays included), or auto: the "
                  "time of a full batch without delays, measured at start")
      ->required()
      ->type_name("SECONDS|auto");
  amb->add_option("--partitions", o.amb.partitions,
                  "Micro-batches per batch (of floor(batch / partitions) samples each)")
      ->required()
      ->check(whole_number<int>());
  amb->add_flag("--decay-per-micro-batch", o.amb.decay_per_micro_batch,
                "Weight decay as the AMB original: once per micro-batch (batch / micro-batch "
                "size times FMB's) instead of once per update");
  amb->add_option("--delayed-gradients", o.given.delayed_gradients,
                  "AMB-DG (Al-Lawati & Draper 2020), --clock virtual: workers never wait for "
                  "the master; round t computes at the parameters of update t - TAU; auto: TAU "
                  "= the message model's round trip in time limits, rounded up")
      ->type_name("TAU|auto");
}

void add_dbsl_options(CLI::App& app, train::TrainOptions& o) {
  auto* dbsl = app.add_option_group("Dual batch size learning");
  dbsl->add_flag("--plan", o.dbsl.plan_only,
                 "Print the plan (per worker: batch, samples per round, predicted round time) "
                 "and exit; needs no data file and no MPI");
  dbsl->add_flag("--json", o.dbsl.json, "--plan: as JSON");
  dbsl->add_option("--workers", o.dbsl.workers, "--plan: workers (a run: the ranks but rank 0)");
  dbsl->add_option("--train-samples", o.dbsl.train_samples,
                   "--plan: training samples N (a run: --data's train split)")
      ->type_name("N");
  dbsl->add_option("--time-model", o.dbsl.time_model,
                   "Time model file (HDF5, mbkit-formats(5)): a fit per rank, or one for all")
      ->type_name("FILE");
  dbsl->add_option("--time-model-ab", o.dbsl.time_model_ab,
                   "Time model of every worker: A,B seconds per sample and per batch")
      ->type_name("A,B");
  dbsl->add_flag("--calibrate", o.dbsl.calibrate,
                 "Each worker times a sweep of batch sizes on itself and fits the model");
  dbsl->add_option("--base-batch", o.dbsl.base_batch, "B_L: the large workers' batch")->required();
  dbsl->add_option("--extra-time", o.dbsl.extra_time,
                   "k >= 1: a round takes k times the all-large round")
      ->capture_default_str();
  dbsl->add_option("--small-workers", o.dbsl.small_workers, "Small workers (the last ranks)")
      ->capture_default_str();
  dbsl->add_option("--update-factor", o.dbsl.update_factor,
                   "Weight of a small worker's model: linear (d_S/d_L), sqrt or none")
      ->capture_default_str()
      ->type_name("linear|sqrt|none");
  dbsl->add_flag("--sync", o.dbsl.sync,
                 "Wait for every worker and take the factor-weighted mean (BSP)");
  dbsl->add_flag("--keep-optimizer-state", o.dbsl.keep_optimizer_state,
                 "Keep a worker's momentum between its rounds (default: reset, as the original)");
  if (auto* data = app.get_option_no_throw("--data")) data->required(false);
}

void finish_train_options(const CLI::App& app, train::TrainOptions& o) {
  // 0 is the field's "not given": given, it is a mistake, not a way to fall back to --batch-size.
  if (app.count("--global-batch-size") > 0 && o.global_batch_size < 1) {
    usage_error(cat("--global-batch-size ", o.global_batch_size,
                    " must be at least 1 (and at least the number of workers)"));
  }
  if (o.global_batch_size > 0 && app.count("--batch-size") > 0) {
    usage_error("--global-batch-size and --batch-size: give one (global, or per worker)");
  }
  // mb-train-dbsl declares none of the asynchronous options.
  const auto given = [&app](const char* flag) {
    const CLI::Option* option = app.get_option_no_throw(flag);
    return option != nullptr && option->count() > 0;
  };
  // The asynchronous methods by name imply --async; --k-batch-async K is the count rule's K.
  for (const auto* flag : {"--k-batch-async", "--k-async"}) {
    if (given(flag) && app.get_option(flag)->as<int>() < 1) {
      usage_error(cat(flag, " ", app.get_option(flag)->as<int>(), " must be at least 1"));
    }
  }
  if (given("--k-batch-async") && given("--async-min-grads")) {
    usage_error(cat("--k-batch-async ", o.k_batch_async, " and --async-min-grads ",
                    o.async_min_grads, " both set the gradients per update: give one"));
  }
  if (o.k_batch_async > 0) o.async_min_grads = o.k_batch_async;
  if (o.k_batch_async > 0 || o.k_async > 0 || given("--staleness-bound")) o.async = true;
  train::parse_option_texts(o);
  if (o.optimizer.name == "rmsprop") {
    o.optimizer.rmsprop_momentum = app.count("--momentum") > 0 ? o.optimizer.momentum : 0.0;
  }
  if (const auto* epsilon = app.get_option_no_throw("--epsilon");
      epsilon != nullptr && epsilon->count() > 0) {
    const double value = epsilon->as<double>();
    o.optimizer.rmsprop_epsilon = value;
    o.optimizer.adam_epsilon = value;
  }
}

}  // namespace mbkit::cli
