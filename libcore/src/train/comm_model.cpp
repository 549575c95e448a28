#include "mbkit/train/comm_model.hpp"

#include <algorithm>
#include <cmath>

#include "mbkit/config.hpp"
#include "mbkit/io/format.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

namespace {

constexpr const char* kFormat = "mbkit-comm-model";
constexpr int kFormatVersion = 1;
constexpr const char* kPairsGroup = "pairs";
constexpr const char* kAllreduceGroup = "allreduce";
constexpr const char* kStreamGroup = "stream";
constexpr const char* kAsyncGroup = "async";
constexpr const char* kPsRoundGroup = "ps_round";

double squared(double x) {
  return x * x;
}

// Apart by more than three standard errors of the difference and by more than 10% of the
// larger: the first keeps noise from splitting pairs, the second tiny errors of many points.
bool values_differ(double a, double a_stderr, double b, double b_stderr) {
  const double apart = std::abs(a - b);
  return apart > 3 * std::sqrt(squared(a_stderr) + squared(b_stderr)) &&
         apart > 0.1 * std::max(std::abs(a), std::abs(b));
}

}  // namespace

CommModelFit fit_comm_model(std::span<const double> bytes, std::span<const double> seconds) {
  if (bytes.size() != seconds.size()) {
    usage_error(cat("message model: ", bytes.size(), " sizes for ", seconds.size(), " times"));
  }
  const std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (!(std::isfinite(bytes[i]) && bytes[i] >= 0)) {
      usage_error(cat("message model: size ", bytes[i], " is not a number of bytes"));
    }
    if (!(std::isfinite(seconds[i]) && seconds[i] > 0)) {
      usage_error(cat("message model: time ", seconds[i], " s for ", bytes[i],
                      " bytes is not a positive number"));
    }
  }
  // Centred sums: the normal equations lose digits with sizes in the millions and times in
  // microseconds.
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean_x += bytes[i];
    mean_y += seconds[i];
  }
  mean_x /= static_cast<double>(std::max<std::size_t>(n, 1));
  mean_y /= static_cast<double>(std::max<std::size_t>(n, 1));
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = bytes[i] - mean_x, dy = seconds[i] - mean_y;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  if (n < 2 || !(sxx > 0)) {
    usage_error("message model: fitting alpha + beta * bytes needs at least two different sizes");
  }
  CommModelFit fit;
  fit.beta = sxy / sxx;
  fit.alpha = mean_y - fit.beta * mean_x;
  bool through_origin = false;
  double xx = 0;
  if (fit.alpha < 0) {
    // A negative latency is noise around a small one (it would make small messages free or
    // worse): the least-squares line with alpha >= 0 is then the one through the origin.
    double xy = 0;
    for (std::size_t i = 0; i < n; ++i) {
      xx += bytes[i] * bytes[i];
      xy += bytes[i] * seconds[i];
    }
    fit.alpha = 0;
    fit.beta = xy / xx;
    through_origin = true;
  }
  double residual_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    residual_sum += squared(fit.alpha + fit.beta * bytes[i] - seconds[i]);
  }
  fit.r_squared = syy > 0 ? 1.0 - residual_sum / syy : 1.0;
  // Standard errors of the textbook line (n - 2 degrees of freedom); through the origin, of
  // beta alone (n - 1) and alpha's is 0 (fixed).
  const double freedom = static_cast<double>(n) - (through_origin ? 1.0 : 2.0);
  if (freedom > 0) {
    const double variance = residual_sum / freedom;
    if (through_origin) {
      fit.beta_stderr = std::sqrt(variance / xx);
    } else {
      fit.beta_stderr = std::sqrt(variance / sxx);
      fit.alpha_stderr =
          std::sqrt(variance * (1.0 / static_cast<double>(n) + squared(mean_x) / sxx));
    }
  }
  return fit;
}

std::string min_r_squared_problem(double value) {
  if (!std::isfinite(value) || value <= 0 || value > 1) {
    return cat(value, " is not an r^2 above 0 and at most 1");
  }
  return {};
}

