#include "mbkit/train/measured_times.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

double MeasuredTimes::at(double size) const {
  MBKIT_CHECK(!bytes.empty() && bytes.size() == seconds.size(), "MeasuredTimes: no points");
  if (size <= bytes.front()) return seconds.front();
  if (size >= bytes.back()) return seconds.back() + slope_beyond * (size - bytes.back());
  const auto upper =
      static_cast<std::size_t>(std::upper_bound(bytes.begin(), bytes.end(), size) - bytes.begin());
  const std::size_t lower = upper - 1;
  const double share = (size - bytes[lower]) / (bytes[upper] - bytes[lower]);
  return seconds[lower] + share * (seconds[upper] - seconds[lower]);
}

std::string MeasuredTimes::spec() const {
  if (bytes.empty()) return {};
  std::string text = " points ";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    text += strprintf(i == 0 ? "%.17g:%.17g" : ",%.17g:%.17g", bytes[i], seconds[i]);
  }
  return text;
}

std::string MeasuredTimes::describe() const {
  if (bytes.empty()) return {};
  return cat("interpolating ", bytes.size(), " measured sizes, ", human_bytes(bytes.front()),
             " to ", human_bytes(bytes.back()));
}

std::string measured_times_problem(std::span<const double> bytes, std::span<const double> seconds) {
  if (bytes.size() != seconds.size()) {
    return cat(bytes.size(), " sizes for ", seconds.size(), " times");
  }
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!(std::isfinite(bytes[i]) && bytes[i] >= 0)) {
      return cat("size ", bytes[i], " is not a number of bytes");
    }
    if (!(std::isfinite(seconds[i]) && seconds[i] > 0)) {
      return cat("time ", seconds[i], " s for ", bytes[i], " bytes is not a positive number");
    }
  }
  const auto [smallest, largest] = std::minmax_element(bytes.begin(), bytes.end());
  if (bytes.empty() || *smallest == *largest) return "fewer than two different sizes";
  return {};
}

MeasuredTimes measured_times(std::span<const double> bytes, std::span<const double> seconds,
                             double fitted_beta) {
  const std::string problem = measured_times_problem(bytes, seconds);
  MBKIT_CHECK(problem.empty(), "measured_times: ", problem);
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < bytes.size(); ++i) points.emplace_back(bytes[i], seconds[i]);
  std::sort(points.begin(), points.end());
  MeasuredTimes table;
  for (std::size_t i = 0; i < points.size();) {
    std::size_t end = i;
    double sum = 0;
    for (; end < points.size() && points[end].first == points[i].first; ++end) {
      sum += points[end].second;
    }
    table.bytes.push_back(points[i].first);
    table.seconds.push_back(sum / static_cast<double>(end - i));
    i = end;
  }
  const std::size_t n = table.bytes.size();
  const double last_slope =
      (table.seconds[n - 1] - table.seconds[n - 2]) / (table.bytes[n - 1] - table.bytes[n - 2]);
  table.slope_beyond = last_slope > 0 ? last_slope : std::max(fitted_beta, 0.0);
  return table;
}

}  // namespace mbkit::train
