// Checkpoints (format "mbkit-checkpoint", version 1, in mbkit-formats(5)): everything needed
// to rebuild the model and continue a run exactly: the model's name and configuration, the
// parameters and non-trainable state (batch-norm statistics) under their layer names in
// canonical shapes, the optimizer's name, settings, step count and state arrays, the step,
// epoch and position in the epoch, the seed, and the run's resolved configuration. Written
// atomically (temporary name, then rename). Independent of the number of workers.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mbkit/nn/graph.hpp"
#include "mbkit/nn/network.hpp"
#include "mbkit/optim/optimizer.hpp"

namespace mbkit::train {

inline constexpr const char* kCheckpointFormat = "mbkit-checkpoint";
inline constexpr int kCheckpointFormatVersion = 1;

/// One named array: a parameter ("conv1.weight"), a state array ("bn1.running_mean") or an
/// optimizer slot (over the whole flat buffer).
struct NamedArray {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

struct Checkpoint {
  // The model.
  std::string model;                                ///< zoo name, e.g. "resnet20"
  std::map<std::string, std::string> model_config;  ///< e.g. hidden=256, activation=sigmoid
  std::vector<std::int64_t> input_shape;            ///< C, H, W
  int num_classes = 0;
  std::vector<NamedArray> params;  ///< in the model's parameter order
  std::vector<NamedArray> state;   ///< non-trainable state, in the model's order
  // The optimizer.
  std::string optimizer;
  std::map<std::string, std::string> optimizer_config;
  std::int64_t optimizer_steps = 0;
  std::vector<NamedArray> optimizer_state;
  // Where the run is.
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch_in_epoch = 0;  ///< the next batch to train on
  std::uint64_t seed = 0;
  double elapsed = 0;  ///< seconds of training so far (for the log's time column)
  /// Real seconds so far: differs from elapsed under --clock virtual (elapsed is then the
  /// emulated cluster's time). Older files lack it: it reads as elapsed.
  double wall_elapsed = 0;
  /// Fractional epoch reached (samples trained on / training rows); a run resumed with
  /// another number of workers continues counting epochs from here.
  double epoch_progress = 0;
  std::int64_t workers = 1;    ///< workers that computed gradients (1 for a single process)
  std::string comm = "local";  ///< exchange: local, ps, ps-async or allreduce
  /// mb-train-amb --delayed-gradients (delayed_gradients.hpp): the parameter versions the
  /// coming rounds still compute at (group /delayed_parameters, absent when none), and the
  /// virtual clock's timeline of the rounds (attribute delayed_timeline, absent when none).
  std::vector<NamedArray> delayed_parameters;
  std::vector<double> delayed_timeline;
  /// --cpu-quota on the virtual clock: each worker's CFS budget as its last gradient left,
  /// in rank order its rank and then cpu_quota_state_size values: time, period index, budget
  /// spent; under --cpu-quota-tick 5: time, period index, pool, local budget, unaccounted
  /// (attributes cpu_quota_budgets, absent when none, and cpu_quota_state_size, absent for 3).
  std::vector<double> cpu_quota_budgets;
  std::int64_t cpu_quota_state_size = 3;
  // Provenance.
  std::string dataset;            ///< dataset name (from the data file)
  std::vector<double> mean, std;  ///< normalisation the model was trained with
  std::string config_json;        ///< the run's resolved options
  std::string created_by;         ///< tool and version
};

/// Writes atomically; an existing file is replaced.
void write_checkpoint(const std::string& path, const Checkpoint& checkpoint);
/// Reads and validates (format, version, attribute types and ranges, array types, shapes and
/// sizes, chunk checksums); problems are data errors naming the file and what is wrong.
Checkpoint read_checkpoint(const std::string& path);

/// A data error naming `path` and the first array holding a NaN or an infinity: a model to
/// evaluate must be finite (training may still resume a diverged run).
void require_finite(const std::vector<NamedArray>& arrays, const std::string& path);

/// The arrays at `specs` (a model's parameters or state, in its order) of the flat `buffer`.
std::vector<NamedArray> arrays_of(const std::vector<const nn::ParamSpec*>& specs,
                                  std::span<const float> buffer);
/// Copies `arrays` (read from `path`) to their places in `buffer`: the training's resume and
/// the evaluation share it. A data error naming `path` when they are not the model's arrays
/// (count, names, shapes, sizes).
void load_arrays(const std::vector<NamedArray>& arrays,
                 const std::vector<const nn::ParamSpec*>& specs, std::span<float> buffer,
                 const std::string& path);

/// Fills the checkpoint's parameters, state, optimizer state and optimizer steps from their
/// backend buffers, by explicit copies: exactly parameters + state + optimizer state bytes to
/// the host, on the CPU as on a GPU. `whole_optimizer_state`, when not empty, stands for the
/// optimizer's own arrays (several servers: every shard gathered).
void capture_model(Checkpoint& checkpoint, nn::Network& net, optim::Optimizer& optimizer,
                   const std::vector<std::vector<float>>& whole_optimizer_state = {});
/// The reverse, for a resume: exactly as many bytes from the host. A data error naming `path`
/// when the arrays are not this model's or this optimizer's. The checkpoint holds the whole
/// optimizer state; an optimizer of a shard (a server of several) takes the part from
/// `shard_first` on.
void restore_model(const Checkpoint& checkpoint, nn::Network& net, optim::Optimizer& optimizer,
                   const std::string& path, std::size_t shard_first = 0);

}  // namespace mbkit::train