std::string comm_fit_problem(const CommModelFit& fit, double min_r_squared) {
  if (!std::isfinite(fit.alpha)) return cat("alpha = ", fit.alpha, " is not finite");
  if (!std::isfinite(fit.beta)) return cat("beta = ", fit.beta, " is not finite");
  if (fit.alpha < 0) return cat("alpha = ", fit.alpha, " s is negative");
  if (fit.beta < 0) return cat("beta = ", fit.beta, " s per byte is negative");
  if (!(fit.alpha + fit.beta > 0)) return "alpha and beta are both 0";
  if (!(fit.r_squared >= min_r_squared)) {
    return cat("r^2 = ", strprintf("%.4f", fit.r_squared), " is below ", min_r_squared,
               " (the times do not follow a line)");
  }
  return {};
}

std::string points_and_line_problem(const std::vector<double>& bytes,
                                    const std::vector<double>& seconds, const CommModelFit& fit) {
  // Measured points price, and the line only prints beside them and gives a slope beyond the
  // largest size where the last two points do not (clamped at 0): a line off its points (r^2
  // below the messages' bar, or a negative intercept) is no reason to drop them.
  if (bytes.empty()) return comm_fit_problem(fit);
  if (const std::string problem = measured_times_problem(bytes, seconds); !problem.empty()) {
    return cat("the measured points: ", problem);
  }
  if (!std::isfinite(fit.alpha)) return cat("alpha = ", fit.alpha, " is not finite");
  if (!std::isfinite(fit.beta)) return cat("beta = ", fit.beta, " is not finite");
  return {};
}

// A slack and a tick per point (or none: a file from before the busy passes).
static std::string busy_passes_problem(const std::vector<double>& seconds,
                                       const std::vector<double>& slacks,
                                       const std::vector<double>& ticks) {
  if (slacks.empty() && ticks.empty()) return {};
  if (slacks.size() != seconds.size() || ticks.size() != seconds.size()) {
    return cat(slacks.size(), " slacks and ", ticks.size(), " ticks for ", seconds.size(),
               " sizes");
  }
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    const double slack = slacks[i], tick = ticks[i];
    if (!std::isfinite(slack) || slack < 0 || slack > seconds[i]) {
      return cat("a slack of ", slack, " s for a round of ", seconds[i], " s");
    }
    if (!std::isfinite(tick) || tick < 0) return cat("a tick of ", tick, " s");
  }
  return {};
}

std::string allreduce_problem(const CommAllreduceRecord& allreduce) {
  if (std::string problem =
          points_and_line_problem(allreduce.bytes, allreduce.seconds, allreduce.fit);
      !problem.empty()) {
    return problem;
  }
  return busy_passes_problem(allreduce.seconds, allreduce.slack, allreduce.tick);
}

std::string stream_problem(const CommStreamRecord& stream) {
  return points_and_line_problem(stream.bytes, stream.seconds, stream.fit);
}

std::string async_cycle_problem(const CommAsyncRecord& cycle) {
  if (cycle.bytes.empty()) return "no measured points";
  if (std::string problem = points_and_line_problem(cycle.bytes, cycle.seconds, cycle.fit);
      !problem.empty()) {
    return problem;
  }
  if (cycle.busy_seconds.size() != cycle.seconds.size()) {
    return cat(cycle.busy_seconds.size(), " busy times for ", cycle.seconds.size(), " sizes");
  }
  for (const double busy : cycle.busy_seconds) {
    if (!std::isfinite(busy) || busy <= 0) return cat("a busy time of ", busy, " s");
  }
  return {};
}

std::string ps_round_problem(const CommPsRoundRecord& round) {
  if (round.bytes.empty()) return "no measured points";
  if (std::string problem = points_and_line_problem(round.bytes, round.seconds, round.fit);
      !problem.empty()) {
    return problem;
  }
  return busy_passes_problem(round.seconds, round.slack, round.tick);
}

int stream_window(std::size_t bytes) {
  const std::size_t fits = kStreamWindowBytes / std::max<std::size_t>(bytes, 1);
  return static_cast<int>(std::clamp<std::size_t>(fits, kStreamMinWindow, kStreamMaxWindow));
}

bool fits_differ(const CommModelFit& a, const CommModelFit& b) {
  return values_differ(a.alpha, a.alpha_stderr, b.alpha, b.alpha_stderr) ||
         values_differ(a.beta, a.beta_stderr, b.beta, b.beta_stderr);
}

