// The figure types of mb-plot drawn from the benchmark tools' files instead of metric logs:
//
//   partitions            the AMB original's two log-log panels from mb-bench-partitions -o:
//                         time per step against the micro-batches P, and time per sample
//                         against the micro-batch size B/P, a line per batch size B (the median
//                         over every rank's timed steps);
//   bandwidth-vs-workers  the original's "communication time against number of workers" from
//                         mb-bench-bandwidth --append files: time of an iteration against the
//                         ranks, a line per operation (or exchange mode) and size.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "mbkit/plot/figure.hpp"

namespace mbkit::plot {

/// The names above, in the order --list-types prints them.
const std::vector<std::string>& bench_figure_names();
/// True for the names above.
bool is_bench_figure(const std::string& type);
/// Lines for mb-plot --list-types, in its columns.
void list_bench_figures(std::ostream& out);
/// The figure of `type` from the files at `paths` (data errors name a file that is not of the
/// kind the type reads).
Figure bench_figure(const std::string& type, const std::vector<std::string>& paths);

}  // namespace mbkit::plot
