// Checkpoints: root attributes for everything that is not an array, and one group per kind of
// array (/params, /state, /optimizer) holding a float32 dataset per array and the array order.
#include "mbkit/train/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <span>

#include "mbkit/io/format.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::train {
namespace {

constexpr const char* kParamsGroup = "params";
constexpr const char* kStateGroup = "state";
constexpr const char* kOptimizerGroup = "optimizer";
constexpr const char* kDelayedGroup = "delayed_parameters";
// The group attribute listing the arrays in order (member_names() would sort them).
constexpr const char* kOrderAttribute = "names";
// About 1 MiB per chunk: each chunk carries a Fletcher-32 checksum checked on every read.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

bool is_valid_array_name(const std::string& name) {
  return !name.empty() && name != "." && name.find('/') == std::string::npos;
}

// The number of values of an array of this shape, or -1 when a dimension is negative or the
// product overflows.
std::int64_t value_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    if (extent < 0) return -1;
    if (extent != 0 && count > std::numeric_limits<std::int64_t>::max() / extent) return -1;
    count *= extent;
  }
  return count;
}

// "(16, 3, 3, 3)", for messages.
std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> extents;
  for (const std::int64_t extent : shape) extents.push_back(std::to_string(extent));
  return "(" + join(extents, ", ") + ")";
}

// Whole rows per chunk; contiguous for scalars and empty arrays, which cannot be chunked.
io::StorageOptions array_storage(const std::vector<hsize_t>& dims, std::int64_t count) {
  io::StorageOptions storage;
  if (dims.empty() || count == 0) return storage;
  const std::size_t row_bytes = static_cast<std::size_t>(count) / dims[0] * sizeof(float);
  storage.chunk = dims;
  storage.chunk[0] = std::clamp<hsize_t>(kChunkBytes / row_bytes, 1, dims[0]);
  storage.fletcher32 = true;
  return storage;
}

// `path` is the checkpoint's final name, for messages (the file is its temporary).
void write_arrays(io::File& file, const std::string& path, const char* group_name,
                  const std::vector<NamedArray>& arrays) {
  io::Group group = file.create_group(group_name);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const NamedArray& array : arrays) {
    const std::string where = cat("checkpoint ", path, ": /", group_name, "/", array.name);
    MBKIT_CHECK(is_valid_array_name(array.name), where, ": invalid array name");
    MBKIT_CHECK(seen.insert(array.name).second, where, ": two arrays of this name");
    const std::int64_t count = value_count(array.shape);
    MBKIT_CHECK(count >= 0, where, ": invalid shape ", shape_text(array.shape));
    MBKIT_CHECK(static_cast<std::uint64_t>(count) == array.values.size(), where, ": ",
                array.values.size(), " values for shape ", shape_text(array.shape));
    const std::vector<hsize_t> dims(array.shape.begin(), array.shape.end());
    io::Dataset dataset = group.create_dataset<float>(array.name, dims, array_storage(dims, count));
    if (count > 0) dataset.write(std::span<const float>(array.values));
    names.push_back(array.name);
  }
  group.set_attribute(kOrderAttribute, names);
}

std::vector<NamedArray> read_arrays(const io::File& file, const char* group_name) {
  const io::Group group = file.open_group(group_name);
  const auto names = group.string_array_attribute(kOrderAttribute);
  if (std::set<std::string>(names.begin(), names.end()).size() != names.size()) {
    data_error(
        cat(group.describe(), ": its '", kOrderAttribute, "' attribute lists an array twice"));
  }
  const auto members = group.member_names();
  if (members.size() != names.size()) {
    data_error(cat(group.describe(), ": holds ", members.size(), " arrays but its '",
                   kOrderAttribute, "' attribute lists ", names.size()));
  }
  std::vector<NamedArray> arrays;
  for (const std::string& name : names) {
    const io::Dataset dataset = group.open_dataset(name);
    if (dataset.type_class() != H5T_FLOAT) {
      data_error(cat(dataset.describe(), ": not a floating-point array"));
    }
    NamedArray array;
    array.name = name;
    for (const hsize_t extent : dataset.dims()) {
      array.shape.push_back(static_cast<std::int64_t>(extent));
    }
    array.values = dataset.read<float>();
    const std::int64_t count = value_count(array.shape);
    if (count < 0 || static_cast<std::uint64_t>(count) != array.values.size()) {
      data_error(cat(dataset.describe(), ": ", array.values.size(), " values for shape ",
                     shape_text(array.shape)));
    }
    arrays.push_back(std::move(array));
  }
  return arrays;
}