void fit_pairs(CommModelRecords& records) {
  std::vector<double> all_bytes, all_seconds;
  for (CommPairRecord& pair : records.pairs) {
    pair.fit = fit_comm_model(pair.bytes, pair.seconds);
    all_bytes.insert(all_bytes.end(), pair.bytes.begin(), pair.bytes.end());
    all_seconds.insert(all_seconds.end(), pair.seconds.begin(), pair.seconds.end());
  }
  records.all = fit_comm_model(all_bytes, all_seconds);
  if (records.allreduce.ranks > 0) {
    records.allreduce.fit = fit_comm_model(records.allreduce.bytes, records.allreduce.seconds);
  }
  if (records.stream.window > 0) {
    records.stream.fit = fit_comm_model(records.stream.bytes, records.stream.seconds);
  }
  if (records.async_cycle.window > 0) {
    records.async_cycle.fit =
        fit_comm_model(records.async_cycle.bytes, records.async_cycle.seconds);
  }
  if (records.ps_round.ranks > 0) {
    records.ps_round.fit = fit_comm_model(records.ps_round.bytes, records.ps_round.seconds);
  }
  records.per_pair = false;
  for (std::size_t i = 0; i < records.pairs.size(); ++i) {
    for (std::size_t j = i + 1; j < records.pairs.size(); ++j) {
      if (fits_differ(records.pairs[i].fit, records.pairs[j].fit)) records.per_pair = true;
    }
  }
}

namespace {

std::string pair_name(const CommPairRecord& pair) {
  return cat("ranks ", pair.rank_a, "-", pair.rank_b);
}

void set_fit(io::Object& object, const CommModelFit& fit) {
  object.set_attribute("alpha", fit.alpha);
  object.set_attribute("beta", fit.beta);
  object.set_attribute("r_squared", fit.r_squared);
  object.set_attribute("alpha_stderr", fit.alpha_stderr);
  object.set_attribute("beta_stderr", fit.beta_stderr);
}

double finite_attribute(const io::Object& object, const char* name) {
  const double value = object.double_attribute(name);
  if (!std::isfinite(value)) data_error(cat(object.describe(), ": '", name, "' is not finite"));
  return value;
}

CommModelFit read_fit(const io::Object& object) {
  CommModelFit fit;
  fit.alpha = finite_attribute(object, "alpha");
  fit.beta = finite_attribute(object, "beta");
  fit.r_squared = finite_attribute(object, "r_squared");
  fit.alpha_stderr = finite_attribute(object, "alpha_stderr");
  fit.beta_stderr = finite_attribute(object, "beta_stderr");
  return fit;
}

// The measured points (bytes, seconds): optional (a file without them is priced by its line),
// but both or neither, and where there, points that can price messages.
void read_points(const io::Object& object, std::vector<double>& bytes,
                 std::vector<double>& seconds) {
  const bool has_bytes = object.has_attribute("bytes");
  if (has_bytes != object.has_attribute("seconds")) {
    data_error(cat(object.describe(), ": '", has_bytes ? "bytes" : "seconds", "' without '",
                   has_bytes ? "seconds" : "bytes", "' (the measured points need both)"));
  }
  if (!has_bytes) return;
  bytes = object.double_array_attribute("bytes");
  seconds = object.double_array_attribute("seconds");
  if (const std::string problem = measured_times_problem(bytes, seconds); !problem.empty()) {
    data_error(cat(object.describe(), ": the measured points: ", problem));
  }
}

void set_points(io::Object& object, const std::vector<double>& bytes,
                const std::vector<double>& seconds) {
  // The points are few (one per size): attributes, so the file needs no chunked data.
  if (bytes.empty()) return;
  object.set_attribute("bytes", bytes);
  object.set_attribute("seconds", seconds);
}

/// A group of measured messages (the allreduce's, the stream's): its count attribute (`ranks`,
/// `window`), its fitted line and its points.
void write_measured(io::File& file, const std::string& name, const char* count_name, int count,
                    const CommModelFit& fit, const std::vector<double>& bytes,
                    const std::vector<double>& seconds) {
  io::Group group = file.create_group(name);
  group.set_attribute(count_name, count);
  set_fit(group, fit);
  set_points(group, bytes, seconds);
}

/// A measured group's busy passes (CommPsRoundRecord), where it has them.
void write_busy_passes(io::File& file, const std::string& name, const std::vector<double>& slack,
                       const std::vector<double>& tick) {
  if (slack.empty()) return;
  io::Group group = file.open_group(name);
  group.set_attribute("slack_seconds", slack);
  group.set_attribute("tick_seconds", tick);
}

/// Both or neither: files from before the busy passes have neither (a step is then priced as
/// compute + round).
void read_busy_passes(const io::Group& group, std::vector<double>& slack,
                      std::vector<double>& tick) {
  const bool has_slack = group.has_attribute("slack_seconds");
  if (has_slack != group.has_attribute("tick_seconds")) {
    data_error(cat(group.describe(), ": '", has_slack ? "slack_seconds" : "tick_seconds",
                   "' without '", has_slack ? "tick_seconds" : "slack_seconds", "'"));
  }
  if (!has_slack) return;
  slack = group.double_array_attribute("slack_seconds");
  tick = group.double_array_attribute("tick_seconds");
}

std::vector<CommModel::RoundAtSize> rounds_at_sizes(const std::vector<double>& bytes,
                                                    const std::vector<double>& seconds,
                                                    const std::vector<double>& slack,
                                                    const std::vector<double>& tick) {
  std::vector<CommModel::RoundAtSize> rounds;
  for (std::size_t i = 0; i < slack.size(); ++i) {
    rounds.push_back({bytes[i], seconds[i], slack[i], tick[i]});
  }
  return rounds;
}

/// A group's window: its count of `what` (messages, gradients) a timed window, 1 or more.
int read_window(const io::Group& group, const char* what) {
  const std::int64_t window = group.int_attribute("window");
  if (window < 1 || window > 1'000'000) {
    data_error(cat(group.describe(), ": 'window' is ", window, ", not a number of ", what,
                   " of 1 or more"));
  }
  return static_cast<int>(window);
}

void require_usable(const io::Object& object, const CommModelFit& fit, const std::string& what,
                    double min_r_squared) {
  if (const std::string problem = comm_fit_problem(fit, min_r_squared); !problem.empty()) {
    data_error(cat(object.describe(), " (", what, "): ", problem, ": not a usable message model"));
  }
}

}  // namespace

