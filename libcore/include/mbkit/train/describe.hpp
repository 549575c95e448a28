// How a training run describes itself: the start table's words for the model, optimizer and
// schedule, and the resolved configuration the metric log and checkpoints record (JSON).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mbkit/comm/allreduce_trial.hpp"
#include "mbkit/nn/graph.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/options.hpp"

namespace mbkit::train {

/// "mlp (hidden 256, sigmoid)", or the model's name.
std::string describe_model(const models::ModelConfig& model);
/// "momentum 0.9, weight decay 0".
std::string describe_optimizer(const optim::OptimizerConfig& config);
/// "lr 0.1 linear (to 0 at step 4690), warm-up 100 steps".
std::string describe_schedule(const optim::ScheduleConfig& config);
/// The optimizer's settings as text (checkpoints).
std::map<std::string, std::string> optimizer_map(const optim::OptimizerConfig& config);

/// What a run settled at start besides its options, recorded with them.
struct RunFacts {
  std::int64_t planned_steps = 0;
  int world_size = 1;
  int workers = 1;
  double time_limit = 0;          ///< AMB's, seconds (0: none)
  std::string time_limit_rule;    ///< --time-limit auto: how the limit was chosen
  int delay_rounds = 0;           ///< --delayed-gradients: the delay in rounds (TAU)
  std::string allreduce;          ///< a distributed allreduce run's sum: shm, mpi or nccl
  std::string allreduce_library;  ///< "NCCL 2.28.9" for nccl
  std::optional<comm::AllreduceTrial> trial;  ///< what --allreduce auto measured
  const DbslPlan* dbsl = nullptr;             ///< mb-train-dbsl's plan
  std::vector<double> dbsl_factors;           ///< and its update factors
  std::optional<bool> step_graphs;  ///< on a backend that records them: a CUDA-graph step?
  /// A --comm-model file's model as the run uses it (CommModel::spec: its allreduce fit only
  /// where it times the run's exchange); empty: the file's as read.
  std::string comm_model_values;
};

/// The run's resolved configuration (the log's and checkpoint's "config" attribute): every
/// option, the model's size, and the `facts` (under "dbsl" a DBSL run's plan and factors;
/// "cuda_graphs" on or off where the backend records graphs). `pretty`: a key per line (what
/// ranks compare to check they run the same training).
std::string config_json(const TrainOptions& options, const nn::Graph& graph, const RunFacts& facts,
                        bool pretty = false);

}  // namespace mbkit::train
