#include "mbkit/tools/mb_train.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <limits>
#include <optional>
#include <sstream>

#include "mbkit/cli/cli.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/config.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/loader.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/evaluate.hpp"
#include "mbkit/train/metric_log.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/signals.hpp"
#include "mbkit/util/term.hpp"
#include "mbkit/util/version.hpp"

namespace mbkit::tools::train {
namespace {

using Clock = std::chrono::steady_clock;
using mbkit::train::Checkpoint;
using mbkit::train::NamedArray;

constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();
constexpr int kMaxConsecutiveSkips = 20;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

void validate(const TrainOptions& o) {
  if (o.data.empty()) usage_error("--data is required");
  if (o.batch_size < 1) usage_error(cat("--batch-size ", o.batch_size, " must be at least 1"));
  if (o.epochs < 0 || o.steps < 0 || o.time_budget < 0) {
    usage_error("--epochs, --steps and --time-budget must not be negative");
  }
  if (o.epochs == 0 && o.steps == 0 && o.time_budget == 0) {
    usage_error("give the length of the run: --epochs, --steps or --time-budget");
  }
  if (o.eval_every < 0) usage_error("--eval-every must not be negative");
  if (o.test_size < 0) usage_error("--test-size must not be negative");
  if (o.eval_batch_size < 1) usage_error("--eval-batch-size must be at least 1");
  if (o.warmup_epochs < 0) usage_error("--warmup-epochs must not be negative");
  if (o.nan_policy != "stop" && o.nan_policy != "skip") {
    usage_error(cat("--nan-policy: '", o.nan_policy, "' is not stop or skip"));
  }
  if (o.checkpoint_every < 0) usage_error("--checkpoint-every must not be negative");
  if (o.checkpoint_every > 0 && o.checkpoint.empty()) {
    usage_error("--checkpoint-every needs --checkpoint FILE");
  }
  if (o.resume == "auto" && o.checkpoint.empty())
    usage_error("--resume auto needs --checkpoint FILE");
  if (o.flush_interval <= 0) usage_error("--flush-interval must be positive");
  if (o.print_every < 0) usage_error("--print-every must not be negative");
}

std::map<std::string, std::string> optimizer_map(const optim::OptimizerConfig& c) {
  return {{"name", c.name},
          {"weight_decay", cat(c.weight_decay)},
          {"momentum", cat(c.momentum)},
          {"nesterov", c.nesterov ? "true" : "false"},
          {"rmsprop_decay", cat(c.rmsprop_decay)},
          {"rmsprop_momentum", cat(c.rmsprop_momentum)},
          {"rmsprop_epsilon", cat(c.rmsprop_epsilon)},
          {"adam_beta1", cat(c.adam_beta1)},
          {"adam_beta2", cat(c.adam_beta2)},
          {"adam_epsilon", cat(c.adam_epsilon)}};
}

std::string config_json(const TrainOptions& o, const nn::Graph& graph, std::int64_t planned_steps) {
  std::ostringstream out;
  {
    JsonWriter json(out, false);
    json.begin_object();
    json.key("data").value(o.data);
    json.key("test_data").value(o.test_data.empty() ? o.data : o.test_data);
    json.key("batch_size").value(o.batch_size);
    json.key("augment").value(o.augment);
    json.key("drop_last").value(o.drop_last);
    json.key("model").value(o.model.name);
    json.key("model_config").begin_object();
    for (const auto& [key, value] : o.model.to_map()) json.key(key).value(value);
    json.end_object();
    json.key("parameters").value(static_cast<std::uint64_t>(graph.parameter_count()));
    json.key("optimizer").begin_object();
    for (const auto& [key, value] : optimizer_map(o.optimizer)) json.key(key).value(value);
    json.end_object();
    json.key("lr").value(o.schedule.lr);
    json.key("lr_schedule").value(o.schedule.kind);
    json.key("decay_steps").value(o.schedule.decay_steps);
    json.key("decay_rate").value(o.schedule.decay_rate);
    json.key("staircase").value(o.schedule.staircase);
    json.key("milestones").array(o.schedule.milestones);
    json.key("gamma").value(o.schedule.gamma);
    json.key("end_lr").value(o.schedule.end_lr);
    json.key("warmup_epochs").value(o.warmup_epochs);
    json.key("epochs").value(o.epochs);
    json.key("steps").value(o.steps);
    json.key("planned_steps").value(planned_steps == kUnlimited ? std::int64_t{-1} : planned_steps);
    json.key("time_budget").value(o.time_budget);
    json.key("eval_every").value(o.eval_every);
    json.key("test_size").value(o.test_size);
    json.key("seed").value(o.seed);
    json.key("device").value(o.device);
    json.key("nan_policy").value(o.nan_policy);
    json.end_object();
  }
  return out.str();
}

std::vector<NamedArray> to_arrays(const std::vector<const nn::ParamSpec*>& specs,
                                  std::span<const float> buffer) {
  std::vector<NamedArray> arrays;
  for (const auto* spec : specs) {
    const auto begin = buffer.begin() + static_cast<std::ptrdiff_t>(spec->offset);
    arrays.push_back({spec->name, spec->shape, std::vector<float>(begin, begin + spec->size())});
  }
  return arrays;
}

void from_arrays(const std::vector<NamedArray>& arrays,
                 const std::vector<const nn::ParamSpec*>& specs, std::span<float> buffer,
                 const std::string& path) {
  if (arrays.size() != specs.size()) {
    data_error(cat(path, ": holds ", arrays.size(), " arrays where the model has ", specs.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (arrays[i].name != specs[i]->name || arrays[i].shape != specs[i]->shape) {
      data_error(cat(path, ": array ", i, " is ", arrays[i].name, " where the model has ",
                     specs[i]->name));
    }
    std::copy(arrays[i].values.begin(), arrays[i].values.end(),
              buffer.begin() + static_cast<std::ptrdiff_t>(specs[i]->offset));
  }
}

std::string describe_model(const models::ModelConfig& model) {
  if (model.name != "mlp") return model.name;
  std::vector<std::string> sizes;
  for (int size : model.hidden) sizes.push_back(cat(size));
  return cat("mlp (hidden ", sizes.empty() ? "none" : join(sizes, ","), ", ", model.activation,
             ")");
}

std::string describe_optimizer(const optim::OptimizerConfig& c) {
  std::string text = c.name;
  if (c.name == "momentum") text += cat(" ", c.momentum, c.nesterov ? " (nesterov)" : "");
  if (c.name == "rmsprop")
    text += cat(" (decay ", c.rmsprop_decay, ", momentum ", c.rmsprop_momentum, ")");
  if (c.name == "adam") text += cat(" (beta1 ", c.adam_beta1, ", beta2 ", c.adam_beta2, ")");
  return text + cat(", weight decay ", c.weight_decay);
}

std::string describe_schedule(const optim::ScheduleConfig& s) {
  std::string text = cat("lr ", s.lr, " ", s.kind);
  if (s.kind == "exponential") {
    text += cat(" (x", s.decay_rate, " every ", s.decay_steps, " steps",
                s.staircase ? ", staircase" : "", ")");
  } else if (s.kind == "multistep") {
    std::vector<std::string> epochs;
    for (double m : s.milestones) epochs.push_back(cat(m));
    text += cat(" (x", s.gamma, " at epochs ", join(epochs, ","), ")");
  } else if (s.kind == "linear") {
    text += cat(" (to ", s.end_lr, " at step ", s.total_steps, ")");
  }
  if (s.warmup_steps > 0) text += cat(", warm-up ", s.warmup_steps, " steps");
  return text;
}

/// Progress on stderr: a live line on a terminal, otherwise a line every `every` steps or 10 s.
class Progress {
 public:
  Progress(std::int64_t planned, std::int64_t steps_per_epoch, std::int64_t every)
      : planned_(planned),
        steps_per_epoch_(steps_per_epoch),
        every_(every),
        live_(stderr_is_terminal() && log::level() >= log::Level::kNormal) {}
  ~Progress() { clear(); }

  void step(std::int64_t step, double loss, std::int64_t correct, int samples, double step_time,
            double remaining_budget) {
    loss_ += loss * samples;
    correct_ += correct;
    samples_ += samples;
    time_ += step_time;
    ++steps_;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const bool due = live_ ? since >= 0.1
                           : (every_ > 0 ? step % every_ == 0 : since >= 10.0) || step == planned_;
    if (!due || log::level() < log::Level::kNormal) return;
    const double rate = time_ > 0 ? samples_ / time_ : 0;
    std::string line =
        strprintf("epoch %.2f  step %lld", static_cast<double>(step) / steps_per_epoch_,
                  static_cast<long long>(step));
    if (planned_ != kUnlimited) line += cat("/", planned_);
    line += strprintf("  loss %.4f  accuracy %.1f%%  %s samples/s", loss_ / samples_,
                      100.0 * static_cast<double>(correct_) / samples_, human_rate(rate).c_str());
    double eta = planned_ != kUnlimited && steps_ > 0
                     ? static_cast<double>(planned_ - step) * (time_ / steps_)
                     : std::numeric_limits<double>::infinity();
    eta = std::min(eta, remaining_budget);
    if (std::isfinite(eta)) line += "  ETA " + human_duration(eta);
    emit(line);
    last_ = now;
    loss_ = 0;
    correct_ = 0;
    samples_ = 0;
    time_ = 0;
    steps_ = 0;
  }

  /// A line that stays (evaluations, the end of the run).
  void note(const std::string& line) {
    clear();
    log::info(line);
  }

 private:
  static std::string human_rate(double rate) {
    return rate >= 1e4 ? strprintf("%.1fk", rate / 1e3) : strprintf("%.0f", rate);
  }
  void emit(const std::string& line) {
    if (live_) {
      std::fprintf(stderr, "\r%s: %s\033[K", log::program().c_str(), line.c_str());
      std::fflush(stderr);
      drawn_ = true;
    } else {
      log::info(line);
    }
  }
  void clear() {
    if (drawn_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
      drawn_ = false;
    }
  }
  std::int64_t planned_, steps_per_epoch_, every_;
  bool live_;
  bool drawn_ = false;
  Clock::time_point last_ = Clock::now();
  double loss_ = 0, time_ = 0;
  std::int64_t correct_ = 0, samples_ = 0, steps_ = 0;
};

}  // namespace

int run_train_fmb(const TrainOptions& options) {
  validate(options);
  const auto started = Clock::now();
  if (comm::launched_by_mpi()) {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size != nullptr && std::atoi(size) > 1) {
      usage_error(
          "mb-train-fmb runs as a single process in this version of mbkit; "
          "run it without mpirun (distributed training is the next issue)");
    }
  }
  StopRequest stop;
  auto backend = nn::make_backend(options.device, options.threads);

  data::LoaderOptions train_options;
  train_options.path = options.data;
  train_options.split = "train";
  train_options.batch_size = options.batch_size;
  train_options.seed = options.seed;
  train_options.drop_last = options.drop_last;
  train_options.augment = options.augment;
  data::DataLoader train_loader(train_options);
  const data::DatasetInfo& info = train_loader.info();
  const data::ImageShape shape = train_loader.shape();

  // Evaluations read the test split (of --test-data when given), in file order.
  std::optional<data::DataLoader> test_loader;
  {
    data::LoaderOptions test_options;
    test_options.path = options.test_data.empty() ? options.data : options.test_data;
    test_options.split = "test";
    test_options.batch_size = options.eval_batch_size;
    test_options.shuffle = false;
    test_options.limit = static_cast<std::uint64_t>(options.test_size);
    test_options.prefetch = 1;
    if (data::DatasetFile::open(test_options.path).info().split(data::kTest).count > 0) {
      test_loader.emplace(test_options);
      if (test_loader->shape() != shape || test_loader->info().num_classes != info.num_classes) {
        data_error(cat(test_options.path, ": test images are ", test_loader->shape().text(), " in ",
                       test_loader->info().num_classes, " classes, the training data's ",
                       shape.text(), " in ", info.num_classes));
      }
    }
  }

  nn::Graph graph = models::build_model(options.model, {shape.channels, shape.height, shape.width},
                                        info.num_classes);
  nn::Network net(std::move(graph), *backend);
  net.initialize(options.seed);
  const nn::Graph& model = net.graph();
  auto optimizer = optim::make_optimizer(options.optimizer, net.parameters().size());

  const std::int64_t steps_per_epoch = train_loader.batches_per_epoch();
  std::int64_t planned = kUnlimited;
  if (options.steps > 0) planned = options.steps;
  if (options.epochs > 0) {
    planned = std::min(planned, static_cast<std::int64_t>(std::ceil(
                                    options.epochs * static_cast<double>(steps_per_epoch))));
  }
  optim::ScheduleConfig schedule_config = options.schedule;
  schedule_config.warmup_steps = static_cast<std::int64_t>(
      std::llround(options.warmup_epochs * static_cast<double>(steps_per_epoch)));
  if (schedule_config.kind == "linear" && schedule_config.total_steps == 0 &&
      planned != kUnlimited) {
    schedule_config.total_steps = planned;
  }
  const optim::LearningRateSchedule schedule(schedule_config);

  // Resume: the model, optimizer and position of a checkpoint.
  std::int64_t step = 0;
  double elapsed_before = 0;
  std::string resume_path = options.resume == "auto"
                                ? (fs::exists(options.checkpoint) ? options.checkpoint : "")
                                : options.resume;
  // A finished run's checkpoint is its result: replacing it takes a decision.
  if (!options.checkpoint.empty() && fs::exists(options.checkpoint) && !options.force &&
      resume_path != options.checkpoint) {
    fail(cat(options.checkpoint,
             " exists; use --resume auto to continue from it or --force to "
             "replace it"));
  }
  if (!resume_path.empty()) {
    const Checkpoint checkpoint = mbkit::train::read_checkpoint(resume_path);
    const std::vector<std::int64_t> input = {shape.channels, shape.height, shape.width};
    if (checkpoint.model != options.model.name ||
        checkpoint.model_config != options.model.to_map() || checkpoint.input_shape != input ||
        checkpoint.num_classes != info.num_classes) {
      const auto saved = models::ModelConfig::from_map(checkpoint.model, checkpoint.model_config);
      usage_error(cat(resume_path, " holds ", describe_model(saved), " for ",
                      checkpoint.input_shape.size() == 3
                          ? cat(checkpoint.input_shape[0], "x", checkpoint.input_shape[1], "x",
                                checkpoint.input_shape[2])
                          : "?",
                      " inputs and ", checkpoint.num_classes, " classes; this run is ",
                      describe_model(options.model), " for ", shape.text(), " and ",
                      info.num_classes));
    }
    if (checkpoint.optimizer != options.optimizer.name) {
      usage_error(cat(resume_path, " was trained with --optimizer ", checkpoint.optimizer,
                      "; this run asks for ", options.optimizer.name));
    }
    from_arrays(checkpoint.params, model.parameters(), net.parameters(), resume_path);
    from_arrays(checkpoint.state, model.state_arrays(), net.state(), resume_path);
    auto slots = optimizer->state();
    if (checkpoint.optimizer_state.size() != slots.size()) {
      data_error(cat(resume_path, ": optimizer state has ", checkpoint.optimizer_state.size(),
                     " arrays, ", options.optimizer.name, " needs ", slots.size()));
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto& saved = checkpoint.optimizer_state[i];
      if (saved.name != slots[i].first || saved.values.size() != slots[i].second->size()) {
        data_error(cat(resume_path, ": optimizer state ", saved.name, " does not fit this model"));
      }
      *slots[i].second = saved.values;
    }
    optimizer->set_steps(checkpoint.optimizer_steps);
    step = checkpoint.step;
    elapsed_before = checkpoint.elapsed;
    train_loader.seek(checkpoint.epoch, checkpoint.batch_in_epoch);
    log::info(cat("resuming from ", resume_path, " at step ", step));
  }

  std::optional<mbkit::train::MetricLog> metric_log;
  if (!options.log.empty()) {
    if (!resume_path.empty() && fs::exists(options.log)) {
      metric_log.emplace(
          mbkit::train::MetricLog::append(options.log, step, options.flush_interval));
    } else {
      mbkit::train::RunInfo run;
      run.tool = "mb-train-fmb";
      run.version = cat(MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, ")");
      run.command_line = cli::recorded_command_line();
      run.config_json = config_json(options, model, planned);
      run.seed = options.seed;
      run.host = comm::host_name();
      run.start_time = utc_now();
      run.model = options.model.name;
      run.dataset = info.name;
      metric_log.emplace(
          mbkit::train::MetricLog::create(options.log, run, options.force, options.flush_interval));
    }
  }

  // The parameter table.
  log::info(cat("mbkit ", MBKIT_VERSION, " (", MBKIT_GIT_COMMIT, "), ", backend->description()));
  auto row = [](const char* key, const std::string& value) {
    log::info(strprintf("  %-10s %s", key, value.c_str()));
  };
  row("data", cat(options.data, ": ", info.name, ", ", train_loader.rows(), " training images of ",
                  shape.text(), ", ", info.num_classes, " classes",
                  options.augment ? ", augmented (crop, flip)" : ""));
  row("test", test_loader
                  ? cat(test_loader->options().path, ": ", test_loader->rows(), " images",
                        options.eval_every > 0 ? cat(", every ", options.eval_every, " steps")
                                               : ", at the end")
                  : "none (no test split)");
  row("model", cat(describe_model(options.model), ": ",
                   with_commas(static_cast<std::int64_t>(model.parameter_count())), " parameters"));
  row("optimizer", describe_optimizer(options.optimizer));
  row("schedule", describe_schedule(schedule_config));
  row("batch", cat(options.batch_size, " per step, ", steps_per_epoch, " steps per epoch"));
  std::string length =
      planned == kUnlimited ? "until the time budget" : cat(with_commas(planned), " steps");
  if (options.epochs > 0) length += cat(" (", options.epochs, " epochs)");
  if (options.time_budget > 0) length += cat(", at most ", human_duration(options.time_budget));
  row("length", length);
  row("seed", cat(options.seed));
  if (metric_log) row("log", options.log);
  if (!options.checkpoint.empty()) {
    row("checkpoint",
        cat(options.checkpoint,
            options.checkpoint_every > 0 ? cat(" every ", options.checkpoint_every, " steps") : "",
            " and at the end"));
  }
  log::verbose("layers:\n" + model.summary());

  auto save_checkpoint = [&](double elapsed) {
    Checkpoint checkpoint;
    checkpoint.model = options.model.name;
    checkpoint.model_config = options.model.to_map();
    checkpoint.input_shape = {shape.channels, shape.height, shape.width};
    checkpoint.num_classes = info.num_classes;
    checkpoint.params = to_arrays(model.parameters(), net.parameters());
    checkpoint.state = to_arrays(model.state_arrays(), net.state());
    checkpoint.optimizer = options.optimizer.name;
    checkpoint.optimizer_config = optimizer_map(options.optimizer);
    checkpoint.optimizer_steps = optimizer->steps();
    for (const auto& [name, values] : optimizer->state()) {
      checkpoint.optimizer_state.push_back(
          {name, {static_cast<std::int64_t>(values->size())}, *values});
    }
    checkpoint.step = step;
    checkpoint.epoch = step / steps_per_epoch;
    checkpoint.batch_in_epoch = step % steps_per_epoch;
    checkpoint.seed = options.seed;
    checkpoint.elapsed = elapsed;
    checkpoint.dataset = info.name;
    checkpoint.mean = info.mean;
    checkpoint.std = info.std;
    checkpoint.config_json = config_json(options, model, planned);
    checkpoint.created_by = cat("mb-train-fmb ", MBKIT_VERSION);
    mbkit::train::write_checkpoint(options.checkpoint, checkpoint);
  };

  Progress progress(planned, steps_per_epoch, options.print_every);
  auto run_evaluation = [&](double elapsed) {
    if (!test_loader) return;
    const auto result = mbkit::train::evaluate(net, *test_loader);
    progress.note(strprintf(
        "eval at step %lld (epoch %.2f): loss %.4f, accuracy %.2f%% on %lld images",
        static_cast<long long>(step), static_cast<double>(step) / steps_per_epoch, result.loss(),
        100.0 * result.accuracy(), static_cast<long long>(result.samples)));
    if (metric_log) {
      metric_log->add(mbkit::train::EvalRecord{step, elapsed,
                                               static_cast<double>(step) / steps_per_epoch,
                                               result.loss(), result.accuracy(), result.samples});
    }
  };

  const auto budget =
      options.time_budget > 0 ? options.time_budget : std::numeric_limits<double>::infinity();
  int consecutive_skips = 0;
  std::int64_t skipped = 0;
  bool evaluated_now = false;
  while (step < planned && !stop.requested() && seconds_since(started) < budget) {
    const auto step_start = Clock::now();
    const data::Batch& batch = train_loader.next();
    const double epoch = static_cast<double>(step) / steps_per_epoch;
    const std::uint64_t step_seed =
        Rng(options.seed, 0x57e9 + static_cast<std::uint64_t>(step)).next_u64();
    const auto outcome =
        net.forward(batch.images.data(), batch.labels.data(), batch.size, true, step_seed);
    const double loss = outcome.loss_sum / batch.size;
    const double lr = schedule.at(step, epoch);
    bool diverged = false;
    if (std::isfinite(loss)) {
      net.backward(1.0 / batch.size);
      optimizer->step(net.parameters(), net.gradients(), lr);
      consecutive_skips = 0;
    } else if (options.nan_policy == "skip") {
      ++skipped;
      diverged = ++consecutive_skips > kMaxConsecutiveSkips;
      if (!diverged)
        log::warn(cat("non-finite loss at step ", step, "; update skipped (--nan-policy skip)"));
    } else {
      diverged = true;
    }
    ++step;
    const double step_time = seconds_since(step_start);
    const double elapsed = elapsed_before + seconds_since(started);
    if (metric_log) {
      metric_log->add(mbkit::train::StepRecord{step, elapsed,
                                               static_cast<double>(step) / steps_per_epoch, loss,
                                               static_cast<double>(outcome.correct) / batch.size,
                                               lr, batch.size, step_time, batch.size / step_time});
      metric_log->flush_if_due();
    }
    if (diverged) {
      if (metric_log) metric_log->close();
      const std::string where =
          cat("non-finite loss at step ", step - 1, " (epoch ", strprintf("%.2f", epoch), ")");
      throw Error(options.nan_policy == "skip"
                      ? cat(where, ", ", consecutive_skips, " steps in a row: --nan-policy skip ",
                            "gives up after ", kMaxConsecutiveSkips, "; lower --lr")
                      : cat(where, "; lower --lr, or --nan-policy skip to skip such steps"),
                  ExitCode::kDiverged);
    }
    progress.step(step, loss, outcome.correct, batch.size, step_time,
                  budget - seconds_since(started));
    evaluated_now = false;
    if (options.eval_every > 0 && step % options.eval_every == 0) {
      run_evaluation(elapsed);
      evaluated_now = true;
    }
    if (options.checkpoint_every > 0 && step % options.checkpoint_every == 0)
      save_checkpoint(elapsed);
  }

  const double elapsed = elapsed_before + seconds_since(started);
  if (stop.requested()) {
    const int signal_number = stop.signal();
    const char* name = signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
    if (metric_log) metric_log->close();
    if (!options.checkpoint.empty()) {
      save_checkpoint(elapsed);
      progress.note(cat("stopped by ", name, " at step ", step, "; state saved in ",
                        options.checkpoint, " (--resume ", options.checkpoint, " continues)"));
      return static_cast<int>(ExitCode::kInterrupted);
    }
    progress.note(
        cat("stopped by ", name, " at step ", step, "; no --checkpoint, state not saved"));
    return 128 + signal_number;
  }
  if (!evaluated_now) run_evaluation(elapsed);
  if (!options.checkpoint.empty()) save_checkpoint(elapsed);
  if (metric_log) metric_log->close();
  progress.note(cat("done: ", step, " steps (",
                    strprintf("%.2f", static_cast<double>(step) / steps_per_epoch), " epochs) in ",
                    human_duration(seconds_since(started)),
                    skipped > 0 ? cat(", ", skipped, " steps skipped for non-finite loss") : ""));
  return 0;
}

}  // namespace mbkit::tools::train
