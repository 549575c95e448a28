// The x axis' tick labels as gnuplot is told to draw them: for panes of several sizes, alone and
// in a panel, the labels (multiples of the step the script sets, printed with the format it
// sets) stand apart by more than their width. gnuplot's own spacing ran them together on the
// default panel's step axes ("100120140160180").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "mbkit/plot/figure.hpp"
#include "mbkit/plot/gnuplot.hpp"
#include "mbkit/plot/ticks.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

// The width of a digit in inches as mb-plot's PNGs draw it: 18 pixels at 150 dots per inch and
// 10 points (measured on the quickstart's figure).
double digit_width(double points) {
  return 0.12 * points / 10.0;
}

// A pane of steps first..last (a curve against the step, as mb-plot's default panel draws).
Pane step_pane(double first, double last) {
  Pane pane;
  pane.name = "loss-vs-step";
  pane.xlabel = "Step";
  pane.ylabel = "Training loss";
  pane.integer_x = true;
  Series series;
  series.title = "run";
  for (double x = first; x <= last; ++x) {
    series.x.push_back(x);
    series.y.push_back(1 / x);
  }
  pane.series.push_back(series);
  return pane;
}

// A pane of times 0..seconds (fractional).
Pane time_pane(double seconds) {
  Pane pane;
  pane.name = "loss-vs-time";
  pane.xlabel = "Time (s)";
  pane.ylabel = "Training loss";
  pane.xmin = 0;
  Series series;
  for (int i = 1; i <= 50; ++i) {
    series.x.push_back(seconds * i / 50);
    series.y.push_back(1.0 / i);
  }
  pane.series.push_back(series);
  return pane;
}

struct PaneTicks {
  double step = 0;
  std::string format;
};

// Each pane's "set xtics STEP" and "set format x 'FORMAT'", in the order of the panes.
std::vector<PaneTicks> ticks_in(const std::string& script) {
  std::vector<PaneTicks> panes;
  const std::regex pane_start("\n# Pane ");
  const std::regex step_line("\nset xtics ([0-9.e+-]+)\n");
  const std::regex format_line("\nset format x '([^']*)'\n");
  std::vector<std::size_t> starts;
  for (auto it = std::sregex_iterator(script.begin(), script.end(), pane_start);
       it != std::sregex_iterator(); ++it) {
    starts.push_back(static_cast<std::size_t>(it->position()));
  }
  starts.push_back(script.size());
  for (std::size_t p = 0; p + 1 < starts.size(); ++p) {
    const std::string text = script.substr(starts[p], starts[p + 1] - starts[p]);
    PaneTicks ticks;
    std::smatch match;
    if (std::regex_search(text, match, step_line)) ticks.step = std::stod(match[1]);
    // The last format set in the pane is the one in force.
    for (auto it = std::sregex_iterator(text.begin(), text.end(), format_line);
         it != std::sregex_iterator(); ++it) {
      ticks.format = (*it)[1];
    }
    panes.push_back(ticks);
  }
  return panes;
}

// The labels gnuplot draws: the multiples of `step` in [low, high], printed with the format
// ("%.<decimals>f", the only kind the script sets).
std::vector<std::string> labels_of(double low, double high, const PaneTicks& ticks) {
  std::smatch match;
  EXPECT_TRUE(std::regex_match(ticks.format, match, std::regex("%\\.([0-9]+)f"))) << ticks.format;
  const int decimals = match.empty() ? 0 : std::stoi(match[1]);
  std::vector<std::string> labels;
  for (double k = std::ceil(low / ticks.step - 1e-9); k * ticks.step <= high + 1e-9; ++k) {
    labels.push_back(strprintf("%.*f", decimals, k * ticks.step));
  }
  return labels;
}

// Every pane of `figure` drawn `pane_width` inches wide has labels at least a digit apart on an
// axis of its plotting width (the pane less about 1.4 in of y labels and margins), and at least
// two of them.
void expect_readable_ticks(const Figure& figure, const DrawOptions& options, double pane_width,
                           double low, double high) {
  const std::string script = gnuplot_script(figure, options, "fig.png");
  const auto panes = ticks_in(script);
  ASSERT_EQ(panes.size(), figure.panes.size()) << script;
  const double axis = pane_width - 1.4;
  for (std::size_t p = 0; p < panes.size(); ++p) {
    SCOPED_TRACE(cat("pane ", p + 1, " of ", pane_width, " in"));
    ASSERT_GT(panes[p].step, 0) << "no tick spacing set:\n" << script;
    ASSERT_FALSE(panes[p].format.empty()) << script;
    const auto labels = labels_of(low, high, panes[p]);
    EXPECT_GE(labels.size(), 2u) << "step " << panes[p].step;
    std::size_t widest = 0;
    for (const auto& label : labels) widest = std::max(widest, label.size());
    const double spacing = axis * panes[p].step / (high - low);
    EXPECT_GE(spacing, digit_width(options.font_size) * static_cast<double>(widest + 1))
        << "labels " << join(labels, " ") << " on " << axis << " in";
  }
}

TEST(Ticks, StepAxesOfPanelsOfSeveralSizes) {
  // The default panel: six panes, three a row, one legend above them.
  for (const double width : {9.0, 13.5, 20.0}) {
    Figure figure;
    figure.type = "panel";
    for (int p = 0; p < 6; ++p) figure.panes.push_back(step_pane(100, 190));
    figure.legend.push_back(figure.panes[0].series[0]);
    lay_out(figure);
    ASSERT_EQ(figure.columns, 3);
    DrawOptions options;
    options.width = width;
    options.height = width * 0.5;
    expect_readable_ticks(figure, options, width / 3, 100, 190);
  }
}

TEST(Ticks, SinglePanesOfSeveralSizesAndRanges) {
  // Whole steps up to 9999 (from 10000 mb-plot counts them in thousands); the widest labels
  // on panes wide enough for two of them.
  for (const double width : {3.5, 4.5, 8.0}) {
    for (const double last : {9.0, 190.0, 4700.0, 9999.0}) {
      if (last == 9999 && width < 4) continue;
      Figure figure;
      figure.type = "loss-vs-step";
      figure.panes.push_back(step_pane(1, last));
      lay_out(figure);
      DrawOptions options;
      options.width = width;
      options.height = 3;
      SCOPED_TRACE(cat("steps 1..", last));
      expect_readable_ticks(figure, options, width, 1, last);
    }
  }
  Figure times;
  times.type = "loss-vs-time";
  times.panes.push_back(time_pane(1234.5));
  lay_out(times);
  DrawOptions options;
  options.width = 3;
  options.height = 3;
  expect_readable_ticks(times, options, 3, 0, 1234.5);
}

TEST(Ticks, CountsTickWholeNumbersOnly) {
  const AxisTicks ticks = choose_ticks(1, 3, 8, 10, true);
  EXPECT_EQ(ticks.step, 1);
  EXPECT_EQ(tick_labels(1, 3, ticks), (std::vector<std::string>{"1", "2", "3"}));
  const AxisTicks fine = choose_ticks(0, 0.3, 8, 10, false);
  EXPECT_LT(fine.step, 0.3);
  EXPECT_EQ(fine.decimals, 2);
}

}  // namespace
}  // namespace mbkit::plot
