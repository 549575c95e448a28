// Tick marks of a linear axis, spaced for their labels: gnuplot's automatic spacing knows
// nothing of the labels' width, and on a narrow pane its labels ran together
// ("100120140160180").
#pragma once

#include <string>
#include <vector>

namespace mbkit::plot {

struct AxisTicks {
  double step = 1;   ///< distance between ticks, in the axis' unit
  int decimals = 0;  ///< digits after the point in the labels ("%.<decimals>f")
};

/// The width of a label's character in inches at `points`: measured on mb-plot's PNGs, whose
/// digits are 18 pixels wide at 150 dots per inch and 10 points (pngcairo draws its fonts a
/// third larger than the PDF terminal, where this leaves room to spare).
double label_char_width(double points);

/// The smallest step of 1, 2, 2.5 or 5 times a power of ten (a whole number when `integer`)
/// whose labels over [low, high], drawn on an axis `length` inches long, stand at least one and
/// a half characters apart; the labels show as many decimals as the step has.
AxisTicks choose_ticks(double low, double high, double length, double points, bool integer);

/// The labels of the ticks over [low, high]: the multiples of the step, as printed.
std::vector<std::string> tick_labels(double low, double high, const AxisTicks& ticks);

}  // namespace mbkit::plot
