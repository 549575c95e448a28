#include "mbkit/emulation/straggler.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <string_view>
#include <system_error>
#include <utility>

#include "mbkit/util/check.hpp"

namespace mbkit::emulation {

namespace {

constexpr double kMaxCap = 1024.0;
constexpr const char* kInduceFormat = "MEAN:STD:WEIGHT,... or exp:MEAN";
// An exponential component's cap, in means (see straggler.hpp).
constexpr double kExponentialCap = 30.0;
constexpr const char* kSlowdownFormat = "RANK=FACTOR,...";
constexpr const char* kCpuQuotaFormat = "RANK=QUOTA/PERIOD,... (seconds)";

// Keeps the sampler's stream apart from the other Rng(seed, rank) streams of a run (data
// order, initialisation), so that inducing stragglers changes nothing else.
constexpr std::uint64_t kSamplerSeedMix = 0x5712a66e5ULL;

[[noreturn]] void induce_error(const std::string& text, const std::string& detail) {
  std::string message = cat("--induce: '", text, "' is not NAME (", known_straggler_profiles(),
                            ") or ", kInduceFormat);
  if (!detail.empty()) message += ": " + detail;
  usage_error(message);
}

[[noreturn]] void slowdown_error(const std::string& text, const std::string& detail) {
  usage_error(cat("--slowdown: '", text, "' is not ", kSlowdownFormat, ": ", detail));
}

[[noreturn]] void cpu_quota_error(const std::string& text, const std::string& detail) {
  usage_error(cat("--cpu-quota: '", text, "' is not ", kCpuQuotaFormat, ": ", detail));
}

// The whole field as a finite decimal, or nullopt: no blanks, no '+', no hex (from_chars).
std::optional<double> read_number(std::string_view field) {
  double value = 0;
  const auto* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  if (field.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value + 0.0;  // -0 -> 0, so that spec() never writes "-0"
}

std::optional<int> read_rank(std::string_view field) {
  int value = 0;
  const auto* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  if (field.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

// Weights that already sum to 1 up to rounding are kept as they are, so that the weights
// spec() writes read back bit for bit instead of being divided again by 1 +- an ulp.
void normalise_weights(std::vector<StragglerComponent>& components) {
  double total = 0;
  for (const auto& component : components) total += component.weight;
  if (std::abs(total - 1.0) <= 1e-12) return;
  for (auto& component : components) component.weight /= total;
}

StragglerProfile make_profile(std::string name, std::vector<StragglerComponent> components) {
  normalise_weights(components);
  return {std::move(name), std::move(components)};
}

StragglerProfile niagara() {
  return make_profile("niagara", {{0, 0, 0.4}, {0, 0.4, 0.3}, {2, 0.3, 0.2}, {5, 0.3, 0.1}});
}

StragglerProfile cedar() {
  return make_profile("cedar",
                      {{0, 0, 0.4}, {0.05, 0.04, 0.3}, {0.15, 0.03, 0.2}, {0.25, 0.03, 0.1}});
}

StragglerProfile parse_components(const std::string& text) {
  std::vector<StragglerComponent> components;
  bool some_weight = false;
  const auto items = split(text, ',');
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (item.empty()) induce_error(text, cat("component ", i + 1, " is empty"));
    auto fields = split(item, ':');
    const bool exponential = !fields.empty() && fields[0] == "exp";
    if (exponential) {
      fields.erase(fields.begin());
      // exp:MEAN alone is the whole profile; in a list each exponential item has a weight.
      if (fields.size() == 1 && items.size() == 1) fields.emplace_back("1");
      if (fields.size() != 2) {
        induce_error(text, cat("'", item, "' is not exp:MEAN:WEIGHT (or exp:MEAN alone)"));
      }
      fields.insert(fields.begin() + 1, "0");  // an exponential has no std of its own
    }
    if (fields.size() != 3) induce_error(text, cat("'", item, "' does not have 3 fields"));
    double values[3] = {};
    static const char* const kNames[3] = {"mean", "std", "weight"};
    for (int k = 0; k < 3; ++k) {
      const auto value = read_number(fields[static_cast<std::size_t>(k)]);
      if (!value)
        induce_error(text, cat("'", fields[static_cast<std::size_t>(k)], "' is not a number"));
      if (*value < 0) {
        induce_error(text, cat(kNames[k], " ", shortest_decimal(*value), " is negative"));
      }
      values[k] = *value;
    }
    if (exponential && !(values[0] > 0)) {
      induce_error(text, cat("'", item, "': an exponential's mean must be positive"));
    }
    if (values[2] > 0) some_weight = true;
    components.push_back({values[0], values[1], values[2], exponential});
  }
  if (!some_weight) induce_error(text, "no weight is positive");
  const bool one_exponential = components.size() == 1 && components[0].exponential;
  return make_profile(one_exponential ? "exponential" : "custom", std::move(components));
}

// P(N(0, 1) > x) and the standard normal density.
double upper_tail(double x) {
  return 0.5 * std::erfc(x / std::sqrt(2.0));
}

double density(double x) {
  return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}

// E[min(cap, |N(mean, std)|)]: the folded-normal density integrated piecewise over [0, cap]
// (y = mean + std z on the positive side, y = std z - mean on the mirrored one), plus cap
// times the probability of reaching the cap.
double capped_folded_mean(double mean, double stddev, double cap) {
  if (stddev == 0) return std::min(cap, mean);
  const double a = -mean / stddev;
  const double b = (cap - mean) / stddev;
  const double a2 = mean / stddev;
  const double b2 = (cap + mean) / stddev;
  const double positive =
      mean * (upper_tail(a) - upper_tail(b)) + stddev * (density(a) - density(b));
  const double mirrored =
      stddev * (density(a2) - density(b2)) - mean * (upper_tail(a2) - upper_tail(b2));
  const double beyond = cap * (upper_tail(b) + upper_tail(b2));
  return positive + mirrored + beyond;
}

}  // namespace

double StragglerProfile::cap() const {
  double longest = 0;
  for (const auto& component : components) {
    longest = std::max(longest, component.exponential ? kExponentialCap * component.mean
                                                      : component.mean + 5 * component.std);
  }
  return std::min(kMaxCap, longest);
}

double StragglerProfile::expected_delay() const {
  const double limit = cap();
  double total = 0;
  for (const auto& component : components) {
    if (!(component.weight > 0)) continue;
    // E[min(c, Exp(m))] = m (1 - e^(-c/m)).
    total += component.weight * (component.exponential
                                     ? component.mean * -std::expm1(-limit / component.mean)
                                     : capped_folded_mean(component.mean, component.std, limit));
  }
  return total;
}

double StragglerProfile::cdf(double x) const {
  if (x < 0) return 0;
  if (x >= cap()) return 1;
  double total = 0, weights = 0;
  for (const auto& c : components) {
    weights += c.weight;
    if (!(c.weight > 0)) continue;
    if (c.exponential) {
      total += c.weight * -std::expm1(-x / c.mean);
    } else if (c.std == 0) {
      total += std::abs(c.mean) <= x ? c.weight : 0.0;
    } else {  // |N(mean, std)| <= x: N within [-x, x]
      total += c.weight * (upper_tail((-x - c.mean) / c.std) - upper_tail((x - c.mean) / c.std));
    }
  }
  return weights > 0 ? total / weights : 1.0;
}

double StragglerProfile::expected_max(int n) const {
  MBKIT_CHECK(n >= 1, "the largest of ", n, " delays");
  // The integral of 1 - F(x)^n over [0, cap], by Simpson's rule between the points where F
  // jumps (a component of std 0), fine enough that the error is far below a microsecond.
  const double limit = cap();
  std::vector<double> breaks = {0.0, limit};
  for (const auto& c : components) {
    if (!c.exponential && c.std == 0 && std::abs(c.mean) > 0 && std::abs(c.mean) < limit) {
      breaks.push_back(std::abs(c.mean));
    }
  }
  std::sort(breaks.begin(), breaks.end());
  const auto above = [&](double x) { return 1.0 - std::pow(cdf(x), n); };
  constexpr int kIntervals = 20000;  // even, per piece
  double total = 0;
  for (std::size_t piece = 0; piece + 1 < breaks.size(); ++piece) {
    const double a = breaks[piece], b = breaks[piece + 1];
    if (!(b > a)) continue;
    const double h = (b - a) / kIntervals;
    // F's value just inside the piece: a jump at its left end belongs to the piece.
    double sum = above(a + h * 1e-9) + above(b - h * 1e-9);
    for (int i = 1; i < kIntervals; ++i) sum += above(a + h * i) * (i % 2 == 1 ? 4.0 : 2.0);
    total += sum * h / 3.0;
  }
  return total;
}

std::string StragglerProfile::describe() const {
  std::vector<std::string> parts;
  for (const auto& component : components) {
    parts.push_back(component.exponential
                        ? strprintf("exp:%g:%g", component.mean, component.weight)
                        : strprintf("%g:%g:%g", component.mean, component.std, component.weight));
  }
  return strprintf("%s: %s (cap %g s, mean %.3g s)", name.c_str(), join(parts, ", ").c_str(), cap(),
                   expected_delay());
}

std::string StragglerProfile::spec() const {
  std::vector<std::string> parts;
  for (const auto& component : components) {
    parts.push_back(
        component.exponential
            ? cat("exp:", shortest_decimal(component.mean), ":", shortest_decimal(component.weight))
            : cat(shortest_decimal(component.mean), ":", shortest_decimal(component.std), ":",
                  shortest_decimal(component.weight)));
  }
  return join(parts, ",");
}

std::optional<StragglerProfile> parse_straggler_profile(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text == "niagara") return niagara();
  if (text == "cedar") return cedar();
  // Only text with a ':' can have been meant as components: say what is wrong with them.
  if (text.find(':') == std::string::npos) induce_error(text, "");
  return parse_components(text);
}

std::string known_straggler_profiles() {
  return "niagara, cedar";
}

StragglerSampler::StragglerSampler(StragglerProfile profile, std::uint64_t seed, int rank)
    : profile_(std::move(profile)),
      cap_(profile_.cap()),
      rng_(seed ^ kSamplerSeedMix, static_cast<std::uint64_t>(rank)) {
  MBKIT_CHECK(rank >= 0, "straggler sampler for rank ", rank);
  MBKIT_CHECK(!profile_.components.empty(), "straggler profile without components");
  double total = 0;
  for (const auto& component : profile_.components) {
    MBKIT_CHECK(component.weight >= 0, "negative straggler weight ", component.weight);
    total += component.weight;
    cumulative_.push_back(total);
  }
  MBKIT_CHECK(total > 0, "straggler profile without a positive weight");
}

double StragglerSampler::next() {
  // One uniform picks the component, then one normal is drawn from it (also for std 0,
  // so that every step takes the same kind of draws).
  const double u = rng_.uniform() * cumulative_.back();
  auto index = static_cast<std::size_t>(
      std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
  if (index == cumulative_.size()) {
    // u rounded up to the total: the last component with a positive weight.
    index = static_cast<std::size_t>(
        std::lower_bound(cumulative_.begin(), cumulative_.end(), cumulative_.back()) -
        cumulative_.begin());
  }
  const auto& component = profile_.components[index];
  if (component.exponential) return std::min(cap_, -component.mean * std::log1p(-rng_.uniform()));
  return std::min(cap_, std::abs(rng_.normal(component.mean, component.std)));
}

double message_delay(double std, std::uint64_t seed, int worker, std::int64_t round) {
  MBKIT_CHECK(worker >= 0 && round >= 0, "message delay of worker ", worker, " round ", round);
  Rng rng(seed ^ 0xc0de1a7ULL,
          (static_cast<std::uint64_t>(worker) << 32) | static_cast<std::uint64_t>(round));
  return std * std::abs(rng.normal());
}

double Slowdown::factor_for(int rank) const {
  const auto found = factors.find(rank);
  return found == factors.end() ? 1.0 : found->second;
}

double Slowdown::extra_delay(int rank, double compute_seconds) const {
  return (factor_for(rank) - 1.0) * compute_seconds;
}

void Slowdown::check_ranks(int world_size) const {
  for (const auto& [rank, factor] : factors) {
    if (rank >= world_size) {
      usage_error(cat("--slowdown: rank ", rank, " does not exist (", world_size,
                      world_size == 1 ? " worker" : " workers", ")"));
    }
  }
}

std::string Slowdown::describe() const {
  if (factors.empty()) return "none";
  std::vector<std::string> parts;
  for (const auto& [rank, factor] : factors) {
    parts.push_back(cat("rank ", rank, " x", shortest_decimal(factor)));
  }
  return join(parts, ", ");
}

Slowdown parse_slowdown(const std::string& text) {
  Slowdown slowdown;
  if (text.empty()) return slowdown;
  const auto items = split(text, ',');
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (item.empty()) slowdown_error(text, cat("item ", i + 1, " is empty"));
    const auto fields = split(item, '=');
    if (fields.size() != 2) slowdown_error(text, cat("'", item, "' is not RANK=FACTOR"));
    const auto rank = read_rank(fields[0]);
    if (!rank) slowdown_error(text, cat("'", fields[0], "' is not a rank"));
    const auto factor = read_number(fields[1]);
    if (!factor) slowdown_error(text, cat("'", fields[1], "' is not a number"));
    if (!(*factor >= 1)) {
      slowdown_error(text,
                     cat("factor ", shortest_decimal(*factor), " of rank ", *rank, " is below 1"));
    }
    if (!slowdown.factors.emplace(*rank, *factor).second) {
      slowdown_error(text, cat("rank ", *rank, " is given twice"));
    }
  }
  return slowdown;
}

std::optional<QuotaWindow> CpuQuota::for_rank(int rank) const {
  const auto found = windows.find(rank);
  if (found == windows.end()) return std::nullopt;
  return found->second;
}

std::optional<QuotaBudget> CpuQuota::budget_for(int rank, double busy_wait) const {
  const auto window = for_rank(rank);
  if (!window) return std::nullopt;
  QuotaBudget budget{*window, busy_wait, tick, tick > 0 ? receive : 0.0};
  budget.pool = window->quota;  // the pool starts full; the CPU's local budget empty
  return budget;
}

void CpuQuota::check_ranks(int world_size) const {
  for (const auto& [rank, window] : windows) {
    if (rank >= world_size) {
      usage_error(cat("--cpu-quota: rank ", rank, " does not exist (", world_size,
                      world_size == 1 ? " rank" : " ranks", ")"));
    }
  }
}

std::string CpuQuota::describe() const {
  if (windows.empty()) return "none";
  std::vector<std::string> parts;
  for (const auto& [rank, window] : windows) {
    parts.push_back(cat("rank ", rank, " ", shortest_decimal(window.quota), " s per ",
                        shortest_decimal(window.period), " s"));
  }
  if (tick > 0) parts.push_back(cat("checked at a tick of ", shortest_decimal(tick), " s"));
  return join(parts, ", ");
}

CpuQuota parse_cpu_quota(const std::string& text) {
  CpuQuota quota;
  if (text.empty()) return quota;
  const auto items = split(text, ',');
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (item.empty()) cpu_quota_error(text, cat("item ", i + 1, " is empty"));
    const auto fields = split(item, '=');
    if (fields.size() != 2) cpu_quota_error(text, cat("'", item, "' is not RANK=QUOTA/PERIOD"));
    const auto rank = read_rank(fields[0]);
    if (!rank) cpu_quota_error(text, cat("'", fields[0], "' is not a rank"));
    const auto times = split(fields[1], '/');
    if (times.size() != 2) {
      cpu_quota_error(text, cat("'", fields[1], "' is not QUOTA/PERIOD"));
    }
    const auto share = read_number(times[0]);
    const auto period = read_number(times[1]);
    if (!share) cpu_quota_error(text, cat("'", times[0], "' is not a number"));
    if (!period) cpu_quota_error(text, cat("'", times[1], "' is not a number"));
    if (!(*period > 0))
      cpu_quota_error(text, cat("the period of rank ", *rank, " is not positive"));
    if (!(*share > 0 && *share <= *period)) {
      cpu_quota_error(text,
                      cat("the quota of rank ", *rank, " is not above 0 and at most its period"));
    }
    if (!quota.windows.emplace(*rank, QuotaWindow{*share, *period}).second) {
      cpu_quota_error(text, cat("rank ", *rank, " is given twice"));
    }
  }
  return quota;
}

}  // namespace mbkit::emulation
