// mb-train-amb: anytime mini-batch training, alone or under mpirun/srun. Options only; the work is
// in libcore (mbkit/tools/mb_train.hpp).
#include "mbkit/cli/cli.hpp"
#include "mbkit/cli/train_options.hpp"
#include "mbkit/tools/mb_train.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Train a model with anytime mini-batches (AMB): every worker computes micro-batches for a "
      "fixed time per step and sends what it did, so stragglers' partial work is used. Takes "
      "every option of mb-train-fmb.",
      "mb-train-amb"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::train::TrainOptions options;
  mbkit::cli::add_train_options(app, options);
  mbkit::cli::add_amb_options(app, options);
  mbkit::cli::add_distribution_options(app, options);
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    mbkit::cli::finish_train_options(app, options);
    return mbkit::tools::train::run_train_amb(options);
  });
}
