// The gnuplot script of a Figure, and gnuplot run as a subprocess (posix_spawnp, with the
// signals mbkit blocks unblocked in the child, its output to files of the private directory).
#include "mbkit/plot/gnuplot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "mbkit/plot/series.hpp"
#include "mbkit/plot/ticks.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

extern char** environ;

namespace mbkit::plot {
namespace {

// Okabe-Ito: told apart with the common colour-vision deficiencies and in greyscale print.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPaletteSize = 8;
// Curves beyond the palette repeat its colours with other dash patterns.
constexpr int kDashTypes = 4;
// Legends: sample left of its text, no frame, over the data it may hide.
constexpr const char* kKeyStyle = "reverse Left samplen 2.5 spacing 1.1 nobox opaque";
// Line series longer than this are thinned (see thin_indices).
constexpr std::size_t kMaxLinePoints = 5000;

std::string color_of(int index) {
  if (index < 0) return "#000000";  // references (ideal scaling)
  return kPalette[index % kPaletteSize];
}

int dash_of(int index) {
  return index < 0 ? 2 : 1 + (index / kPaletteSize) % kDashTypes;
}

// A gnuplot single-quoted string: no escapes but '' for a quote; newlines would end the
// command, so they become spaces.
std::string quote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') {
      out += "''";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Inf" : "-Inf";
  return strprintf("%.10g", value);
}

std::string data_file_name(std::size_t pane, std::size_t series) {
  return strprintf("pane%zu-%zu.dat", pane + 1, series + 1);
}

const char* key_place(KeyPlace place) {
  switch (place) {
    case KeyPlace::kTopRight:
      return "top right";
    case KeyPlace::kBottomRight:
      return "bottom right";
    case KeyPlace::kTopLeft:
      return "top left";
    case KeyPlace::kBottomLeft:
      return "bottom left";
  }
  return "top right";
}

std::string range(double low, double high) {
  return cat("[", std::isfinite(low) ? number(low) : "*", ":",
             std::isfinite(high) ? number(high) : "*", "]");
}

// The indices of a series' points that go into its data file.
std::vector<std::size_t> points_of(const Series& series) {
  const std::size_t count = std::min(series.x.size(), series.y.size());
  const bool line = series.style == SeriesStyle::kLine || series.style == SeriesStyle::kFaintLine;
  return thin_indices(count, line ? kMaxLinePoints : count);
}

std::string terminal_line(const Figure& figure, const DrawOptions& options) {
  const auto [width, height] = figure_size(figure, options);
  const std::string font = cat("'Helvetica,", number(options.font_size), "'");
  switch (options.format) {
    case ImageFormat::kPng: {
      const double scale = kPngDpi / 72.0;
      return cat("set terminal pngcairo size ", std::lround(width * kPngDpi), ",",
                 std::lround(height * kPngDpi), " font ", font, " fontscale ", number(scale),
                 " linewidth ", number(scale), " noenhanced background '#ffffff'");
    }
    case ImageFormat::kSvg:
      return cat("set terminal svg size ", std::lround(width * 72), ",", std::lround(height * 72),
                 " font ", font, " noenhanced background '#ffffff'");
    case ImageFormat::kPdf:
      return cat("set terminal pdfcairo size ", number(width), "in,", number(height), "in font ",
                 font, " noenhanced");
  }
  return "";
}

// The "with ..." clause of a series.
std::string style_of(const Series& series) {
  const std::string color = color_of(series.color);
  switch (series.style) {
    case SeriesStyle::kLine:
      return cat("with lines lw 1.6 dt ", dash_of(series.color), " lc rgb '", color, "'");
    case SeriesStyle::kLinePoints:
      // With a range: the same line and points, a bar from the range's low to its high.
      return cat("with ", series.has_range() ? "yerrorlines" : "linespoints",
                 " lw 1.6 pt 7 ps 0.6 dt ", dash_of(series.color), " lc rgb '", color, "'");
    case SeriesStyle::kFaintLine:
      // #AARRGGBB: 0xC0 of transparency.
      return cat("with lines lw 0.8 lc rgb '#C0", color.substr(1), "'");
    case SeriesStyle::kDashedLine:
      return cat("with lines lw 1.2 dt 2 lc rgb '", color, "'");
    case SeriesStyle::kBoxes:
      return cat("with boxes lc rgb '", color, "' fs transparent solid 0.35 border");
  }
  return "with lines";
}

// Character sizes in inches for a font size in points (Helvetica-like: digits about 0.55 em).
double char_height(double points) {
  return points / 72.0;
}
double char_width(double points) {
  return 0.55 * points / 72.0;
}

// The rows of a figure-wide legend of `entries` titles (the longest `longest` characters)
// across `width` inches.
std::size_t legend_rows(std::size_t entries, std::size_t longest, double width, double points) {
  // gnuplot lays the key out by its own estimate of a title's width, wider than the glyphs
  // (0.7 of the font size a character where they take 0.55 to 0.65): sized so, the strip holds
  // the rows gnuplot draws (a 30-character title: 2 columns in 11 inches, not 3).
  const double entry_width = 0.7 * points / 72.0 * static_cast<double>(longest + 8);
  const auto fit = static_cast<std::size_t>(std::max(1.0, std::floor(0.95 * width / entry_width)));
  const std::size_t columns = std::clamp<std::size_t>(fit, 1, std::max<std::size_t>(entries, 1));
  return (entries + columns - 1) / columns;
}

// A figure-wide legend: an empty plot over the strip [bottom, 1] of the figure whose key lists
// the entries (NaN draws nothing but gives the key its sample).
void write_legend_strip(std::ostream& out, const std::vector<Series>& legend, double bottom,
                        std::size_t rows) {
  std::vector<std::string> entries;
  for (const auto& series : legend) {
    if (!series.title.empty()) {
      entries.push_back(cat("NaN ", style_of(series), " title ", quote(series.title)));
    }
  }
  out << "\n# The legend of every pane\n"
      << "set origin 0, " << number(bottom) << "\nset size 1, " << number(1 - bottom) << "\n"
      << "unset arrow; unset label; unset logscale; unset xlabel; unset ylabel; unset grid\n"
      << "unset border; unset xtics; unset ytics\n"
      << "set lmargin 0; set rmargin 0; set tmargin 0; set bmargin 0\n"
      << "set xrange [0:1]; set yrange [0:1]\n"
      // At most the rows the strip was sized for: gnuplot's own estimate of a title's width
      // can give fewer columns, and the first rows would fall off the top.
      << "set key default\nset key " << kKeyStyle << "\nset key center center horizontal maxrows "
      << rows << "\n"
      << "plot " << join(entries, ", \\\n     ") << "\n";
}

// The extent of the finite y values of a pane's series.
std::pair<double, double> y_extent(const Pane& pane) {
  double low = INFINITY;
  double high = -INFINITY;
  for (const auto& series : pane.series) {
    for (const auto* values : {&series.y, &series.y_low, &series.y_high}) {
      for (const double y : *values) {
        if (std::isfinite(y)) {
          low = std::min(low, y);
          high = std::max(high, y);
        }
      }
    }
  }
  return {low, high};
}

// The plotting area of a pane of `size` inches: the pane less its axes' labels and margins
// (measured on gnuplot's cairo output at 10 points).
std::pair<double, double> plot_area(std::pair<double, double> size) {
  return {std::max(1.0, size.first - 1.4), std::max(0.8, size.second - 0.8)};
}

// Where a pane's legend goes ("" when it has none), and the top of its y range when the
// legend needs room above the data.
struct KeyLayout {
  std::string place;
  double ymax = kUnset;
};

KeyLayout lay_out_key(const Pane& pane, std::pair<double, double> size, double font_size,
                      bool alone) {
  std::size_t entries = 0;
  std::size_t longest = 0;
  for (const auto& series : pane.series) {
    if (series.title.empty()) continue;
    ++entries;
    longest = std::max(longest, series.title.size());
  }
  if (entries == 0) return {};
  // The legend's size against the plotting area (the pane less its axes' labels). Measured on
  // gnuplot's cairo output: a key is about 10 characters wider than its longest title, and
  // its lines 1.3 characters apart.
  const auto [area_width, area_height] = plot_area(size);
  const double key_width =
      1.1 * char_width(font_size) * static_cast<double>(longest + 10) / area_width;
  const double key_height = std::min(
      0.6, char_height(font_size) * (1.3 * static_cast<double>(entries) + 0.6) / area_height);
  const KeyChoice key = emptiest_corner(pane, key_width, key_height, pane.key);
  if (key.hidden == 0) return {key_place(key.place)};
  // Every corner would hide data. A figure of one pane takes its legend above the plot; a pane
  // of a panel (whose size must match its neighbours') makes room at its top instead.
  if (alone) return {"above horizontal"};
  const bool left = key.place == KeyPlace::kTopLeft || key.place == KeyPlace::kBottomLeft;
  KeyLayout layout{left ? "top left" : "top right"};
  const auto [low, high] = y_extent(pane);
  if (!pane.logy && !std::isfinite(pane.ymax) && std::isfinite(low) && high > low) {
    const double bottom = std::isfinite(pane.ymin) ? std::min(pane.ymin, low) : low;
    layout.ymax = high + (high - bottom) * 1.1 * key_height / (1 - key_height);
  }
  return layout;
}

// One pane of `size` inches: `place` sets its origin and size when the layout is by hand;
// `alone` when it is the whole figure.
void write_pane(std::ostream& out, const Pane& pane, std::size_t index,
                std::pair<double, double> size, double font_size, bool alone,
                const std::string& place = {}) {
  out << "\n# Pane " << index + 1 << ": " << pane.name << "\n" << place;
  // Reset what the previous pane set.
  out << "unset arrow; unset label; unset logscale; unset key\n"
      << "set xtics autofreq; set ytics autofreq; set format x '% h'; set format y '% h'\n";
  out << "set xlabel " << quote(pane.xlabel) << "\nset ylabel " << quote(pane.ylabel) << "\n";
  out << "set autoscale xfix\nset xrange " << range(pane.xmin, pane.xmax) << "\n";
  const KeyLayout key = lay_out_key(pane, size, font_size, alone);
  double ymin = pane.ymin;
  double ymax = std::isfinite(key.ymax) ? key.ymax : pane.ymax;
  const auto [low, high] = y_extent(pane);
  if (!std::isfinite(ymin) && !std::isfinite(ymax) && !pane.logy && std::isfinite(low) &&
      low == high) {
    // A constant (a fixed learning rate): from 0, not a sliver around the value.
    ymin = low > 0 ? 0.0 : (low < 0 ? 1.25 * low : -1.0);
    ymax = low > 0 ? 1.25 * low : (low < 0 ? 0.0 : 1.0);
  }
  out << "set yrange " << range(ymin, ymax) << "\n";
  if (pane.logx) out << "set logscale x\n";
  if (pane.logy) out << "set logscale y\n";
  if (!pane.xtics.empty()) {
    std::vector<std::string> tics;
    for (const double x : pane.xtics) tics.push_back(number(x));
    out << "set xtics (" << join(tics, ", ") << ")\n";
  } else if (!pane.logx) {
    // The x range as drawn (autoscale xfix: the data's, unless the pane fixes it).
    double first = pane.xmin;
    double last = pane.xmax;
    for (const auto& series : pane.series) {
      for (const double x : series.x) {
        if (!std::isfinite(x)) continue;
        if (!std::isfinite(pane.xmin)) first = std::isfinite(first) ? std::min(first, x) : x;
        if (!std::isfinite(pane.xmax)) last = std::isfinite(last) ? std::max(last, x) : x;
      }
    }
    if (std::isfinite(first) && std::isfinite(last) && last > first) {
      // Ticks as far apart as their labels need on this pane (counts: whole numbers only).
      const AxisTicks ticks =
          choose_ticks(first, last, plot_area(size).first, font_size, pane.integer_x);
      out << "set xtics " << number(ticks.step) << "\nset format x '%." << ticks.decimals << "f'\n";
    } else if (pane.integer_x) {
      out << "set format x '%.0f'\n";
    }
  }
  if (!key.place.empty()) {
    out << "set key default\nset key " << kKeyStyle << "\nset key " << key.place << "\n";
  }
  if (pane.box_width > 0) out << "set boxwidth " << number(pane.box_width) << " absolute\n";
  for (const auto& line : pane.vertical_lines) {
    out << "set arrow from " << number(line.x) << ", graph 0 to " << number(line.x)
        << ", graph 1 nohead dt 2 lw 1.2 lc rgb '" << color_of(line.color) << "' back\n";
  }
  for (const auto& line : pane.horizontal_lines) {
    out << "set arrow from graph 0, first " << number(line.y) << " to graph 1, first "
        << number(line.y) << " nohead dt 3 lw 1.5 lc rgb '#404040' back\n";
    if (!line.text.empty()) {
      out << "set label " << quote(line.text) << " at graph 0.02, first " << number(line.y)
          << " left offset 0,0.6 tc rgb '#404040' front\n";
    }
  }
  for (const auto& impulse : pane.impulses) {
    out << "set arrow from " << number(impulse.x) << ", first 0 to " << number(impulse.x)
        << ", first " << number(impulse.y) << " head filled size graph 0.02,20 lw 2 lc rgb '"
        << color_of(impulse.color) << "' front\n";
    // The text on the side of the arrow where the pane has room.
    const bool near_right = std::isfinite(pane.xmin) && std::isfinite(pane.xmax) &&
                            impulse.x > pane.xmin + 0.75 * (pane.xmax - pane.xmin);
    out << "set label " << quote(impulse.text) << " at " << number(impulse.x) << ", first "
        << number(impulse.y) << (near_right ? " right offset -0.6,0.3" : " left offset 0.6,0.3")
        << " tc rgb '" << color_of(impulse.color) << "' front\n";
  }
  std::vector<std::string> plots;
  for (std::size_t s = 0; s < pane.series.size(); ++s) {
    const Series& series = pane.series[s];
    const std::string style = style_of(series);
    const std::string title =
        series.title.empty() ? std::string("notitle") : "title " + quote(series.title);
    const std::string x =
        series.x_offset == 0 ? std::string("1") : cat("($1 + ", number(series.x_offset), ")");
    const std::string columns = series.has_range() ? ":2:3:4 " : ":2 ";
    plots.push_back(cat(quote(data_file_name(index, s)), " using ", x, columns, style, " ", title));
  }
  out << "plot " << join(plots, ", \\\n     ") << "\n";
}

// Removes the directory and everything in it at scope exit.
class PrivateDirectory {
 public:
  PrivateDirectory() {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string base = (tmpdir != nullptr && tmpdir[0] != '\0') ? tmpdir : "/tmp";
    std::string pattern = fs::join_path(base, "mb-plot-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) {
      fail(cat("cannot make a temporary directory in ", base, ": ", std::strerror(errno)));
    }
    path_ = pattern;
  }
  ~PrivateDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The line of gnuplot's standard error that says what went wrong: its '"plot.gp" line N: ...'
// error (not a warning) when there is one, else the first line that is not blank.
std::string gnuplot_message(const std::string& err) {
  static const std::regex kErrorLine(R"(line \d+: )");
  std::istringstream lines(err);
  std::string line;
  std::string first;
  std::string error;
  while (std::getline(lines, line)) {
    const std::string text(trim(line));
    if (text.empty()) continue;
    if (first.empty()) first = text;
    if (std::regex_search(text, kErrorLine) &&
        to_lower(text).find("warning") == std::string::npos) {
      error = text;
    }
  }
  if (!error.empty()) return error;
  return first.empty() ? "no message on its standard error" : first;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `program script` in `directory` with stdin from /dev/null and stdout/stderr into
// files there. Returns the wait status; throws when the program cannot be started.
int run_program(const std::string& program, const std::string& script, const std::string& directory,
                const std::string& out_path, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  if (int rc = posix_spawn_file_actions_init(&actions); rc != 0) {
    fail(cat("cannot run ", program, ": ", std::strerror(rc)));
  }
  if (int rc = posix_spawnattr_init(&attributes); rc != 0) {
    posix_spawn_file_actions_destroy(&actions);
    fail(cat("cannot run ", program, ": ", std::strerror(rc)));
  }
  // mbkit blocks SIGINT/SIGTERM/SIGHUP in its threads (util/signals.hpp) and a child would
  // inherit that mask: give gnuplot the default handling, so Ctrl-C stops it too.
  sigset_t none;
  sigset_t defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    sigaddset(&defaults, signal_number);
  }
  int rc = posix_spawnattr_setsigmask(&attributes, &none);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attributes, &defaults);
  if (rc == 0) {
    rc = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  if (rc == 0) {
    rc = posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  if (rc == 0) {
    rc = posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                          O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  if (rc == 0) {
    rc = posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                          O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  if (rc == 0) rc = posix_spawn_file_actions_addchdir_np(&actions, directory.c_str());
  pid_t pid = -1;
  if (rc == 0) {
    std::string program_arg = program;
    std::string script_arg = script;
    char* argv[] = {program_arg.data(), script_arg.data(), nullptr};
    rc = posix_spawnp(&pid, program.c_str(), &actions, &attributes, argv, environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc == ENOENT) {
    fail(cat("cannot run ", program, ": not found on PATH (Debian: apt-get install gnuplot-nox)"));
  }
  if (rc != 0) fail(cat("cannot run ", program, ": ", std::strerror(rc)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail(cat("cannot wait for ", program, ": ", std::strerror(errno)));
  }
  return status;
}

}  // namespace

ImageFormat image_format_of(const std::string& path, const std::string& option) {
  const std::string lower = to_lower(path);
  if (ends_with(lower, ".png")) return ImageFormat::kPng;
  if (ends_with(lower, ".svg")) return ImageFormat::kSvg;
  if (ends_with(lower, ".pdf")) return ImageFormat::kPdf;
  usage_error(cat(option, ": '", path, "' does not end in .png, .svg or .pdf"));
}

const char* extension_of(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return ".png";
    case ImageFormat::kSvg:
      return ".svg";
    case ImageFormat::kPdf:
      return ".pdf";
  }
  return ".png";
}

std::pair<double, double> figure_size(const Figure& figure, const DrawOptions& options) {
  if (options.width > 0 && options.height > 0) return {options.width, options.height};
  return {kPaneWidth * figure.columns, kPaneHeight * figure.rows};
}

std::string gnuplot_script(const Figure& figure, const DrawOptions& options,
                           const std::string& output) {
  std::ostringstream out;
  out << "# " << figure.type << " of " << join(figure.sources, ", ") << "\n"
      << "# Written by mb-plot; edit and run: gnuplot plot.gp (data: pane<P>-<S>.dat, x y)\n";
  out << terminal_line(figure, options) << "\n";
  out << "set output " << quote(output) << "\n";
  out << "set border 3 lw 1 lc rgb '#404040'\n"
      << "set tics nomirror out scale 0.6 tc rgb '#202020'\n"
      << "set grid back lw 0.8 lc rgb '#e8e8e8' dt 1\n"
      << "set key " << kKeyStyle << "\n";
  if (!figure.legend.empty() && figure.panes.size() > 1) {
    // Panes laid out by hand below one legend for all of them.
    std::size_t entries = 0;
    std::size_t longest = 1;
    for (const auto& series : figure.legend) {
      ++entries;
      longest = std::max(longest, series.title.size());
    }
    const auto [width, height] = figure_size(figure, options);
    const std::size_t rows = legend_rows(entries, longest, width, options.font_size);
    const double strip = std::min(
        0.4, (static_cast<double>(rows) * 1.3 + 0.8) * char_height(options.font_size) / height);
    const double pane_width = 1.0 / figure.columns;
    const double pane_height = (1.0 - strip) / figure.rows;
    out << "set multiplot\n";
    for (std::size_t p = 0; p < figure.panes.size(); ++p) {
      const auto row = static_cast<double>(p / static_cast<std::size_t>(figure.columns));
      const auto column = static_cast<double>(p % static_cast<std::size_t>(figure.columns));
      std::ostringstream place;
      place << "set origin " << number(column * pane_width) << ", "
            << number((figure.rows - 1 - row) * pane_height) << "\nset size " << number(pane_width)
            << ", " << number(pane_height) << "\n";
      write_pane(out, figure.panes[p], p, {width * pane_width, height * pane_height},
                 options.font_size, false, place.str());
    }
    write_legend_strip(out, figure.legend, 1.0 - strip, rows);
    out << "unset multiplot\n";
  } else {
    const auto [width, height] = figure_size(figure, options);
    const std::pair<double, double> size{width / figure.columns, height / figure.rows};
    const bool alone = figure.panes.size() == 1;
    if (!alone) out << "set multiplot layout " << figure.rows << "," << figure.columns << "\n";
    for (std::size_t p = 0; p < figure.panes.size(); ++p) {
      write_pane(out, figure.panes[p], p, size, options.font_size, alone);
    }
    if (!alone) out << "unset multiplot\n";
  }
  out << "set output\n";
  return out.str();
}

std::string write_gnuplot_files(const Figure& figure, const DrawOptions& options,
                                const std::string& directory, const std::string& output,
                                const std::string& script_name) {
  const auto write = [](const std::string& path, const std::string& text) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << text;
    file.close();
    if (!file) fail(cat("cannot write ", path, ": ", std::strerror(errno)));
  };
  for (std::size_t p = 0; p < figure.panes.size(); ++p) {
    const Pane& pane = figure.panes[p];
    for (std::size_t s = 0; s < pane.series.size(); ++s) {
      const Series& series = pane.series[s];
      std::ostringstream data;
      data << "# " << pane.name << ": " << (series.run.empty() ? series.title : series.run)
           << "\n# " << pane.xlabel << "\t" << pane.ylabel
           << (series.has_range() ? "\tlow\thigh" : "") << "\n";
      for (const std::size_t i : points_of(series)) {
        data << number(series.x[i]) << "\t" << number(series.y[i]);
        if (series.has_range()) {
          data << "\t" << number(series.y_low[i]) << "\t" << number(series.y_high[i]);
        }
        data << "\n";
      }
      write(fs::join_path(directory, data_file_name(p, s)), data.str());
    }
  }
  const std::string script = fs::join_path(directory, script_name);
  write(script, gnuplot_script(figure, options, output));
  return script;
}

void draw_with_gnuplot(const Figure& figure, const DrawOptions& options, const std::string& target,
                       const std::string& shown_name, const std::string& gnuplot) {
  const PrivateDirectory directory;
  const std::string absolute_target = std::filesystem::absolute(target).string();
  write_gnuplot_files(figure, options, directory.path(), absolute_target);
  const std::string out_path = fs::join_path(directory.path(), "gnuplot.out");
  const std::string err_path = fs::join_path(directory.path(), "gnuplot.err");
  const int status = run_program(gnuplot, "plot.gp", directory.path(), out_path, err_path);
  const std::string err = read_small_file(err_path);
  if (WIFSIGNALED(status)) {
    fail(cat(gnuplot, " was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
             ") drawing ", shown_name));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail(cat(gnuplot, " failed drawing ", shown_name, " (exit status ",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1, "): ", gnuplot_message(err)));
  }
  if (!fs::exists(target) || fs::file_size(target) == 0) {
    fail(cat(gnuplot, " wrote nothing drawing ", shown_name, ": ", gnuplot_message(err)));
  }
  if (!trim(err).empty()) log::verbose(cat(gnuplot, ": ", gnuplot_message(err)));
}

}  // namespace mbkit::plot
