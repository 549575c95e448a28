#include "mbkit/train/dbsl_options.hpp"

#include <cstdlib>
#include <iostream>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/train/time_model.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

// The world size mpirun or srun gives, read without starting MPI (0: not under a launcher).
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      return static_cast<int>(parse_int(value, name));
    }
  }
  return 0;
}

}  // namespace

std::vector<TimeModel> time_models_from_options(const TrainOptions& o, int workers) {
  std::vector<TimeModel> models(static_cast<std::size_t>(workers));
  if (!o.dbsl.time_model.empty()) {
    const auto records = read_time_model(o.dbsl.time_model);
    for (int w = 0; w < workers; ++w) {
      const TimeModel model = time_model_for_rank(records, w + 1, o.dbsl.time_model);
      models[static_cast<std::size_t>(w)] = {model.a, model.b};
    }
  } else if (!o.dbsl.time_model_ab.empty()) {
    const TimeModel model = parse_time_model_ab(o.dbsl.time_model_ab, "--time-model-ab");
    std::fill(models.begin(), models.end(), model);
  } else if (!o.compute_model.empty()) {
    const ComputeModels& compute = o.compute_model;
    for (int w = 0; w < workers; ++w) {
      const auto model = compute.for_rank(w + 1);
      if (!model) {
        usage_error(cat("--compute-model gives rank ", w + 1,
                        " no model; the plan needs one "
                        "for every worker"));
      }
      models[static_cast<std::size_t>(w)] = {model->per_sample, model->per_batch};
    }
  } else {
    return {};
  }
  const emulation::Slowdown& slowdown = o.slowdown;
  for (int w = 0; w < workers; ++w) {
    const double factor = slowdown.factor_for(w + 1);
    models[static_cast<std::size_t>(w)].a *= factor;
    models[static_cast<std::size_t>(w)].b *= factor;
  }
  bool equal = true;
  for (const auto& m : models) equal = equal && m.a == models[0].a && m.b == models[0].b;
  if (equal) models.resize(1);
  return models;
}

namespace {

DbslPlanInput plan_input(const TrainOptions& o, std::int64_t samples, int workers,
                         const std::vector<TimeModel>& models) {
  DbslPlanInput input;
  input.samples = samples;
  input.workers = workers;
  input.small_workers = o.dbsl.small_workers;
  input.base_batch = o.dbsl.base_batch;
  input.extra_time = o.dbsl.extra_time;
  input.models = models;
  return input;
}

// One model for every worker is the paper's Eq. 8; one per worker its generalisation.
DbslPlan plan_of(const DbslPlanInput& input) {
  return input.models.size() == 1 ? eq8_plan(input) : dbsl_plan(input);
}

}  // namespace

DbslPlan make_dbsl_plan(const TrainOptions& o, std::int64_t samples, int workers,
                        const std::vector<TimeModel>& models) {
  return plan_of(plan_input(o, samples, workers, models));
}

int print_dbsl_plan(const TrainOptions& o) {
  validate_dbsl(o);
  std::int64_t samples = o.dbsl.train_samples;
  if (samples == 0 && !o.data.empty()) {
    samples =
        static_cast<std::int64_t>(data::DatasetFile::open(o.data).info().split(data::kTrain).count);
  }
  if (samples <= 0) usage_error("--plan needs --train-samples N or --data FILE");
  int workers = o.dbsl.workers;
  if (workers == 0 && launcher_world_size() > 1) workers = launcher_world_size() - 1;
  if (workers <= 0) usage_error("--plan needs --workers N (or mpirun's world: a server and N)");
  const auto models = time_models_from_options(o, workers);
  if (models.empty()) {
    usage_error("--plan needs a time model: --time-model-ab A,B or --compute-model A,B");
  }
  const DbslPlanInput input = plan_input(o, samples, workers, models);
  const DbslPlan plan = plan_of(input);
  std::cout << (o.dbsl.json ? plan_json(plan, input) : plan_table(plan, input)) << std::flush;
  return 0;
}

}  // namespace mbkit::train
