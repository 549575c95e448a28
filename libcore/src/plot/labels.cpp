#include "mbkit/plot/labels.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

// Fields that name what an experiment varies, most telling first.
const std::vector<std::string>& known_fields() {
  static const std::vector<std::string> kFields = {
      "tool",
      "comm",
      "async",
      "async_min_grads",
      // The straggler methods that drop gradients (mb-train-fmb(1)).
      "backup_workers",
      "k_sync",
      "gradient_coding",
      "k_batch_sync",
      "drop_compute",
      "delayed_gradients",
      "local_steps",
      // The asynchronous server's (async_rule.hpp).
      "k_async",
      "staleness_bound",
      "batch_size",
      "time_limit",
      "partitions",
      "workers",
      "world_size",
      "induce",
      "slowdown",
      "cpu_quota",
      "cpu_quota_tick",
      "model",
      "dataset",
      "optimizer.name",
      "lr",
      "lr_schedule",
      "weight_decay",
      "seed",
      "clock",
      // mb-train-dbsl's plan.
      "dbsl.small_workers",
      "dbsl.extra_time",
      "dbsl.update_factor",
      "dbsl.sync",
  };
  return kFields;
}

// Fields a run records only when it uses them (a straggler method): one that some runs have and
// others lack names what sets them apart, whatever its value.
const std::set<std::string>& presence_fields() {
  static const std::set<std::string> kFields = {
      "backup_workers", "k_sync", "gradient_coding", "k_batch_sync", "drop_compute", "k_async",
      "staleness_bound", "delayed_gradients", "local_steps",
      // Recorded where given, as the methods are: --cpu-quota, --cpu-quota-tick.
      "cpu_quota", "cpu_quota_tick"};
  return kFields;
}

// Fields that follow from others or say nothing about the experiment.
const std::set<std::string>& derived_fields() {
  static const std::set<std::string> kFields = {
      "global_batch_size", "parameters", "planned_steps", "induce_spec", "command_line", "version",
      "host", "start_time", "format", "format_version", "delayed_gradients_option",
      // What mb-train-dbsl's plan derives from its options.
      "dbsl.small", "dbsl.batch", "dbsl.samples", "dbsl.factor", "dbsl.predicted_round_time",
      "dbsl.base_time", "dbsl.target_time"};
  return kFields;
}

std::string value_of(const RunDescription& run, const std::string& key) {
  const auto it = run.fields.find(key);
  return it == run.fields.end() ? std::string() : it->second;
}

bool unique(const std::vector<std::string>& labels) {
  std::set<std::string> seen(labels.begin(), labels.end());
  return seen.size() == labels.size();
}

