#include "mbkit/plot/figure.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

std::string csv_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return strprintf("%.10g", value);
}

}  // namespace

namespace {

struct Extent {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  bool valid() const { return low < high; }
};

}  // namespace

KeyChoice emptiest_corner(const Pane& pane, double width, double height, KeyPlace preferred) {
  // Everything in the axes' coordinates (log10 for a log y axis).
  const auto y_of = [&](double y) {
    if (!pane.logy) return y;
    return y > 0 ? std::log10(y) : -std::numeric_limits<double>::infinity();
  };
  Extent xs;
  Extent ys;
  for (const auto& series : pane.series) {
    for (const double x : series.x) xs.add(x + series.x_offset);
    for (const double y : series.y) ys.add(y_of(y));
    for (const double y : series.y_low) ys.add(y_of(y));
    for (const double y : series.y_high) ys.add(y_of(y));
    if (series.style == SeriesStyle::kBoxes && !pane.logy) ys.add(0);
  }
  for (const auto& impulse : pane.impulses) ys.add(y_of(impulse.y));
  if (std::isfinite(pane.xmin)) xs.low = pane.xmin;
  if (std::isfinite(pane.xmax)) xs.high = pane.xmax;
  if (std::isfinite(pane.ymin)) ys.low = y_of(pane.ymin);
  if (std::isfinite(pane.ymax)) ys.high = y_of(pane.ymax);
  if (!xs.valid() || !ys.valid()) return {preferred, 0};
  const auto u = [&](double x) { return (x - xs.low) / (xs.high - xs.low); };
  const auto v = [&](double y) { return (y - ys.low) / (ys.high - ys.low); };
  const KeyPlace corners[] = {preferred, KeyPlace::kTopRight, KeyPlace::kTopLeft,
                              KeyPlace::kBottomRight, KeyPlace::kBottomLeft};
  KeyChoice best{preferred, std::numeric_limits<double>::infinity()};
  for (const KeyPlace corner : corners) {
    const bool top = corner == KeyPlace::kTopRight || corner == KeyPlace::kTopLeft;
    const bool right = corner == KeyPlace::kTopRight || corner == KeyPlace::kBottomRight;
    const auto in_x = [&](double fx) { return right ? fx >= 1 - width : fx <= width; };
    const auto in_y = [&](double fy) { return top ? fy >= 1 - height : fy <= height; };
    double score = 0;
    for (const auto& series : pane.series) {
      const std::size_t n = std::min(series.x.size(), series.y.size());
      if (series.style == SeriesStyle::kBoxes) {
        // A bar covers [0, y] over its width: it is under a top legend when it reaches up
        // into it, under a bottom one when it is there at all.
        const double half = pane.box_width / 2 / (xs.high - xs.low);
        for (std::size_t i = 0; i < n; ++i) {
          const double fx = u(series.x[i] + series.x_offset);
          if (!(series.y[i] > 0) || !(in_x(fx - half) || in_x(fx + half))) continue;
          if (!top || in_y(v(y_of(series.y[i])))) score += 3;
        }
        continue;
      }
      // Lines: their points and points along each segment.
      const auto count = [&](double x, double y) {
        const double fx = u(x);
        const double fy = v(y_of(y));
        if (std::isfinite(fx) && std::isfinite(fy) && in_x(fx) && in_y(fy)) score += 1;
      };
      const std::size_t stride = std::max<std::size_t>(1, n / 400);
      for (std::size_t i = 0; i + 1 < n; i += stride) {
        const std::size_t j = std::min(i + stride, n - 1);
        for (int k = 0; k < 8; ++k) {
          const double t = k / 8.0;
          count(series.x[i] + t * (series.x[j] - series.x[i]),
                series.y[i] + t * (series.y[j] - series.y[i]));
        }
      }
      if (n > 0) count(series.x[n - 1], series.y[n - 1]);
      // Error bars: their ends.
      for (std::size_t i = 0; i < n && i < series.y_low.size() && i < series.y_high.size(); ++i) {
        count(series.x[i], series.y_low[i]);
        count(series.x[i], series.y_high[i]);
      }
    }
    for (const auto& line : pane.vertical_lines) score += in_x(u(line.x)) ? 4 : 0;
    for (const auto& impulse : pane.impulses) {
      if (in_x(u(impulse.x)) && (!top || in_y(v(y_of(impulse.y))))) score += 4;
    }
    // Another corner only when it hides less.
    const double penalty = corner == preferred ? 0.0 : 0.5;
    if (score + penalty < best.hidden + (best.place == preferred ? 0.0 : 0.5)) {
      best = {corner, score};
    }
  }
  return best;
}

void lay_out(Figure& figure) {
  const int n = static_cast<int>(figure.panes.size());
  if (n <= 3) {
    figure.rows = 1;
    figure.columns = std::max(n, 1);
  } else if (n == 4) {
    figure.rows = 2;
    figure.columns = 2;
  } else {
    figure.columns = 3;
    figure.rows = (n + 2) / 3;
  }
}

void write_csv(const Figure& figure, std::ostream& out) {
  out << "pane,series,x_label,x,y_label,y\n";
  for (const auto& pane : figure.panes) {
    for (const auto& series : pane.series) {
      if (series.style == SeriesStyle::kFaintLine) continue;
      const std::string prefix =
          cat(csv_quote(pane.name), ",", csv_quote(series.run.empty() ? series.title : series.run),
              ",", csv_quote(pane.xlabel), ",");
      for (std::size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
        out << prefix << csv_number(series.x[i]) << "," << csv_quote(pane.ylabel) << ","
            << csv_number(series.y[i]) << "\n";
      }
    }
  }
}

}  // namespace mbkit::plot