// A map as two string-array attributes of equal length, NAME_keys and NAME_values.
void write_map(io::File& file, const std::string& name,
               const std::map<std::string, std::string>& map) {
  std::vector<std::string> keys, values;
  for (const auto& [key, value] : map) {
    keys.push_back(key);
    values.push_back(value);
  }
  file.set_attribute(name + "_keys", keys);
  file.set_attribute(name + "_values", values);
}

std::map<std::string, std::string> read_map(const io::File& file, const std::string& name) {
  const auto keys = file.string_array_attribute(name + "_keys");
  const auto values = file.string_array_attribute(name + "_values");
  if (keys.size() != values.size()) {
    data_error(cat(file.path(), ": ", name, "_keys has ", keys.size(), " entries but ", name,
                   "_values has ", values.size()));
  }
  std::map<std::string, std::string> map;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!map.emplace(keys[i], values[i]).second) {
      data_error(cat(file.path(), ": ", name, "_keys lists '", keys[i], "' twice"));
    }
  }
  return map;
}

}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  MBKIT_CHECK(checkpoint.mean.size() == checkpoint.std.size(), "checkpoint ", path, ": ",
              checkpoint.mean.size(), " means for ", checkpoint.std.size(), " deviations");
  fs::AtomicOutput output(path);
  // The checksummed format has no 64 KiB limit on attributes (configurations, long lists).
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kCheckpointFormat);
  file.set_attribute("format_version", kCheckpointFormatVersion);
  file.set_attribute("model", checkpoint.model);
  write_map(file, "model_config", checkpoint.model_config);
  file.set_attribute("input_shape", checkpoint.input_shape);
  file.set_attribute("num_classes", checkpoint.num_classes);
  file.set_attribute("optimizer", checkpoint.optimizer);
  write_map(file, "optimizer_config", checkpoint.optimizer_config);
  file.set_attribute("optimizer_steps", checkpoint.optimizer_steps);
  file.set_attribute("step", checkpoint.step);
  file.set_attribute("epoch", checkpoint.epoch);
  file.set_attribute("batch_in_epoch", checkpoint.batch_in_epoch);
  file.set_attribute("seed", checkpoint.seed);
  file.set_attribute("elapsed", checkpoint.elapsed);
  file.set_attribute("wall_elapsed", checkpoint.wall_elapsed);
  file.set_attribute("epoch_progress", checkpoint.epoch_progress);
  file.set_attribute("workers", checkpoint.workers);
  file.set_attribute("comm", checkpoint.comm);
  file.set_attribute("dataset", checkpoint.dataset);
  file.set_attribute("mean", checkpoint.mean);
  file.set_attribute("std", checkpoint.std);
  file.set_attribute("config", checkpoint.config_json);
  file.set_attribute("created_by", checkpoint.created_by);
  write_arrays(file, path, kParamsGroup, checkpoint.params);
  write_arrays(file, path, kStateGroup, checkpoint.state);
  write_arrays(file, path, kOptimizerGroup, checkpoint.optimizer_state);
  if (!checkpoint.delayed_parameters.empty()) {
    write_arrays(file, path, kDelayedGroup, checkpoint.delayed_parameters);
  }
  if (!checkpoint.cpu_quota_budgets.empty()) {
    file.set_attribute("cpu_quota_budgets", checkpoint.cpu_quota_budgets);
    if (checkpoint.cpu_quota_state_size != 3) {
      file.set_attribute("cpu_quota_state_size", checkpoint.cpu_quota_state_size);
    }
  }
  if (!checkpoint.delayed_timeline.empty()) {
    file.set_attribute("delayed_timeline", checkpoint.delayed_timeline);
  }
  file.close();
  output.commit();
}