std::string last_component(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

std::string file_stem(const std::string& path) {
  std::string name = fs::base_name(path);
  if (ends_with(name, ".h5")) name.resize(name.size() - 3);
  return name;
}

std::string describe_field(const std::string& key, const std::string& value) {
  if (key == "tool") {
    std::string tool = value;
    if (starts_with(tool, "mb-train-")) tool = tool.substr(9);
    std::transform(tool.begin(), tool.end(), tool.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return tool.empty() ? "no tool" : tool;
  }
  if (key == "comm") return value.empty() ? "local" : value;
  if (key == "async") return value == "true" ? "async" : "sync";
  if (key == "async_min_grads") return cat(value, " grads/update");
  if (key == "backup_workers") return cat(value, " backup workers");
  if (key == "k_sync") return cat("K-sync ", value);
  if (key == "k_async") return cat("K-async ", value);
  if (key == "staleness_bound") return cat("SSP s=", value);
  if (key == "gradient_coding") return cat("gradient coding s=", value);
  if (key == "k_batch_sync") return cat("K-batch-sync ", value);
  if (key == "drop_compute") return cat("DropCompute ", value);
  if (key == "delayed_gradients") return cat("AMB-DG tau=", value);
  if (key == "local_steps") {
    return value == "adacomm" ? std::string("local SGD, AdaComm") : cat("local SGD tau=", value);
  }
  if (key == "batch_size") return cat("batch ", value);
  if (key == "time_limit") {
    // A limit chosen at start (auto) has every digit of a double: three are enough to tell.
    char* end = nullptr;
    const double seconds = std::strtod(value.c_str(), &end);
    return end != value.c_str() && *end == '\0' ? cat("T=", strprintf("%.3g", seconds), " s")
                                                : cat("T=", value, " s");
  }
  if (key == "partitions") return cat("P=", value);
  if (key == "workers") return cat(value, value == "1" ? " worker" : " workers");
  if (key == "world_size") return cat(value, value == "1" ? " process" : " processes");
  if (key == "induce") return value.empty() ? "no stragglers" : value;
  if (key == "slowdown") return value.empty() ? "no slowdown" : cat("slowdown ", value);
  if (key == "cpu_quota") return cat("CPU quota ", value);
  if (key == "cpu_quota_tick") return cat("quota checked at a tick of ", value, " s");
  if (key == "model" || key == "dataset" || key == "optimizer.name") {
    return value.empty() ? cat("no ", last_component(key)) : value;
  }
  if (key == "lr") return cat("lr=", value);
  if (key == "lr_schedule") return cat(value, " lr");
  if (key == "seed") return cat("seed ", value);
  if (key == "clock") return value.empty() ? "wall clock" : cat(value, " clock");
  return cat(last_component(key), "=", value);
}

namespace {

// The fields not the same in every run (a missing field differs from a present one), not
// ignored and not derived: the known ones in their order, then the others by name.
struct Differences {
  std::vector<std::string> known;
  std::vector<std::string> others;
};

Differences differing_fields(const std::vector<RunDescription>& runs,
                             const std::vector<std::string>& ignore) {
  const std::set<std::string> ignored(ignore.begin(), ignore.end());
  std::set<std::string> keys;
  for (const auto& run : runs) {
    for (const auto& [key, value] : run.fields) keys.insert(key);
  }
  // A field differs when two runs that have it hold different values: one that only some runs
  // have (an AMB run's time limit beside FMB runs) says no more than the field that made them
  // different (the tool).
  std::set<std::string> differing;
  for (const auto& key : keys) {
    if (ignored.contains(key) || derived_fields().contains(key)) continue;
    std::set<std::string> values;
    std::size_t present = 0;
    for (const auto& run : runs) {
      if (const auto it = run.fields.find(key); it != run.fields.end()) {
        values.insert(it->second);
        ++present;
      }
    }
    if (values.size() > 1 || (presence_fields().contains(key) && present < runs.size())) {
      differing.insert(key);
    }
  }
  if (differing.contains("workers")) differing.erase("world_size");
  Differences result;
  for (const auto& key : known_fields()) {
    if (differing.contains(key)) result.known.push_back(key);
  }
  for (const auto& key : differing) {
    if (std::find(known_fields().begin(), known_fields().end(), key) == known_fields().end()) {
      result.others.push_back(key);
    }
  }
  return result;
}

// Each run's parts for `fields`, joined; a run without a field (an FMB run has no time limit)
// shows nothing for it. `fallback[i]` names a run left with nothing to show.
std::vector<std::string> describe_runs(const std::vector<RunDescription>& runs,
                                       const std::vector<std::string>& fields,
                                       const std::vector<std::string>& fallback) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> parts;
    for (const auto& key : fields) {
      if (!runs[i].fields.contains(key)) continue;
      // An AMB worker computes what it can of its batch in the time limit: the batch is the
      // most it computes in a step, not what it computed.
      if (key == "batch_size" && runs[i].fields.contains("partitions")) {
        parts.push_back(cat("batch up to ", value_of(runs[i], key)));
      } else {
        parts.push_back(describe_field(key, value_of(runs[i], key)));
      }
    }
    labels.push_back(parts.empty() ? fallback[i] : join(parts, ", "));
  }
  return labels;
}

}  // namespace

std::vector<std::string> derive_labels(const std::vector<RunDescription>& runs,
                                       const std::vector<std::string>& ignore) {
  std::vector<std::string> stems;
  for (const auto& run : runs) stems.push_back(file_stem(run.file));
  if (!unique(stems)) {
    stems.clear();
    for (const auto& run : runs) stems.push_back(run.file);
  }
  if (runs.size() <= 1) return stems;

  const Differences differences = differing_fields(runs, ignore);
  std::vector<std::string> chosen = differences.known;
  std::vector<std::string> labels = describe_runs(runs, chosen, stems);
  for (std::size_t i = 0; i < differences.others.size() && (chosen.empty() || !unique(labels));
       ++i) {
    chosen.push_back(differences.others[i]);
    labels = describe_runs(runs, chosen, stems);
  }
  if (chosen.empty()) return stems;
  if (!unique(labels)) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (labels[i] != stems[i]) labels[i] += " (" + stems[i] + ")";
    }
  }
  return labels;
}

std::vector<std::string> group_labels(const std::vector<RunDescription>& runs,
                                      const std::vector<std::string>& ignore) {
  if (runs.empty()) return {};
  const Differences differences = differing_fields(runs, ignore);
  std::vector<std::string> fields = differences.known;
  fields.insert(fields.end(), differences.others.begin(), differences.others.end());
  return describe_runs(runs, fields, std::vector<std::string>(runs.size()));
}

}  // namespace mbkit::plot
