#include "mbkit/plot/series.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {

std::vector<double> smooth(const std::vector<double>& values, double span) {
  if (!(span > 1)) return values;
  const double keep = 1.0 - 2.0 / (span + 1.0);  // 1 - alpha
  std::vector<double> out(values.size());
  double weighted = 0;
  double weights = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      out[i] = values[i];
      continue;
    }
    weighted = values[i] + keep * weighted;
    weights = 1.0 + keep * weights;
    out[i] = weighted / weights;
  }
  return out;
}

std::vector<double> cumulative_sum(const std::vector<double>& values) {
  std::vector<double> out(values.size());
  double total = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    total += values[i];
    out[i] = total;
  }
  return out;
}

std::vector<std::size_t> thin_indices(std::size_t count, std::size_t max_points) {
  std::vector<std::size_t> indices;
  if (count == 0) return indices;
  if (max_points < 2) max_points = 2;
  if (count <= max_points) {
    indices.resize(count);
    for (std::size_t i = 0; i < count; ++i) indices[i] = i;
    return indices;
  }
  indices.reserve(max_points);
  const double stride = static_cast<double>(count - 1) / static_cast<double>(max_points - 1);
  for (std::size_t k = 0; k < max_points; ++k) {
    const auto i = static_cast<std::size_t>(std::llround(static_cast<double>(k) * stride));
    if (indices.empty() || i != indices.back()) indices.push_back(std::min(i, count - 1));
  }
  indices.back() = count - 1;
  return indices;
}

double median(std::vector<double> values) {
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle),
                   values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle));
  return 0.5 * (lower + upper);
}

double quantile(std::vector<double> values, double q) {
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double position = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
}

double mean(const std::vector<double>& values) {
  double total = 0;
  std::size_t count = 0;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    total += v;
    ++count;
  }
  return count == 0 ? std::numeric_limits<double>::quiet_NaN() : total / static_cast<double>(count);
}

// ------------------------------------------------------------------------------------------

CountScale choose_count_scale(double max_abs) {
  if (max_abs >= 1e6) return {1e6, "M"};
  if (max_abs >= 1e4) return {1e3, "k"};
  return {};
}

double parse_duration(const std::string& text, const std::string& what) {
  const std::string trimmed(trim(text));
  static const std::pair<const char*, double> kUnits[] = {
      {"ms", 1e-3}, {"min", 60.0}, {"s", 1.0}, {"h", 3600.0}};
  for (const auto& [suffix, seconds] : kUnits) {
    if (ends_with(trimmed, suffix)) {
      const std::string number = trimmed.substr(0, trimmed.size() - std::string(suffix).size());
      if (!number.empty() &&
          (std::isdigit(static_cast<unsigned char>(number.back())) != 0 || number.back() == '.')) {
        return parse_double(number, what) * seconds;
      }
    }
  }
  return parse_double(trimmed, what);
}

// ------------------------------------------------------------------------------------------

namespace {

// The smallest of 1, 2 or 5 times a power of ten that is >= value (> 0).
double nice_ceil(double value) {
  const double power = std::pow(10.0, std::floor(std::log10(value)));
  for (const double step : {1.0, 2.0, 5.0, 10.0}) {
    if (step * power >= value * (1 - 1e-12)) return step * power;
  }
  return 10.0 * power;
}

}  // namespace

