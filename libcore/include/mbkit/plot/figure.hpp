// A figure as data: panes of labelled axes holding series, independent of how it is drawn.
// Figure types (figure_types.hpp) build these from logs; the gnuplot writer (gnuplot.hpp)
// draws them and write_csv() dumps their series, so a new figure type needs no drawing code.
#pragma once

#include <cstddef>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace mbkit::plot {

enum class SeriesStyle {
  kLine,        ///< a curve
  kLinePoints,  ///< a curve through marked points (few points: evaluations, scaling)
  kFaintLine,   ///< the raw data behind a smoothed curve
  kDashedLine,  ///< a reference (ideal speedup)
  kBoxes,       ///< histogram bars of width Pane::box_width, centred on x
};

struct Series {
  std::string title;  ///< legend entry ("" for none)
  std::string run;    ///< the run (or reference) it shows, for the CSV
  std::vector<double> x;
  std::vector<double> y;
  int color = 0;  ///< index into the palette: the run's, so a run keeps its colour in a panel
  SeriesStyle style = SeriesStyle::kLine;
  double x_offset = 0;  ///< drawn shifted by this (bars of several runs side by side)
  /// The range around each y (the smallest and largest of several seeds' runs that y is the
  /// mean of), drawn as error bars; empty for none, else as long as y.
  std::vector<double> y_low{};
  std::vector<double> y_high{};
  bool has_range() const { return !y_low.empty() && !y_high.empty(); }
};

/// A vertical dashed line across the pane (a histogram's mean).
struct VerticalLine {
  double x = 0;
  int color = 0;
};

/// A horizontal dotted line across the pane, its text above its left end (a target accuracy).
struct HorizontalLine {
  double y = 0;
  std::string text;
};

/// An arrow up from the x axis to y, with a text at its head (a point mass of a distribution).
struct Impulse {
  double x = 0;
  double y = 0;
  std::string text;
  int color = 0;
};

/// Where a pane's legend goes: where its data leave room.
enum class KeyPlace { kTopRight, kBottomRight, kTopLeft, kBottomLeft };

inline constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

struct Pane {
  std::string name;  ///< the figure type it shows ("loss-vs-step")
  std::string xlabel;
  std::string ylabel;
  std::vector<Series> series;
  std::vector<VerticalLine> vertical_lines;
  std::vector<HorizontalLine> horizontal_lines;
  std::vector<Impulse> impulses;
  double box_width = 0;  ///< for kBoxes series
  bool logx = false;
  bool logy = false;
  double xmin = kUnset, xmax = kUnset, ymin = kUnset, ymax = kUnset;
  std::vector<double> xtics;  ///< explicit tick positions (worker counts); empty: automatic
  bool integer_x = false;     ///< x is a count: no fractional ticks
  KeyPlace key = KeyPlace::kTopRight;  ///< shown when some series has a title
};

struct Figure {
  std::string type;  ///< the figure type asked for
  std::vector<Pane> panes;
  int rows = 1;
  int columns = 1;
  /// One legend for all panes, above them (panels of several runs, each in the same colour
  /// in every pane): an entry per run, drawn with its style and title.
  std::vector<Series> legend;
  std::vector<std::string> sources;  ///< the logs it was made from, for the script's header
};

/// Where a legend goes in a pane: the corner where it hides the least data (points, bars and
/// marks under it), `preferred` among equals; `hidden` counts what it hides there.
struct KeyChoice {
  KeyPlace place = KeyPlace::kTopRight;
  double hidden = 0;
};
/// `width` and `height`: the legend's size as fractions of the pane's plotting area.
KeyChoice emptiest_corner(const Pane& pane, double width, double height, KeyPlace preferred);

/// rows x columns for n panes: one row up to 3, then 3 per row (4 -> 2 x 2).
void lay_out(Figure& figure);

/// Writes every series as CSV: pane,series,x_label,x,y_label,y, one row per point, values as
/// drawn (x in the axis' unit). Faint copies of smoothed data are left out.
void write_csv(const Figure& figure, std::ostream& out);

}  // namespace mbkit::plot
