// K-batch-sync SGD in the synchronous loop (k_batch_sync.hpp): the step's plan before the
// workers compute, and a resumed run's replay of the plans of the steps done.
#include <bit>
#include <cmath>
#include <cstring>

#include "mbkit/train/roles.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

std::int64_t TrainingRun::k_batch_samples() const {
  return static_cast<std::int64_t>(options_.k_batch_sync) * global_batch_ / role_.workers;
}

std::int64_t TrainingRun::k_batch_steps_per_epoch() const {
  // Epochs advance by the samples used: K batches a step.
  const auto per_step = static_cast<std::uint64_t>(k_batch_samples());
  return static_cast<std::int64_t>((total_rows_ + per_step - 1) / per_step);
}

KBatchStep TrainingRun::plan_k_batches() {
  const int k = options_.k_batch_sync;
  const auto count = static_cast<std::size_t>(k);
  std::vector<std::vector<double>> completions(static_cast<std::size_t>(role_.workers));
  const auto unknown = [&](int w) {
    if (options_.clock != ClockMode::kVirtual) {
      usage_error(cat("--k-batch-sync ", k,
                      " on the wall clock needs a master and a rank per worker under mpirun "
                      "(--comm ps, at least 2 ranks)"));
    }
    usage_error(cat("--k-batch-sync ", k, ": worker ", w, " (rank ", worker_rank(w, role_.servers),
                    ") has no --compute-model: its batches' completion times must be known "
                    "before it computes them"));
  };
  if (emulated_) {
    // The hosted workers' (under mpirun, gathered from every rank's share).
    std::vector<double> hosted;
    for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
      const auto predicted = emulated_->round(w).predict_completions(k);
      if (!predicted) unknown(w);
      hosted.insert(hosted.end(), predicted->begin(), predicted->end());
    }
    const std::vector<double> all = gather_shares(std::move(hosted), count);
    for (int w = 0; w < role_.workers; ++w) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(count) * w;
      completions[static_cast<std::size_t>(w)].assign(first,
                                                      first + static_cast<std::ptrdiff_t>(count));
    }
  } else {
    // Each rank's K completion times (NaN: unknown; the master's: zeros), gathered in rank order.
    std::vector<double> mine(count, 0.0);
    if (role_.computes) {
      const auto predicted = round_->predict_completions(k);
      if (predicted) {
        mine = *predicted;
      } else {
        mine.assign(count, std::nan(""));
      }
    }
    const int ranks = world_.size();
    std::vector<std::uint8_t> blocks(static_cast<std::size_t>(ranks) * count * sizeof(double));
    std::memcpy(blocks.data() + static_cast<std::size_t>(world_.rank()) * count * sizeof(double),
                mine.data(), count * sizeof(double));
    if (role_.distributed) world_.all_gather_in_place(blocks, count * sizeof(double));
    for (int w = 0; w < role_.workers; ++w) {
      std::vector<double>& times = completions[static_cast<std::size_t>(w)];
      times.resize(count);
      std::memcpy(times.data(),
                  blocks.data() + static_cast<std::size_t>(worker_rank(w, role_.servers)) * count *
                                      sizeof(double),
                  count * sizeof(double));
      if (std::isnan(times.front())) unknown(w);
    }
  }
  const KBatchStep plan = plan_k_batch_step(k, completions);
  if (emulated_) {
    for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
      emulated_->round(w).set_batches(plan.batches[static_cast<std::size_t>(w)]);
    }
  } else if (role_.computes) {
    round_->set_batches(plan.batches[static_cast<std::size_t>(role_.worker)]);
  }
  return plan;
}

void TrainingRun::replay_k_batch_steps(std::int64_t steps) {
  // Batches each hosted worker has read since the run's start, its loader placed after them.
  std::vector<std::int64_t> read(static_cast<std::size_t>(role_.workers), 0);
  const auto place = [&] {
    int w = 0;
    const auto seek = [&](data::DataLoader& loader) {
      const std::int64_t done = read[static_cast<std::size_t>(w++)];
      loader.seek(done / loader.batches_per_epoch(), done % loader.batches_per_epoch());
    };
    if (emulated_) {
      w = emulated_->first();
      emulated_->for_each_loader(seek);
    } else if (train_loader_ && role_.computes) {
      w = role_.worker;
      seek(*train_loader_);
    }
  };
  for (std::int64_t step = 0; step < steps; ++step) {
    place();
    const KBatchStep plan = plan_k_batches();
    for (std::size_t w = 0; w < read.size(); ++w) read[w] += plan.batches[w];
    if (emulated_) {
      for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
        emulated_->round(w).discard_prediction();
      }
    } else if (round_) {
      round_->discard_prediction();
    }
  }
  place();
}

}  // namespace mbkit::train
