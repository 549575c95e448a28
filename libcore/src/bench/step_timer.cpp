#include "mbkit/bench/step_timer.hpp"

#include <limits>

#include "mbkit/backend/factory.hpp"
#include "mbkit/data/dataset_file.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/worker_round.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::bench {

StepTimer::StepTimer(const StepTimerOptions& options)
    : options_(options), clock_(false, SteadyClock::now()) {
  const data::DatasetInfo info = data::DatasetFile::open(options.data).info();
  rows_ = info.split(data::kTrain).count;
  const data::ImageShape shape = info.shape();
  backend_ = backend::make_backend(options.device, options.threads,
                                   nn::parse_precision(options.precision));
  clock_.set_threads(backend_->threads());
  net_ = std::make_unique<nn::Network>(
      models::build_model(options.model, {shape.channels, shape.height, shape.width},
                          info.num_classes),
      *backend_);
  net_->initialize(options.seed);
  optim::OptimizerConfig optimizer;
  optimizer.name = options.optimizer;
  optimizer_ = optim::make_optimizer(optimizer, net_->parameter_count(), *backend_);
}

StepTimer::~StepTimer() = default;

std::vector<double> StepTimer::time_steps(const Split& split, int warmup, int steps, double* first,
                                          double* load) {
  if (first) *first = std::numeric_limits<double>::quiet_NaN();
  if (static_cast<std::uint64_t>(split.batch) > rows_) {
    usage_error(cat("--batch-sizes: ", split.batch, " is more than the ", rows_,
                    " training rows of ", options_.data));
  }
  if (!loader_ || loader_->options().batch_size != split.batch) {
    loader_.reset();
    data::LoaderOptions loading;
    loading.path = options_.data;
    loading.batch_size = split.batch;
    loading.seed = options_.seed;
    loading.drop_last = true;  // every step a whole batch
    loading.prefetch = train::prefetch_depth("auto");
    loader_.emplace(loading);
  }
  // The AMB worker's round with no deadline: all P micro-batches, gradients accumulated.
  train::WorkerRound round(train::WorkerRound::Parts{
      *net_, *loader_, clock_, slowdown_, std::nullopt, std::nullopt, options_.rank, 0,
      options_.seed,
      train::RoundRule{true, split.micro_batch(), std::numeric_limits<double>::infinity()}});
  std::vector<double> seconds;
  data::DataLoader::ProducerCpu loaded_before;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) loaded_before = loader_->producer_cpu();
    const auto start = SteadyClock::now();
    const auto report = round.run(step_++, 0);
    optimizer_->step(net_->parameter_buffer(), net_->gradient_buffer(), options_.lr);
    net_->backend().synchronize();  // a GPU step ends when its queued work does
    const double elapsed = seconds_since(start);
    if (report.micro_batches != split.partitions) {
      fail(cat("a step of batch ", split.batch, " computed ", report.micro_batches,
               " micro-batches instead of ", split.partitions));
    }
    if (i >= warmup) seconds.push_back(elapsed);
    if (i == 0 && warmup > 0 && first) *first = elapsed;
  }
  if (load) {
    // The batches the thread prepared meanwhile (it keeps --prefetch ahead of the steps).
    const auto loaded = loader_->producer_cpu();
    const auto batches = loaded.batches - loaded_before.batches;
    *load =
        batches > 0 ? (loaded.seconds - loaded_before.seconds) / static_cast<double>(batches) : 0.0;
  }
  return seconds;
}

}  // namespace mbkit::bench
