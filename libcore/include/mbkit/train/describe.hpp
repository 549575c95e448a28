// How a training run describes itself: the start table's words for the model, optimizer and
// schedule, and the resolved configuration the metric log and checkpoints record (JSON).
#pragma once

#include <map>
#include <optional>
#include <string>

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

/// The run's resolved configuration (the log's and checkpoint's "config" attribute): every
/// option, the model's size, the planned steps, AMB's time limit, `allreduce` (the sum a
/// distributed allreduce run uses: shm, mpi or nccl, what auto chose) and what auto measured,
/// `allreduce_library` when given (the log of a nccl run: "NCCL 2.28.9"); a DBSL
/// run's plan and update factors (mb-train-dbsl) under "dbsl". `pretty`: a key per line (what
/// ranks compare to check they run the same training).
std::string config_json(const TrainOptions& options, const nn::Graph& graph,
                        std::int64_t planned_steps, int world_size, int workers, double time_limit,
                        const std::string& allreduce,
                        const std::optional<comm::AllreduceTrial>& trial, bool pretty = false,
                        const DbslPlan* dbsl = nullptr,
                        const std::vector<double>& dbsl_factors = {},
                        const std::string& time_limit_rule = {},
                        const std::string& allreduce_library = {});

}  // namespace mbkit::train