Bins choose_bins(const std::vector<std::vector<double>>& samples, const BinRequest& request) {
  const bool limited = std::isfinite(request.upper);
  std::vector<double> pooled;
  for (const auto& values : samples) {
    for (const double v : values) {
      if (std::isfinite(v) && (!limited || v <= request.upper)) pooled.push_back(v);
    }
  }
  Bins bins;
  if (pooled.empty()) {
    bins.first_edge = request.integer_valued ? -0.5 : 0.0;
    return bins;
  }
  std::sort(pooled.begin(), pooled.end());
  double low = pooled.front();
  const double high = pooled.back();
  if (request.from_zero && low > 0) low = 0;

  if (request.integer_valued) {
    const double first = std::floor(low);
    const double values = std::floor(high) - first + 1;
    double width = 1;
    if (request.bins > 0) {
      width = std::max(1.0, std::ceil(values / request.bins));
    } else if (values > static_cast<double>(kMaxIntegerBins)) {
      width = std::ceil(values / static_cast<double>(kMaxIntegerBins));
    }
    bins.width = width;
    bins.first_edge = first - 0.5;
    bins.count = static_cast<std::size_t>(std::ceil(values / width));
    return bins;
  }

  double range = high - low;
  if (!(range > 0)) {
    // One distinct value: one bin around it, a tenth of its size wide (or 1 for 0).
    bins.width = low != 0 ? std::abs(low) * 0.1 : 1.0;
    bins.first_edge = low - bins.width / 2;
    if (request.from_zero && bins.first_edge < 0) bins.first_edge = 0;
    bins.count = 1;
    return bins;
  }
  std::size_t count = 0;
  if (request.bins > 0) {
    count = static_cast<std::size_t>(request.bins);
    bins.width = range / static_cast<double>(count);
    bins.first_edge = low;
  } else {
    const auto quantile = [&](double q) {
      const double position = q * static_cast<double>(pooled.size() - 1);
      const auto below = static_cast<std::size_t>(std::floor(position));
      const std::size_t above = std::min(below + 1, pooled.size() - 1);
      return pooled[below] +
             (position - static_cast<double>(below)) * (pooled[above] - pooled[below]);
    };
    const double iqr = quantile(0.75) - quantile(0.25);
    const double n = static_cast<double>(pooled.size());
    double width = iqr > 0 ? 2.0 * iqr / std::cbrt(n) : range / std::ceil(std::sqrt(n));
    width = std::clamp(width, range / 100.0, range / 5.0);
    width = nice_ceil(width);
    // Edges on multiples of the width read better ("0.02, 0.04" rather than "0.0137, ...").
    bins.first_edge = request.from_zero ? 0.0 : std::floor(low / width) * width;
    bins.width = width;
    count = static_cast<std::size_t>(std::ceil((high - bins.first_edge) / width - 1e-9));
  }
  bins.count = std::max<std::size_t>(count, 1);
  return bins;
}

std::vector<double> bin_fractions(const std::vector<double>& values, const Bins& bins) {
  std::vector<double> counts(bins.count, 0.0);
  std::size_t total = 0;
  const double last_edge = bins.first_edge + static_cast<double>(bins.count) * bins.width;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    ++total;
    if (v < bins.first_edge || v > last_edge) continue;
    auto index = static_cast<std::size_t>(std::floor((v - bins.first_edge) / bins.width));
    if (index >= bins.count) index = bins.count - 1;  // the last edge belongs to the last bin
    counts[index] += 1;
  }
  if (total > 0) {
    for (double& c : counts) c /= static_cast<double>(total);
  }
  return counts;
}

// ------------------------------------------------------------------------------------------

double straggler_density(const emulation::StragglerProfile& profile, double x) {
  if (x < 0) return 0;
  double density = 0;
  for (const auto& c : profile.components) {
    if (c.exponential) {
      density += c.weight / c.mean * std::exp(-x / c.mean);
      continue;
    }
    if (!(c.std > 0)) continue;
    const double norm = c.weight / (c.std * std::sqrt(2.0 * std::numbers::pi));
    const double a = (x - c.mean) / c.std;
    const double b = (x + c.mean) / c.std;
    density += norm * (std::exp(-0.5 * a * a) + std::exp(-0.5 * b * b));
  }
  return density;
}

