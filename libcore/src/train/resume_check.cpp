#include "mbkit/train/resume_check.hpp"

#include <optional>
#include <string_view>
#include <vector>

#include "mbkit/plot/config.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

// A recorded configuration key and the option that sets it. `absent`: what a missing key means
// (keys left out at their defaults); empty when the key is always written, so that a checkpoint
// older than the key is not compared on it.
struct TrainingKey {
  const char* key;
  const char* option;
  const char* absent;
};

// What changes the bits of the training; not what a resumed run may change on purpose (its
// length, evaluations, logging, the workers and their exchange, the device).
constexpr TrainingKey kTrainingKeys[] = {
    {"seed", "--seed", ""},
    {"lr", "--lr", ""},
    {"lr_schedule", "--lr-schedule", ""},
    {"decay_steps", "--decay-steps", ""},
    {"decay_rate", "--decay-rate", ""},
    {"staircase", "--staircase", ""},
    {"milestones", "--milestones", ""},
    {"gamma", "--gamma", ""},
    {"end_lr", "--end-lr", ""},
    {"lr_every", "--lr-every", ""},
    {"lr_frac", "--lr-frac", ""},
    {"warmup_epochs", "--warmup-epochs", ""},
    {"lr_scaling", "--lr-scaling", "none"},
    {"lr_base_batch", "--lr-base-batch", "0"},
    {"optimizer.weight_decay", "--weight-decay", ""},
    {"optimizer.momentum", "--momentum", ""},
    {"optimizer.nesterov", "--nesterov", ""},
    {"optimizer.rmsprop_decay", "--rmsprop-decay", ""},
    {"optimizer.rmsprop_momentum", "--momentum", ""},
    {"optimizer.rmsprop_epsilon", "--epsilon", ""},
    {"optimizer.adam_beta1", "--beta1", ""},
    {"optimizer.adam_beta2", "--beta2", ""},
    {"optimizer.adam_epsilon", "--epsilon", ""},
    {"weight_decay_on", "--weight-decay-on", "mean"},
    {"augment_list", "--augment", "none"},
    {"drop_last", "--drop-last", ""},
    {"threads", "--threads", "0"},
    {"compress", "--compress", "none"},
    {"backup_workers", "--backup-workers", "0"},
    {"k_sync", "--k-sync", "0"},
    {"gradient_coding", "--gradient-coding", "0"},
    {"local_steps", "--local-steps", "1"},
    {"k_batch_sync", "--k-batch-sync", "0"},
    {"drop_compute", "--drop-compute", "none"},
    {"micro_batches", "--micro-batches", "none"},
    {"delayed_gradients", "--delayed-gradients", "0"},
    {"partitions", "--partitions", ""},
    {"decay_per_micro_batch", "--decay-per-micro-batch", ""},
    {"dbsl.base_batch", "--base-batch", ""},
    {"dbsl.extra_time", "--extra-time", ""},
    {"dbsl.update_factor", "--update-factor", ""},
    {"trace_scale", "--trace-scale", "1"},
};

std::optional<std::string> value_of(const plot::FlatConfig& config, const TrainingKey& key) {
  if (const auto found = config.find(key.key); found != config.end()) return found->second;
  if (*key.absent != '\0') return std::string(key.absent);
  return std::nullopt;
}

// The batch option as given: --global-batch-size G (recorded with every worker's share) or
// --batch-size B per worker.
std::optional<std::pair<std::string, std::string>> batch_option(const plot::FlatConfig& config) {
  const bool global = config.count("batch_sizes") > 0;
  const auto found = config.find(global ? "global_batch_size" : "batch_size");
  if (found == config.end()) return std::nullopt;
  return std::pair<std::string, std::string>(global ? "--global-batch-size" : "--batch-size",
                                             found->second);
}

std::string refusal(const std::string& option_now, const std::string& now, const std::string& path,
                    const std::string& option_then, const std::string& then) {
  return cat(option_now, " ", now, ": ", path, " was trained with ", option_then, " ", then);
}

// The message model as given (shown) and its values (compared): a --comm-model file's are
// recorded beside its name, so that a file and the same numbers inline are one model. None
// where it was measured at start.
std::optional<std::pair<std::string, std::string>> comm_model_of(const plot::FlatConfig& config) {
  const auto given = config.find("comm_model");
  if (given == config.end() || given->second.empty()) return std::nullopt;
  if (const auto values = config.find("comm_model_values"); values != config.end()) {
    return std::pair(cat(given->second, " (", values->second, ")"), values->second);
  }
  if (given->second.find(',') == std::string::npos) return std::pair(given->second, given->second);
  return std::pair(given->second, parse_comm_model(given->second)->spec());
}

