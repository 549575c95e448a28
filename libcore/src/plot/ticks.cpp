#include "mbkit/plot/ticks.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

// Space between neighbouring labels, in characters.
constexpr double kGapChars = 1.5;

// The digits after the point that print `step` and its multiples exactly (2.5: 1).
int decimals_of(double step) {
  for (int decimals = 0; decimals < 12; ++decimals) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * scaled) return decimals;
  }
  return 12;
}

}  // namespace

double label_char_width(double points) {
  return 0.87 * points / 72.0;
}

std::vector<std::string> tick_labels(double low, double high, const AxisTicks& ticks) {
  std::vector<std::string> labels;
  const double first = std::ceil(low / ticks.step - 1e-9);
  const double last = std::floor(high / ticks.step + 1e-9);
  for (double k = first; k <= last && labels.size() < 1000; ++k) {
    const double value = k * ticks.step;
    // "-0" is "0".
    labels.push_back(strprintf("%.*f", ticks.decimals, value == 0 ? 0.0 : value));
  }
  return labels;
}

AxisTicks choose_ticks(double low, double high, double length, double points, bool integer) {
  const double span = high - low;
  if (!(span > 0) || !std::isfinite(span) || !(length > 0)) return {1.0, 0};
  // From a step that gives at most ~50 ticks, upwards through 1, 2, 2.5, 5 x 10^k.
  double power = std::pow(10.0, std::floor(std::log10(span / 50)));
  for (int attempt = 0; attempt < 60; ++attempt) {
    for (const double mantissa : {1.0, 2.0, 2.5, 5.0}) {
      const double step = mantissa * power;
      if (integer && (step < 1 || step != std::round(step))) continue;
      const AxisTicks ticks{step, integer ? 0 : decimals_of(step)};
      const auto labels = tick_labels(low, high, ticks);
      std::size_t widest = 1;
      for (const auto& label : labels) widest = std::max(widest, label.size());
      const double spacing = length * step / span;
      if (spacing >= label_char_width(points) * (static_cast<double>(widest) + kGapChars)) {
        return ticks;
      }
    }
    power *= 10;
  }
  return {span, 0};
}

}  // namespace mbkit::plot