void write_comm_model(const std::string& path, const CommModelRecords& records) {
  if (records.pairs.empty()) fail(cat("message model ", path, ": no measurement to write"));
  // Before the temporary exists: an unusable model is not written at all.
  const auto refuse = [&](const std::string& what, const std::string& problem) {
    fail(cat("not writing the message model ", path, ": the fit of ", what, ": ", problem,
             "; a wider size range (-b, -e), more --iters or a quieter machine give a usable "
             "model"));
  };
  // Where the pairs differ each pair's fit is the model (that of all together, of points off
  // one line, is only shown); otherwise the fit of all together is.
  if (const std::string problem = min_r_squared_problem(records.min_r_squared); !problem.empty()) {
    fail(cat("message model ", path, ": the least r^2 ", problem));
  }
  if (const std::string problem = comm_fit_problem(records.all, records.min_r_squared);
      !records.per_pair && !problem.empty()) {
    refuse("every pair together", problem);
  }
  if (records.per_pair) {
    for (const CommPairRecord& pair : records.pairs) {
      if (const std::string problem = comm_fit_problem(pair.fit, records.min_r_squared);
          !problem.empty()) {
        refuse(pair_name(pair), problem);
      }
    }
  }
  fs::AtomicOutput output(path);
  io::File file = io::File::create(output.temp_path());
  file.set_attribute("format", kFormat);
  file.set_attribute("format_version", kFormatVersion);
  file.set_attribute("created_by", cat("mbkit ", MBKIT_VERSION));
  file.set_attribute("created", records.created);
  file.set_attribute("ranks", records.ranks);
  file.set_attribute("hosts", records.hosts);
  file.set_attribute("cpu_models", records.cpu_models);
  std::vector<std::string> libraries;
  for (const auto& [name, version] : records.library_versions) {
    libraries.push_back(cat(name, " ", version));
  }
  file.set_attribute("libraries", libraries);
  file.set_attribute("per_pair", static_cast<std::int64_t>(records.per_pair ? 1 : 0));
  file.set_attribute("min_r_squared", records.min_r_squared);
  set_fit(file, records.all);
  io::Group pairs = file.create_group(kPairsGroup);
  for (std::size_t i = 0; i < records.pairs.size(); ++i) {
    const CommPairRecord& record = records.pairs[i];
    io::Group pair = pairs.create_group(std::to_string(i));
    pair.set_attribute("rank_a", record.rank_a);
    pair.set_attribute("rank_b", record.rank_b);
    set_fit(pair, record.fit);
    set_points(pair, record.bytes, record.seconds);
  }
  if (const CommAllreduceRecord& allreduce = records.allreduce;
      allreduce.ranks > 0 && allreduce_problem(allreduce).empty()) {
    write_measured(file, kAllreduceGroup, "ranks", allreduce.ranks, allreduce.fit, allreduce.bytes,
                   allreduce.seconds);
    write_busy_passes(file, kAllreduceGroup, allreduce.slack, allreduce.tick);
  }
  if (const CommStreamRecord& stream = records.stream;
      stream.window > 0 && stream_problem(stream).empty()) {
    write_measured(file, kStreamGroup, "window", stream.window, stream.fit, stream.bytes,
                   stream.seconds);
  }
  if (const CommAsyncRecord& cycle = records.async_cycle;
      cycle.window > 0 && async_cycle_problem(cycle).empty()) {
    write_measured(file, kAsyncGroup, "window", cycle.window, cycle.fit, cycle.bytes,
                   cycle.seconds);
    file.open_group(kAsyncGroup).set_attribute("busy_seconds", cycle.busy_seconds);
  }
  if (const CommPsRoundRecord& round = records.ps_round;
      round.ranks > 0 && ps_round_problem(round).empty()) {
    write_measured(file, kPsRoundGroup, "ranks", round.ranks, round.fit, round.bytes,
                   round.seconds);
    write_busy_passes(file, kPsRoundGroup, round.slack, round.tick);
  }
  file.close();
  output.commit();
}