std::string numbers(const std::vector<double>& values) {
  std::vector<std::string> texts;
  for (const double value : values) texts.push_back(shortest_decimal(value));
  return join(texts, ",");
}

}  // namespace

std::string changed_training(const Checkpoint& checkpoint, const std::string& path,
                             std::string_view current, const data::DatasetInfo& data) {
  if (checkpoint.config_json.empty()) return {};
  const plot::FlatConfig then =
      plot::flatten_json_object(checkpoint.config_json, cat(path, ": config"));
  const plot::FlatConfig now = plot::flatten_json_object(current, "this run's configuration");
  const auto batch_then = batch_option(then);
  const auto batch_now = batch_option(now);
  if (batch_then && batch_now && batch_then != batch_now) {
    return refusal(batch_now->first, batch_now->second, path, batch_then->first,
                   batch_then->second);
  }
  // A replayed trace is its values, whatever its file is called now (induce_trace.sha256).
  const auto trace_of = [](const plot::FlatConfig& config) {
    const auto found = config.find("induce_trace.sha256");
    return found == config.end() ? std::string() : found->second;
  };
  if (trace_of(then) != trace_of(now)) {
    const auto induce = [](const plot::FlatConfig& config) {
      const auto found = config.find("induce");
      return found == config.end() || found->second.empty() ? std::string("none") : found->second;
    };
    const auto digest = [](const std::string& sha) {
      return sha.empty() ? std::string("no trace") : cat("values sha256 ", sha.substr(0, 12));
    };
    return cat("--induce ", induce(now), " (", digest(trace_of(now)), "): ", path,
               " was trained with --induce ", induce(then), " (", digest(trace_of(then)), ")");
  }
  // --emulate's workers compute on one-thread networks whatever --threads spreads them over:
  // the thread count changes no bit when both runs are emulated.
  const bool both_emulated = then.count("emulate") > 0 && now.count("emulate") > 0;
  for (const TrainingKey& key : kTrainingKeys) {
    if (both_emulated && std::string_view(key.key) == "threads") continue;
    const auto value_then = value_of(then, key);
    const auto value_now = value_of(now, key);
    if (value_then && value_now && *value_then != *value_now) {
      return refusal(key.option, *value_now, path, key.option, *value_then);
    }
  }
  const auto model_then = comm_model_of(then);
  const auto model_now = comm_model_of(now);
  if (model_then && model_now && model_then->second != model_now->second) {
    return refusal("--comm-model", model_now->first, path, "--comm-model", model_then->first);
  }
  // The dataset: a file of the same name and shape may hold other images. Its pixel statistics
  // are recorded in both (a shard records its source's, so they hold across worker counts).
  if (checkpoint.dataset != data.name || checkpoint.mean != data.mean ||
      checkpoint.std != data.std) {
    const auto data_then = then.find("data");
    const auto data_now = now.find("data");
    return cat(
        "--data ", data_now != now.end() ? data_now->second : "", ": not the dataset ", path,
        " was trained on", data_then != then.end() ? cat(" (", data_then->second, ")") : "", ": ",
        checkpoint.dataset != data.name
            ? cat("its name is ", data.name, ", not ", checkpoint.dataset)
            : cat("its pixel mean and std are ", numbers(data.mean), " and ", numbers(data.std),
                  ", not ", numbers(checkpoint.mean), " and ", numbers(checkpoint.std)));
  }
  return {};
}

void require_same_training(const Checkpoint& checkpoint, const std::string& path,
                           std::string_view current, const data::DatasetInfo& data,
                           bool resume_anyway) {
  const std::string change = changed_training(checkpoint, path, current, data);
  if (change.empty()) return;
  if (resume_anyway) {
    log::warn(cat("--resume-anyway: ", change,
                  "; the result will differ from an uninterrupted "
                  "run's"));
    return;
  }
  usage_error(cat(change,
                  "; resume as it was trained, or add --resume-anyway to continue all "
                  "the same (the result will then differ from an uninterrupted run's)"));
}

}  // namespace mbkit::train