namespace {

// A step, epoch or position: never negative in a file we wrote.
std::int64_t counter(const io::File& file, const char* name) {
  const std::int64_t value = file.int_attribute(name);
  if (value < 0) data_error(cat(file.path(), ": ", name, " is ", value, ", negative"));
  return value;
}

// A duration or a fractional epoch: finite and not negative.
double seconds(const io::File& file, const char* name) {
  const double value = file.double_attribute(name);
  if (!std::isfinite(value) || value < 0) {
    data_error(cat(file.path(), ": ", name, " is ", value, ", not a finite value >= 0"));
  }
  return value;
}

Checkpoint read_fields(const io::File& file) {
  const std::string& path = file.path();
  Checkpoint checkpoint;
  checkpoint.model = file.string_attribute("model");
  checkpoint.model_config = read_map(file, "model_config");
  checkpoint.input_shape = file.int_array_attribute("input_shape");
  if (value_count(checkpoint.input_shape) < 0) {
    data_error(cat(path, ": input_shape has a negative or too large extent"));
  }
  const std::int64_t num_classes = file.int_attribute("num_classes");
  if (num_classes < 0 || num_classes > std::numeric_limits<int>::max()) {
    data_error(cat(path, ": num_classes ", num_classes, " is out of range"));
  }
  checkpoint.num_classes = static_cast<int>(num_classes);
  checkpoint.optimizer = file.string_attribute("optimizer");
  checkpoint.optimizer_config = read_map(file, "optimizer_config");
  checkpoint.optimizer_steps = counter(file, "optimizer_steps");
  checkpoint.step = counter(file, "step");
  checkpoint.epoch = counter(file, "epoch");
  checkpoint.batch_in_epoch = counter(file, "batch_in_epoch");
  checkpoint.seed = file.uint_attribute("seed");
  checkpoint.elapsed = seconds(file, "elapsed");
  checkpoint.wall_elapsed =
      file.has_attribute("wall_elapsed") ? seconds(file, "wall_elapsed") : checkpoint.elapsed;
  // Absent in checkpoints of mbkit before distributed training: single-process runs.
  checkpoint.epoch_progress = file.has_attribute("epoch_progress")
                                  ? seconds(file, "epoch_progress")
                                  : static_cast<double>(checkpoint.epoch);
  checkpoint.workers = file.has_attribute("workers") ? file.int_attribute("workers") : 1;
  if (checkpoint.workers < 1) data_error(cat(path, ": workers ", checkpoint.workers, " < 1"));
  checkpoint.comm = file.has_attribute("comm") ? file.string_attribute("comm") : "local";
  checkpoint.dataset = file.string_attribute("dataset");
  checkpoint.mean = file.double_array_attribute("mean");
  checkpoint.std = file.double_array_attribute("std");
  if (checkpoint.mean.size() != checkpoint.std.size()) {
    data_error(cat(path, ": mean has ", checkpoint.mean.size(), " values but std has ",
                   checkpoint.std.size()));
  }
  checkpoint.config_json = file.string_attribute("config");
  checkpoint.created_by = file.string_attribute("created_by");
  checkpoint.params = read_arrays(file, kParamsGroup);
  checkpoint.state = read_arrays(file, kStateGroup);
  checkpoint.optimizer_state = read_arrays(file, kOptimizerGroup);
  if (file.has(kDelayedGroup)) checkpoint.delayed_parameters = read_arrays(file, kDelayedGroup);
  if (file.has_attribute("cpu_quota_budgets")) {
    checkpoint.cpu_quota_budgets = file.double_array_attribute("cpu_quota_budgets");
    if (file.has_attribute("cpu_quota_state_size")) {
      checkpoint.cpu_quota_state_size = file.int_attribute("cpu_quota_state_size");
      if (checkpoint.cpu_quota_state_size != 3 && checkpoint.cpu_quota_state_size != 5) {
        data_error(cat(path, ": its cpu_quota_state_size is ", checkpoint.cpu_quota_state_size,
                       ", not 3 or 5"));
      }
    }
    const auto entry = static_cast<std::size_t>(checkpoint.cpu_quota_state_size + 1);
    if (checkpoint.cpu_quota_budgets.size() % entry != 0) {
      data_error(cat(path, ": its cpu_quota_budgets holds ", checkpoint.cpu_quota_budgets.size(),
                     " values, not ", entry, " per worker (its rank and ",
                     checkpoint.cpu_quota_state_size, " of its state)"));
    }
  }
  if (file.has_attribute("delayed_timeline")) {
    checkpoint.delayed_timeline = file.double_array_attribute("delayed_timeline");
  }
  return checkpoint;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& path) {
  const io::File file = io::File::open(path);
  try {
    io::check_format(file, kCheckpointFormat, kCheckpointFormatVersion, "checkpoint");
    return read_fields(file);
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
}

void require_finite(const std::vector<NamedArray>& arrays, const std::string& path) {
  for (const NamedArray& array : arrays) {
    const auto bad = std::find_if(array.values.begin(), array.values.end(),
                                  [](float value) { return !std::isfinite(value); });
    if (bad != array.values.end()) {
      data_error(cat(path, ": array ", array.name, " holds ", *bad, " at index ",
                     bad - array.values.begin(), " (a diverged run or a damaged file)"));
    }
  }
}

std::vector<NamedArray> arrays_of(const std::vector<const nn::ParamSpec*>& specs,
                                  std::span<const float> buffer) {
  std::vector<NamedArray> arrays;
  for (const auto* spec : specs) {
    const auto begin = buffer.begin() + static_cast<std::ptrdiff_t>(spec->offset);
    arrays.push_back({spec->name, spec->shape, std::vector<float>(begin, begin + spec->size())});
  }
  return arrays;
}

void capture_model(Checkpoint& checkpoint, nn::Network& net, optim::Optimizer& optimizer,
                   const std::vector<std::vector<float>>& whole_optimizer_state) {
  nn::Backend& backend = net.backend();
  const auto to_host = [&](const nn::Buffer& buffer) {
    std::vector<float> values(buffer.size());
    backend.copy_to_host(buffer, 0, values);
    return values;
  };
  // The gradient tail is not part of the model: only the parameters' floats are read.
  checkpoint.params = arrays_of(net.graph().parameters(), to_host(net.parameter_buffer()));
  checkpoint.state = arrays_of(net.graph().state_arrays(), to_host(net.state_buffer()));
  checkpoint.optimizer_steps = optimizer.steps();
  checkpoint.optimizer_state.clear();
  std::size_t slot = 0;
  for (const auto& [name, values] : optimizer.state()) {
    std::vector<float> whole =
        whole_optimizer_state.empty() ? to_host(*values) : whole_optimizer_state.at(slot++);
    const auto size = static_cast<std::int64_t>(whole.size());
    checkpoint.optimizer_state.push_back({name, {size}, std::move(whole)});
  }
}

void restore_model(const Checkpoint& checkpoint, nn::Network& net, optim::Optimizer& optimizer,
                   const std::string& path, std::size_t shard_first) {
  nn::Backend& backend = net.backend();
  std::vector<float> params(net.parameter_count()), state(net.state_count());
  load_arrays(checkpoint.params, net.graph().parameters(), params, path);
  load_arrays(checkpoint.state, net.graph().state_arrays(), state, path);
  const auto slots = optimizer.state();
  if (checkpoint.optimizer_state.size() != slots.size()) {
    data_error(cat(path, ": optimizer state has ", checkpoint.optimizer_state.size(), " arrays, ",
                   optimizer.config().name, " needs ", slots.size()));
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& saved = checkpoint.optimizer_state[i];
    if (saved.name != slots[i].first || saved.values.size() != net.parameter_count() ||
        shard_first + slots[i].second->size() > saved.values.size()) {
      data_error(cat(path, ": optimizer state ", saved.name, " does not fit this model"));
    }
  }
  // Copied only once everything fits: a refused checkpoint leaves the model as it was.
  backend.copy_from_host(params, net.parameter_buffer(), 0);
  backend.copy_from_host(state, net.state_buffer(), 0);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    backend.copy_from_host(std::span<const float>(checkpoint.optimizer_state[i].values)
                               .subspan(shard_first, slots[i].second->size()),
                           *slots[i].second, 0);
  }
  optimizer.set_steps(checkpoint.optimizer_steps);
}

void load_arrays(const std::vector<NamedArray>& arrays,
                 const std::vector<const nn::ParamSpec*>& specs, std::span<float> buffer,
                 const std::string& path) {
  if (arrays.size() != specs.size()) {
    data_error(cat(path, ": holds ", arrays.size(), " arrays where the model has ", specs.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (arrays[i].name != specs[i]->name || arrays[i].shape != specs[i]->shape ||
        arrays[i].values.size() != static_cast<std::size_t>(specs[i]->size())) {
      data_error(cat(path, ": array ", i, " (", arrays[i].name, ") does not match the model's ",
                     specs[i]->name));
    }
    std::copy(arrays[i].values.begin(), arrays[i].values.end(),
              buffer.begin() + static_cast<std::ptrdiff_t>(specs[i]->offset));
  }
}

}  // namespace mbkit::train
