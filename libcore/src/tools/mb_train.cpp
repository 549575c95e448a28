#include "mbkit/tools/mb_train.hpp"

#include "mbkit/cli/cli.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/train/dbsl_options.hpp"
#include "mbkit/train/training_run.hpp"

namespace mbkit::tools::train {

int run_train_fmb(const TrainOptions& options) {
  mbkit::train::validate(options);
  comm::World world;
  return world.run_collectively([&] {
    mbkit::train::TrainingRun run(options, world, cli::recorded_command_line());
    return run.train();
  });
}

int run_train_amb(TrainOptions options) {
  options.amb.enabled = true;
  return run_train_fmb(options);
}

TrainOptions dbsl_defaults() {
  TrainOptions options;
  options.optimizer.name = "momentum";
  options.optimizer.momentum = 0.9;
  options.schedule.lr = 0.1;
  options.schedule.kind = "multistep";
  options.schedule.milestones = {80, 120};
  options.schedule.gamma = 0.2;
  return options;
}

int run_train_dbsl(TrainOptions options) {
  options.dbsl.enabled = true;
  if (options.dbsl.plan_only) return mbkit::train::print_dbsl_plan(options);
  return run_train_fmb(options);
}

}  // namespace mbkit::tools::train
