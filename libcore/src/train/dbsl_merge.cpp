#include "mbkit/train/dbsl_merge.hpp"

#include <cmath>

#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

UpdateFactor parse_update_factor(const std::string& text) {
  if (text == "linear") return UpdateFactor::kLinear;
  if (text == "sqrt") return UpdateFactor::kSqrt;
  if (text == "none") return UpdateFactor::kNone;
  usage_error(cat("--update-factor: '", text, "' is not linear, sqrt or none"));
}

const char* update_factor_name(UpdateFactor kind) {
  switch (kind) {
    case UpdateFactor::kLinear:
      return "linear";
    case UpdateFactor::kSqrt:
      return "sqrt";
    case UpdateFactor::kNone:
      break;
  }
  return "none";
}

double update_factor(UpdateFactor kind, double ratio) {
  switch (kind) {
    case UpdateFactor::kLinear:
      return ratio;
    case UpdateFactor::kSqrt:
      return std::sqrt(ratio);
    case UpdateFactor::kNone:
      break;
  }
  return 1.0;
}

void merge_push(std::span<float> server, std::span<const float> worker, double f) {
  MBKIT_CHECK(server.size() == worker.size(), "merge_push: models of different sizes");
  for (std::size_t i = 0; i < server.size(); ++i) {
    server[i] = static_cast<float>(((2.0 - f) * server[i] + f * worker[i]) / 2.0);
  }
}

namespace {

double factor_total(const std::vector<double>& factors) {
  double total = 0;
  for (const double f : factors) total += f;
  MBKIT_CHECK(total > 0, "merge_sync: the factors add up to ", total);
  return total;
}

}  // namespace

void merge_sync(std::span<float> server, const std::vector<std::span<const float>>& workers,
                const std::vector<double>& factors) {
  MBKIT_CHECK(workers.size() == factors.size() && !workers.empty(),
              "merge_sync: a factor per model");
  const double total = factor_total(factors);
  for (const auto& w : workers) {
    MBKIT_CHECK(w.size() == server.size(), "merge_sync: models of different sizes");
  }
  for (std::size_t i = 0; i < server.size(); ++i) {
    double sum = 0;
    for (std::size_t k = 0; k < workers.size(); ++k) sum += factors[k] * workers[k][i];
    server[i] = static_cast<float>(sum / total);
  }
}

void add_weighted(std::span<double> sums, const std::vector<std::span<const float>>& workers,
                  const std::vector<double>& factors) {
  MBKIT_CHECK(workers.size() == factors.size(), "add_weighted: a factor per model");
  for (std::size_t k = 0; k < workers.size(); ++k) add_weighted(sums, workers[k], factors[k]);
}

void add_weighted(std::span<double> sums, std::span<const float> worker, double factor) {
  MBKIT_CHECK(worker.size() == sums.size(), "add_weighted: models of different sizes");
  const float* w = worker.data();
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += factor * w[i];
}

void divide_weighted(std::span<float> server, std::span<const double> sums,
                     const std::vector<double>& factors) {
  MBKIT_CHECK(server.size() == sums.size(), "divide_weighted: models of different sizes");
  const double total = factor_total(factors);
  for (std::size_t i = 0; i < server.size(); ++i) server[i] = static_cast<float>(sums[i] / total);
}

}  // namespace mbkit::train
