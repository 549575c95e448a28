// Drawing a Figure with gnuplot: a script and one data file per series, written where the user
// asks (--script DIR, to edit and re-run) or in a private temporary directory from which gnuplot
// is run as a subprocess. gnuplot is a program, not a library, so mbkit neither links a plotting
// library nor needs one to build; Debian's gnuplot-nox has the cairo terminals (pngcairo,
// pdfcairo) and svg.
#pragma once

#include <string>

#include "mbkit/plot/figure.hpp"

namespace mbkit::plot {

enum class ImageFormat { kPng, kSvg, kPdf };

/// The format an output's extension names (.png, .svg, .pdf, any case); a usage error naming
/// `option` otherwise.
ImageFormat image_format_of(const std::string& path, const std::string& option);
const char* extension_of(ImageFormat format);

struct DrawOptions {
  ImageFormat format = ImageFormat::kPng;
  /// Size of the whole figure in inches; 0: kPaneWidth x kPaneHeight per pane.
  double width = 0;
  double height = 0;
  double font_size = 10;  ///< points
};

/// The default size of one pane, in inches (readable at the width of a paper's column pair).
inline constexpr double kPaneWidth = 4.5;
inline constexpr double kPaneHeight = 3.2;
/// Resolution of PNG output: fonts and lines are scaled so that a PNG looks like the PDF.
inline constexpr double kPngDpi = 150;

/// The figure's size in inches: the options' or the default per pane.
std::pair<double, double> figure_size(const Figure& figure, const DrawOptions& options);

/// Writes `directory`/`script_name` and the data files it reads (pane<P>-<S>.dat, relative
/// to the directory gnuplot runs in) into an existing directory; the script draws into
/// `output` (written into the script as given). Returns the script's path.
std::string write_gnuplot_files(const Figure& figure, const DrawOptions& options,
                                const std::string& directory, const std::string& output,
                                const std::string& script_name = "plot.gp");

/// The script text alone (for tests).
std::string gnuplot_script(const Figure& figure, const DrawOptions& options,
                           const std::string& output);

/// Draws `figure` into `target` (normally an AtomicOutput's temporary), running `gnuplot` on
/// files in a private temporary directory under $TMPDIR that is removed afterwards. Errors name
/// gnuplot and `shown_name` (the output the user asked for): gnuplot not installed, gnuplot
/// failing (with the line of its standard error that says why), or no output written.
void draw_with_gnuplot(const Figure& figure, const DrawOptions& options, const std::string& target,
                       const std::string& shown_name, const std::string& gnuplot = "gnuplot");

}  // namespace mbkit::plot
