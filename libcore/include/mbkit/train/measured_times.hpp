// The measured one-way times of a message (or of an allreduce) by size, as mb-bench-bandwidth
// --fit stores them (the median per size), and what the virtual clock charges for a size
// between, below or beyond them. A least-squares line through 8 B .. 16 MB misprices the sizes
// in between (its intercept is no small message's latency, and a link's or MPI's algorithm
// changes bend the curve), so a --comm-model file's points are the model and its line is kept
// for files without points and for the printed table.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace mbkit::train {

/// Times by size, priced by piecewise-linear interpolation in bytes between the two measured
/// sizes that bracket a size. Linear in bytes rather than log-log: between neighbouring sizes
/// a message costs a latency plus bytes over a bandwidth, a line in bytes, which linear
/// interpolation follows exactly and log-log (a power law between the points) bends above.
/// Below the smallest size: the smallest's time (a message takes no less than its latency).
/// Beyond the largest: that size's time plus `slope_beyond` seconds per byte.
struct MeasuredTimes {
  std::vector<double> bytes{};    ///< strictly increasing; empty: no points (the line prices)
  std::vector<double> seconds{};  ///< the time at each size
  double slope_beyond = 0;        ///< seconds per byte past the largest size

  bool empty() const { return bytes.empty(); }
  /// The time of `size` bytes (see above); needs points.
  double at(double size) const;
  /// " points B:S,B:S,..." (each to the bit), "" without points: a model's values (spec()).
  std::string spec() const;
  /// "interpolating 9 measured sizes, 8 B to 512 KiB", "" without points.
  std::string describe() const;
};

/// Why these points cannot price messages ("size 8 is not increasing..."), or "" when they can:
/// as many sizes as times, at least two different sizes, finite sizes of 0 or more and finite
/// positive times.
std::string measured_times_problem(std::span<const double> bytes, std::span<const double> seconds);

/// The table of points (measured_times_problem must be ""): sorted by size, the times of
/// equal sizes averaged (the points of several pairs together; the mean per size is also what
/// the least-squares line of them all goes through). Beyond the largest size the slope of the
/// last two, or `fitted_beta` where that is not positive (noise at the top would otherwise make
/// larger messages free or cheaper).
MeasuredTimes measured_times(std::span<const double> bytes, std::span<const double> seconds,
                             double fitted_beta);

}  // namespace mbkit::train
