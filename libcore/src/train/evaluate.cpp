#include "mbkit/train/evaluate.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

double EvalResult::accuracy() const {
  return samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples) : 0.0;
}

double EvalResult::top_k_accuracy() const {
  return samples > 0 ? static_cast<double>(top_k_correct) / static_cast<double>(samples) : 0.0;
}

std::vector<double> EvalResult::per_class_accuracy() const {
  std::vector<double> accuracy(static_cast<std::size_t>(classes));
  for (int c = 0; c < classes; ++c) {
    std::int64_t total = 0;
    for (int p = 0; p < classes; ++p) total += confusion[static_cast<std::size_t>(c * classes + p)];
    accuracy[static_cast<std::size_t>(c)] =
        total > 0 ? static_cast<double>(confusion[static_cast<std::size_t>(c * classes + c)]) /
                        static_cast<double>(total)
                  : std::numeric_limits<double>::quiet_NaN();
  }
  return accuracy;
}

void EvalResult::reduce(const comm::World& world) {
  std::vector<std::int64_t> counts = {samples, correct, top_k_correct};
  counts.insert(counts.end(), confusion.begin(), confusion.end());
  world.allreduce_sum(counts);
  double loss = 0;
  for (const std::uint64_t bits : world.all_gather(std::bit_cast<std::uint64_t>(loss_sum))) {
    loss += std::bit_cast<double>(bits);
  }
  samples = counts[0];
  correct = counts[1];
  top_k_correct = counts[2];
  std::copy(counts.begin() + 3, counts.end(), confusion.begin());
  loss_sum = loss;
}

EvalResult EvalResult::sum_in_rank_order(const std::vector<EvalResult>& results) {
  MBKIT_CHECK(!results.empty(), "a sum of no evaluations");
  EvalResult total = results.front();
  total.loss_sum = 0;
  total.samples = total.correct = total.top_k_correct = 0;
  std::fill(total.confusion.begin(), total.confusion.end(), 0);
  for (const EvalResult& r : results) {
    total.samples += r.samples;
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.top_k_correct += r.top_k_correct;
    for (std::size_t i = 0; i < total.confusion.size(); ++i) total.confusion[i] += r.confusion[i];
  }
  return total;
}

namespace {

EvalResult empty_result(const nn::Network& network, int top_k) {
  EvalResult result;
  result.classes = network.graph().num_classes();
  result.top_k = std::clamp(top_k, 1, result.classes);
  result.confusion.assign(static_cast<std::size_t>(result.classes * result.classes), 0);
  return result;
}

void add_batch(nn::Network& network, const data::Batch& batch, EvalResult& result) {
  const auto outcome = network.forward(batch.images.data(), batch.labels.data(), batch.size, false);
  result.loss_sum += outcome.loss_sum;
  result.samples += batch.size;
  const int classes = result.classes;
  const std::vector<float> probabilities = network.probabilities();
  for (int i = 0; i < batch.size; ++i) {
    const float* p = probabilities.data() + static_cast<std::ptrdiff_t>(i) * classes;
    const int label = batch.labels[static_cast<std::size_t>(i)];
    const int predicted = static_cast<int>(std::max_element(p, p + classes) - p);
    // Top-k: the label is among the k largest when fewer than k classes beat it.
    int better = 0;
    for (int k = 0; k < classes; ++k) better += p[k] > p[label] || (p[k] == p[label] && k < label);
    result.correct += predicted == label;
    result.top_k_correct += better < result.top_k;
    ++result.confusion[static_cast<std::size_t>(label * classes + predicted)];
  }
}

}  // namespace

EvalResult evaluate(nn::Network& network, data::DataLoader& loader, int top_k) {
  EvalResult result = empty_result(network, top_k);
  loader.seek(0, 0);
  for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b)
    add_batch(network, loader.next(), result);
  return result;
}

EvalResult evaluate_batch(nn::Network& network, data::DataLoader& loader, std::int64_t epoch,
                          std::int64_t index, int top_k) {
  EvalResult result = empty_result(network, top_k);
  loader.seek(epoch, index);
  add_batch(network, loader.next(), result);
  return result;
}

}  // namespace mbkit::train