CommModelRecords read_comm_model(const std::string& path) {
  const io::File file = io::File::open(path);
  try {
    io::check_format(file, kFormat, kFormatVersion, "message model");
    CommModelRecords records;
    const std::int64_t ranks = file.int_attribute("ranks");
    if (ranks < 2 || ranks > 1'000'000) {
      data_error(cat(path, ": 'ranks' is ", ranks, ", not a number of ranks of 2 or more"));
    }
    records.ranks = static_cast<int>(ranks);
    records.hosts = file.string_array_attribute("hosts");
    records.cpu_models = file.string_array_attribute("cpu_models");
    records.created = file.string_attribute("created");
    for (const std::string& line : file.string_array_attribute("libraries")) {
      const auto space = line.find(' ');
      records.library_versions.emplace_back(
          line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1));
    }
    records.per_pair = file.int_attribute("per_pair") != 0;
    // Files from before --min-r-squared have none: the default bar.
    if (file.has_attribute("min_r_squared")) {
      records.min_r_squared = file.double_attribute("min_r_squared");
      if (const std::string problem = min_r_squared_problem(records.min_r_squared);
          !problem.empty()) {
        data_error(cat(file.describe(), ": 'min_r_squared' ", problem));
      }
    }
    records.all = read_fit(file);
    if (!records.per_pair) {
      require_usable(file, records.all, "every pair together", records.min_r_squared);
    }
    const io::Group pairs = file.open_group(kPairsGroup);
    const std::size_t expected =
        static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks - 1) / 2;
    if (pairs.member_names().size() != expected) {
      data_error(cat(path, ": /", kPairsGroup, " holds ", pairs.member_names().size(),
                     " pairs, not the ", expected, " of ", ranks, " ranks"));
    }
    std::size_t index = 0;
    for (int a = 0; a < ranks; ++a) {
      for (int b = a + 1; b < ranks; ++b, ++index) {
        const std::string name = std::to_string(index);
        if (!pairs.has(name)) {
          data_error(cat(path, ": /", kPairsGroup, " has no pair named ", name));
        }
        const io::Group group = pairs.open_group(name);
        CommPairRecord pair;
        pair.rank_a = static_cast<int>(group.int_attribute("rank_a"));
        pair.rank_b = static_cast<int>(group.int_attribute("rank_b"));
        if (pair.rank_a != a || pair.rank_b != b) {
          data_error(cat(group.describe(), ": ranks ", pair.rank_a, "-", pair.rank_b,
                         " where pair ", a, "-", b, " belongs"));
        }
        pair.fit = read_fit(group);
        if (records.per_pair) {
          require_usable(group, pair.fit, pair_name(pair), records.min_r_squared);
        }
        read_points(group, pair.bytes, pair.seconds);
        records.pairs.push_back(std::move(pair));
      }
    }
    // Files from before --fit timed the allreduce have none: the ring of messages times it.
    if (file.has(kAllreduceGroup)) {
      const io::Group group = file.open_group(kAllreduceGroup);
      CommAllreduceRecord& allreduce = records.allreduce;
      const std::int64_t allreduce_ranks = group.int_attribute("ranks");
      if (allreduce_ranks != ranks) {
        data_error(cat(group.describe(), ": an allreduce of ", allreduce_ranks,
                       " ranks in a measurement of ", ranks));
      }
      allreduce.ranks = static_cast<int>(allreduce_ranks);
      allreduce.fit = read_fit(group);
      read_points(group, allreduce.bytes, allreduce.seconds);
      read_busy_passes(group, allreduce.slack, allreduce.tick);
      if (const std::string problem = allreduce_problem(allreduce); !problem.empty()) {
        data_error(
            cat(group.describe(), " (the allreduce): ", problem, ": not a usable allreduce model"));
      }
    }
    // Files from before --fit streamed messages have none: the line prices them too.
    if (file.has(kStreamGroup)) {
      const io::Group group = file.open_group(kStreamGroup);
      CommStreamRecord& stream = records.stream;
      stream.window = read_window(group, "messages");
      stream.fit = read_fit(group);
      read_points(group, stream.bytes, stream.seconds);
      if (const std::string problem = stream_problem(stream); !problem.empty()) {
        data_error(cat(group.describe(), " (the streamed messages): ", problem,
                       ": not a usable stream model"));
      }
    }
    // Files from before --fit timed the async cycle have none: streamed messages price it.
    if (file.has(kAsyncGroup)) {
      const io::Group group = file.open_group(kAsyncGroup);
      CommAsyncRecord& cycle = records.async_cycle;
      cycle.window = read_window(group, "gradients");
      cycle.fit = read_fit(group);
      read_points(group, cycle.bytes, cycle.seconds);
      if (!group.has_attribute("busy_seconds")) {
        data_error(cat(group.describe(), ": no 'busy_seconds'"));
      }
      cycle.busy_seconds = group.double_array_attribute("busy_seconds");
      if (const std::string problem = async_cycle_problem(cycle); !problem.empty()) {
        data_error(
            cat(group.describe(), " (the async cycle): ", problem, ": not a usable async model"));
      }
    }
    // Files from before --fit timed the ps round have none: the line prices its messages.
    if (file.has(kPsRoundGroup)) {
      const io::Group group = file.open_group(kPsRoundGroup);
      CommPsRoundRecord& round = records.ps_round;
      const std::int64_t round_ranks = group.int_attribute("ranks");
      if (round_ranks != ranks) {
        data_error(cat(group.describe(), ": a ps round of ", round_ranks,
                       " ranks in a measurement of ", ranks));
      }
      round.ranks = static_cast<int>(round_ranks);
      round.fit = read_fit(group);
      read_points(group, round.bytes, round.seconds);
      read_busy_passes(group, round.slack, round.tick);
      if (const std::string problem = ps_round_problem(round); !problem.empty()) {
        data_error(
            cat(group.describe(), " (the ps round): ", problem, ": not a usable ps round model"));
      }
    }
    return records;
  } catch (const Error&) {
    io::rethrow_as_damaged_file(path);
  }
}