StragglerCurve straggler_curve(const emulation::StragglerProfile& profile, std::size_t points) {
  StragglerCurve curve;
  curve.cap = profile.cap();
  bool continuous = false;
  std::map<double, double> masses;
  for (const auto& c : profile.components) {
    if (c.std > 0 || c.exponential) {
      continuous = true;
    } else if (c.weight > 0) {
      masses[std::min(curve.cap, std::abs(c.mean))] += c.weight;
    }
  }
  for (const auto& [x, weight] : masses) curve.impulses.push_back({x, weight});
  if (!continuous || !(curve.cap > 0)) return curve;
  points = std::max<std::size_t>(points, 2);
  std::vector<double> grid;
  grid.reserve(points + profile.components.size());
  for (std::size_t i = 0; i < points; ++i) {
    grid.push_back(curve.cap * static_cast<double>(i) / static_cast<double>(points - 1));
  }
  for (const auto& c : profile.components) {
    if (c.std > 0 && c.mean > 0 && c.mean < curve.cap) grid.push_back(c.mean);
  }
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  curve.x = grid;
  curve.density.reserve(grid.size());
  for (const double x : grid) curve.density.push_back(straggler_density(profile, x));
  return curve;
}

// ------------------------------------------------------------------------------------------

std::size_t warmup_steps(std::size_t steps, int requested) {
  if (requested >= 0) return static_cast<std::size_t>(requested);
  if (steps <= 1) return 0;
  return std::max<std::size_t>(1, steps / 10);
}

ThroughputStats throughput_stats(const std::vector<double>& samples,
                                 const std::vector<double>& seconds,
                                 const std::vector<double>& throughput, std::size_t skip) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> rates;
  double total_samples = 0;
  double total_seconds = 0;
  for (std::size_t i = skip; i < throughput.size(); ++i) {
    if (!std::isfinite(throughput[i])) continue;
    rates.push_back(throughput[i]);
    total_samples += samples[i];
    total_seconds += seconds[i];
  }
  ThroughputStats stats;
  stats.steps = rates.size();
  if (rates.empty()) {
    stats.median = stats.mean = stats.uncertainty = stats.jitter = kNaN;
    return stats;
  }
  const double n = static_cast<double>(rates.size());
  stats.median = median(rates);
  stats.mean = total_seconds > 0 ? total_samples / total_seconds : kNaN;
  double mean_rate = 0;
  for (const double rate : rates) mean_rate += rate / n;
  double variance = 0;  // numpy's std: the population's
  for (const double rate : rates) variance += (rate - mean_rate) * (rate - mean_rate) / n;
  stats.uncertainty = std::sqrt(variance) / std::sqrt(n);
  std::vector<double> deviations;
  for (const double rate : rates) deviations.push_back(std::abs(rate - stats.median));
  // 1.4826: the MAD of normal data times this estimates its standard deviation.
  stats.jitter = 1.4826 * median(deviations);
  return stats;
}

std::vector<ScalingRow> scaling_table(const std::vector<ScalingPoint>& points) {
  std::map<double, std::vector<double>> by_workers;
  for (const auto& point : points) by_workers[point.workers].push_back(point.throughput);
  std::vector<ScalingRow> rows;
  for (const auto& [workers, throughputs] : by_workers) {
    ScalingRow row;
    row.workers = workers;
    row.throughput = median(throughputs);
    rows.push_back(row);
  }
  if (rows.empty()) return rows;
  const double base_workers = rows.front().workers;
  const double base_throughput = rows.front().throughput;
  for (auto& row : rows) {
    row.speedup = row.throughput / base_throughput * base_workers;
    row.efficiency = row.speedup / row.workers;
  }
  return rows;
}

std::vector<MeanPoint> mean_by_x(const std::vector<double>& x, const std::vector<double>& values) {
  std::map<double, std::vector<double>> by_x;
  for (std::size_t i = 0; i < x.size() && i < values.size(); ++i) {
    if (std::isfinite(values[i])) by_x[x[i]].push_back(values[i]);
  }
  std::vector<MeanPoint> points;
  for (const auto& [at, finite] : by_x) {
    const auto [low, high] = std::minmax_element(finite.begin(), finite.end());
    points.push_back({at, mean(finite), *low, *high, finite.size()});
  }
  return points;
}

}  // namespace mbkit::plot
