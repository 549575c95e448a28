#include "mbkit/train/drop_compute.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/util/check.hpp"

namespace mbkit::train {
namespace {

// Expected samples per second of a step at `threshold` (infinity: nothing dropped).
double samples_per_second(const std::vector<double>& costs, int micro_batches, int micro_size,
                          const std::vector<std::vector<double>>& delays, double exchange,
                          double threshold) {
  double samples = 0, seconds = 0;
  for (const auto& trial : delays) {
    double slowest = 0;
    for (std::size_t w = 0; w < costs.size(); ++w) {
      const double d = trial[w], c = costs[w];
      double n = micro_batches;
      if (std::isfinite(threshold)) {
        n = std::clamp(std::ceil((threshold - d) / c), 1.0, static_cast<double>(micro_batches));
      }
      samples += n * micro_size;
      slowest = std::max(slowest, d + n * c);
    }
    seconds += slowest + exchange;
  }
  return seconds > 0 ? samples / seconds : 0.0;
}

}  // namespace

DropComputeChoice choose_drop_compute_threshold(const std::vector<double>& micro_costs,
                                                int micro_batches, int micro_size,
                                                const std::vector<std::vector<double>>& delays,
                                                double exchange) {
  MBKIT_CHECK(!micro_costs.empty() && !delays.empty() && micro_batches >= 1,
              "DropCompute's threshold needs workers, trials and micro-batches");
  double cheapest = micro_costs.front(), longest = 0;
  for (const double c : micro_costs) {
    MBKIT_CHECK(c > 0, "a micro-batch cost of ", c, " s");
    cheapest = std::min(cheapest, c);
  }
  for (const auto& trial : delays) {
    MBKIT_CHECK(trial.size() == micro_costs.size(), trial.size(), " delays for ",
                micro_costs.size(), " workers");
    for (std::size_t w = 0; w < trial.size(); ++w) {
      longest = std::max(longest, trial[w] + micro_batches * micro_costs[w]);
    }
  }
  DropComputeChoice choice;
  choice.full_batches_per_second =
      samples_per_second(micro_costs, micro_batches, micro_size, delays, exchange, INFINITY);
  // Nothing dropped unless dropping does better.
  choice.threshold = longest;
  choice.samples_per_second = choice.full_batches_per_second;
  constexpr int kCandidates = 400;
  for (int i = kCandidates; i >= 1; --i) {  // from the largest: ties keep the larger
    const double threshold = cheapest + (longest - cheapest) * i / kCandidates;
    const double rate =
        samples_per_second(micro_costs, micro_batches, micro_size, delays, exchange, threshold);
    if (rate > choice.samples_per_second) {
      choice.samples_per_second = rate;
      choice.threshold = threshold;
    }
  }
  return choice;
}

}  // namespace mbkit::train
