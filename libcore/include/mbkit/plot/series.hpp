// The arithmetic behind mb-plot's figures, kept apart from files and gnuplot so that it can be
// tested on its own: smoothing, histogram bins, time units, thinning, the straggler density,
// and throughput scaling.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {

// ------------------------------------------------------------------------------------------
// Curves

/// Exponentially weighted mean with span `span` (points): alpha = 2 / (span + 1), weights
/// normalised over the points seen so far (pandas' ewm(span).mean() with adjust=True), so the
/// first points are not pulled towards zero. span <= 1 returns the values unchanged.
/// Non-finite values are gaps: they stay as they are and do not enter the mean.
std::vector<double> smooth(const std::vector<double>& values, double span);

/// Running sum.
std::vector<double> cumulative_sum(const std::vector<double>& values);

/// Indices of at most `max_points` points spread evenly over [0, count), always with the
/// first and the last: long runs are drawn from fewer points (figures stay small, the curve's
/// shape does not change at the size a figure is seen).
std::vector<std::size_t> thin_indices(std::size_t count, std::size_t max_points);

/// The middle value (mean of the two middle ones for an even count); NaN when empty.
double median(std::vector<double> values);
/// The q-quantile (0 <= q <= 1) of the finite values, interpolating linearly between order
/// statistics; NaN when there are none.
double quantile(std::vector<double> values, double q);
double mean(const std::vector<double>& values);

// ------------------------------------------------------------------------------------------
// Time units

// Time units of axes and labels: TimeUnit, choose_time_unit and short_duration are in
// mbkit/util/strings.hpp (the trainers print durations the same way).
using mbkit::choose_time_unit;
using mbkit::short_duration;
using mbkit::TimeUnit;

/// Large counts (samples, samples per second) read in thousands or millions: the divisor and
/// its prefix ("", "k" from 10^4, "M" from 10^6) for values up to `max_abs`.
struct CountScale {
  double divisor = 1;
  std::string prefix;
};
CountScale choose_count_scale(double max_abs);

/// Parses a duration for --xmax: a plain number (seconds), or a number followed by ms, s,
/// min or h ("30min", "1.5h"). Throws a usage error naming `what`.
double parse_duration(const std::string& text, const std::string& what);

// ------------------------------------------------------------------------------------------
// Histograms

/// Equal-width bins: bin i covers [first_edge + i width, first_edge + (i + 1) width).
struct Bins {
  double first_edge = 0;
  double width = 1;
  std::size_t count = 1;
  double centre(std::size_t i) const { return first_edge + (static_cast<double>(i) + 0.5) * width; }
};

struct BinRequest {
  /// Counts (samples, staleness): bins of whole numbers, centred on them (width 1, or a whole
  /// width when there are more than kMaxIntegerBins values between min and max).
  bool integer_valued = false;
  /// Start at 0 (durations) rather than at the smallest value.
  bool from_zero = false;
  /// The number of bins; 0: Freedman-Diaconis on all the samples together, within [5, 100].
  int bins = 0;
  /// Values above it are left out of the bins (they still count in the fractions); NaN: none.
  double upper = std::numeric_limits<double>::quiet_NaN();
};

inline constexpr std::size_t kMaxIntegerBins = 60;

/// Common bins for several runs' values (so that their histograms overlay); the finite values
/// only. At least one bin, even for no values or a single distinct value.
Bins choose_bins(const std::vector<std::vector<double>>& samples, const BinRequest& request);

/// The fraction of all (finite) values in each bin; values outside the bins count in the total
/// but in no bin.
std::vector<double> bin_fractions(const std::vector<double>& values, const Bins& bins);

// ------------------------------------------------------------------------------------------
// Induced stragglers

/// The density of min(cap, |N(mean, std)|) over the mixture's components with std > 0, at
/// x >= 0 (below the cap): sum of weight * [N(x; mean, std) + N(-x; mean, std)], per second.
double straggler_density(const emulation::StragglerProfile& profile, double x);

/// The profile drawn: its continuous part on a grid over [0, cap], and its point masses (the
/// components with std = 0, delay = min(cap, |mean|)), each with its weight.
struct StragglerCurve {
  std::vector<double> x;        ///< seconds
  std::vector<double> density;  ///< per second
  struct Impulse {
    double x = 0;
    double weight = 0;
  };
  std::vector<Impulse> impulses;  ///< components at the same delay are merged
  double cap = 0;
};

/// Samples the density at `points` points (plus the means of the components, so that narrow
/// peaks are not missed).
StragglerCurve straggler_curve(const emulation::StragglerProfile& profile,
                               std::size_t points = 801);

// ------------------------------------------------------------------------------------------
// Scaling

/// The steps a throughput median leaves out at the start of a run: `requested` when >= 0,
/// otherwise a tenth of the steps, at least 1 (the first step pays for allocation and
/// start-up) unless the run has a single step.
std::size_t warmup_steps(std::size_t steps, int requested);

/// A run's throughput over its steps after the warm-up, as tf_cnn_benchmarks' get_perf_timing
/// reports it, with the median that the scaling figure uses.
struct ThroughputStats {
  std::size_t steps = 0;   ///< the steps measured: after the warm-up, with a finite rate
  double median = 0;       ///< median of the per-step samples/s
  double mean = 0;         ///< their samples over their seconds (tf_cnn_benchmarks' images/sec)
  double uncertainty = 0;  ///< standard deviation of the per-step rates / sqrt(steps)
  double jitter = 0;       ///< 1.4826 x the median absolute deviation of the per-step rates
};

/// The statistics of steps `skip`.. of equal-length /steps columns samples, step_time and
/// throughput; steps without a finite rate (an emulated step of no time) are left out. NaN
/// everywhere when no step is left.
ThroughputStats throughput_stats(const std::vector<double>& samples,
                                 const std::vector<double>& seconds,
                                 const std::vector<double>& throughput, std::size_t skip = 0);

struct ScalingPoint {
  double workers = 0;
  double throughput = 0;  ///< samples per second
};

struct ScalingRow {
  double workers = 0;
  double throughput = 0;
  /// throughput / the throughput of the fewest workers, times that number of workers: the
  /// speedup over one worker when the smallest run has one, else assuming the smallest run
  /// scaled perfectly.
  double speedup = 0;
  double efficiency = 0;  ///< speedup / workers (1 = perfect)
};

/// One row per worker count, in increasing order; several runs with the same count give the
/// median of their throughputs.
std::vector<ScalingRow> scaling_table(const std::vector<ScalingPoint>& points);

/// Several runs (seeds) of one setting at one x: the mean of their finite values and the
/// smallest and largest of them.
struct MeanPoint {
  double x = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  std::size_t count = 0;  ///< the finite values averaged
};

/// One point per distinct x of `x` (paired with `values`), in increasing order; an x whose
/// values are all NaN (runs that never got there) gives none.
std::vector<MeanPoint> mean_by_x(const std::vector<double>& x, const std::vector<double>& values);

}  // namespace mbkit::plot
