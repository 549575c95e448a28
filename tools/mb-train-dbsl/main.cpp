// mb-train-dbsl: dual batch size learning under mpirun/srun (rank 0 is the parameter server),
// or --plan alone. Options only; the work is in libcore (mbkit/tools/mb_train.hpp).
#include "mbkit/cli/cli.hpp"
#include "mbkit/cli/train_options.hpp"
#include "mbkit/tools/mb_train.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Train a model with dual batch size learning (DBSL): rank 0 is a parameter server that "
      "averages in each worker's model as it comes; large workers train at --base-batch, "
      "--small-workers at a smaller batch on fewer samples, in the same predicted time "
      "(--extra-time k times the all-large round). --plan prints the plan and exits.",
      "mb-train-dbsl"};
  mbkit::cli::CommonOptions common;
  mbkit::cli::add_common_options(app, common);
  mbkit::tools::train::TrainOptions options = mbkit::tools::train::dbsl_defaults();
  mbkit::cli::add_train_options(app, options);
  mbkit::cli::add_dbsl_options(app, options);
  mbkit::cli::add_distribution_options(app, options, /*straggler_methods=*/false);
  return mbkit::cli::run_tool(app, argc, argv, common, [&] {
    mbkit::cli::finish_train_options(app, options);
    return mbkit::tools::train::run_train_dbsl(options);
  });
}
