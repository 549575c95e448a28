#include "mbkit/tools/mb_train.hpp"

#include "mbkit/cli/cli.hpp"
#include "mbkit/comm/world.hpp"
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

}  // namespace mbkit::tools::train