CommModel comm_model_of(const CommModelRecords& records, const std::string& path) {
  CommModel model;
  model.alpha = records.all.alpha;
  model.beta = records.all.beta;
  model.file = path;
  // A message is priced by the line, the allreduce by its measured points (measured_times.hpp).
  // The ping-pong's points are isolated round trips: on a shaped veth link (README, setting 2)
  // their small sizes cost a 4 ms floor that the trainers' exchanges did not pay, and pricing
  // the ps, AMB and async messages by them moved those runs further from the real ones than
  // the line did; the allreduce's points time the trainers' own operation, and brought its
  // runs closer.
  if (records.allreduce.ranks > 0) {
    model.allreduce_ranks = records.allreduce.ranks;
    model.allreduce_alpha = records.allreduce.fit.alpha;
    model.allreduce_beta = records.allreduce.fit.beta;
    if (!records.allreduce.bytes.empty()) {
      model.allreduce_points = measured_times(records.allreduce.bytes, records.allreduce.seconds,
                                              records.allreduce.fit.beta);
    }
    model.allreduce_busy = rounds_at_sizes(records.allreduce.bytes, records.allreduce.seconds,
                                           records.allreduce.slack, records.allreduce.tick);
  }
  // Streamed messages (a sender that does not wait for a reply) by the stream's own points
  // (else its line): they pay no isolated round trip's latency each, and the line through 8 B
  // .. 16 MB has an intercept of milliseconds on a shaped link (README, setting 2) that no
  // message of a stream costs (virtual_clock.hpp, CommModel::streamed).
  if (records.stream.window > 0) {
    model.streams = true;
    model.stream_alpha = records.stream.fit.alpha;
    model.stream_beta = records.stream.fit.beta;
    if (!records.stream.bytes.empty()) {
      model.stream_points =
          measured_times(records.stream.bytes, records.stream.seconds, records.stream.fit.beta);
    }
  }
  // The asynchronous exchange by its own measured cycle, where the file has one: the period of
  // a gradient out and the parameters back, and the CPU its messages take on the worker's core
  // (CommModel::async_cycle, async_sender).
  if (const CommAsyncRecord& cycle = records.async_cycle; cycle.window > 0) {
    model.async_cycles = true;
    model.async_points = measured_times(cycle.bytes, cycle.seconds, cycle.fit.beta);
    model.async_busy_points = measured_times(cycle.bytes, cycle.busy_seconds, cycle.fit.beta);
  }
  // The synchronous ps exchange of a run of as many ranks by its own measured round: the
  // trainers' reduce and broadcast as they call them, with their waits (CommModel::ps_message).
  if (const CommPsRoundRecord& round = records.ps_round; round.ranks > 0) {
    model.ps_round_ranks = round.ranks;
    model.ps_round_alpha = round.fit.alpha;
    model.ps_round_beta = round.fit.beta;
    model.ps_round_points = measured_times(round.bytes, round.seconds, round.fit.beta);
    model.ps_round_busy = rounds_at_sizes(round.bytes, round.seconds, round.slack, round.tick);
  }
  if (records.per_pair) {
    const auto n = static_cast<std::size_t>(records.ranks);
    model.pair_ranks = records.ranks;
    model.pair_alpha.assign(n * n, 0.0);
    model.pair_beta.assign(n * n, 0.0);
    for (const CommPairRecord& pair : records.pairs) {
      for (const auto& [i, j] :
           {std::pair(pair.rank_a, pair.rank_b), std::pair(pair.rank_b, pair.rank_a)}) {
        const std::size_t at = static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j);
        model.pair_alpha[at] = pair.fit.alpha;
        model.pair_beta[at] = pair.fit.beta;
      }
    }
  }
  return model;
}

void check_comm_model_for_run(const CommModel& model, int ranks, bool async_or_dbsl) {
  if (model.pair_ranks == 0) return;
  if (model.pair_ranks != ranks) {
    data_error(cat(model.file, ": a model per pair of ", model.pair_ranks, " ranks, for a run of ",
                   ranks, " ranks; measure this run's ranks (mpirun -n ", ranks,
                   " mb-bench-bandwidth --fit)"));
  }
  if (async_or_dbsl) {
    usage_error(cat("--comm-model ", model.file,
                    ": its pairs differ (a model per pair), which times synchronous ps and "
                    "allreduce only; --async and mb-train-dbsl take one model for all: "
                    "--comm-model ",
                    model.spec().substr(0, model.spec().find(' '))));
  }
}

}  // namespace mbkit::train
