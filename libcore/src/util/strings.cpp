#include "mbkit/util/strings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "mbkit/util/error.hpp"

namespace mbkit {

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out;
  if (size > 0) {
    out.resize(static_cast<std::size_t>(size) + 1);
    std::vsnprintf(out.data(), out.size(), format, args);
    out.resize(static_cast<std::size_t>(size));
  }
  va_end(args);
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus the swap of two neighbours, the commonest typo.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::vector<std::string> nearest_names(std::string_view name,
                                       const std::vector<std::string>& candidates) {
  // Two letters or fewer are too short to guess from.
  if (name.size() < 3) return {};
  const std::size_t limit = name.size() <= 4 ? 1 : 2;
  std::size_t best = limit;
  std::vector<std::string> nearest;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(name, candidate);
    if (distance == 0 || distance > best) continue;
    if (distance < best) nearest.clear();
    best = distance;
    if (std::find(nearest.begin(), nearest.end(), candidate) == nearest.end()) {
      nearest.push_back(candidate);
    }
  }
  if (!nearest.empty()) return nearest;
  for (const std::string& candidate : candidates) {
    if (candidate.size() > name.size() && starts_with(candidate, name) &&
        std::find(nearest.begin(), nearest.end(), candidate) == nearest.end()) {
      nearest.push_back(candidate);
    }
  }
  return nearest;
}

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1000.0 && unit < 4) {
    bytes /= 1000.0;
    ++unit;
  }
  return unit == 0 ? strprintf("%.0f %s", bytes, kUnits[unit])
                   : strprintf("%.1f %s", bytes, kUnits[unit]);
}

std::string shortest_decimal(double value) {
  std::string text;
  for (int digits = 6; digits <= 17; ++digits) {
    text = strprintf("%.*g", digits, value);
    if (std::isnan(value) || std::strtod(text.c_str(), nullptr) == value) break;
  }
  return text;
}

std::string human_duration(double seconds) {
  if (seconds < 60.0) return strprintf("%.1f s", seconds);
  const auto total = static_cast<long long>(std::llround(seconds));
  if (total < 3600) return strprintf("%lld min %02lld s", total / 60, total % 60);
  return strprintf("%lld h %02lld min", total / 3600, (total % 3600) / 60);
}

TimeUnit choose_time_unit(double max_seconds) {
  if (!std::isfinite(max_seconds) || max_seconds < 1.0) return {"ms", 1e-3};
  if (max_seconds < 120.0) return {"s", 1.0};
  if (max_seconds < 7200.0) return {"min", 60.0};
  return {"h", 3600.0};
}

std::string short_duration(double seconds) {
  const TimeUnit unit = choose_time_unit(std::abs(seconds));
  return cat(strprintf("%.3g", seconds / unit.seconds), " ", unit.name);
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  const int first = value < 0 ? 1 : 0;
  for (int i = static_cast<int>(digits.size()) - 3; i > first; i -= 3)
    digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string shell_quote(std::string_view argument) {
  if (argument.empty()) return "''";
  bool plain = true;
  for (char c : argument) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) ||
          std::string_view("@%+=:,./-_").find(c) != std::string_view::npos)) {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(argument);
  std::string out = "'";
  for (char c : argument) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string csv_quote(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string quoted = "\"";
  for (const char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string to_hex(const std::uint8_t* data, std::size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

long long parse_int(std::string_view text, std::string_view what) {
  const auto trimmed = trim(text);
  long long value = 0;
  const auto* begin = trimmed.data();
  const auto* end = begin + trimmed.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (trimmed.empty() || ec != std::errc() || ptr != end) {
    usage_error(cat(what, ": '", text, "' is not an integer"));
  }
  return value;
}

double parse_double(std::string_view text, std::string_view what) {
  const auto trimmed = trim(text);
  double value = 0;
  const auto* begin = trimmed.data();
  const auto* end = begin + trimmed.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (trimmed.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    usage_error(cat(what, ": '", text, "' is not a finite number"));
  }
  return value;
}

}  // namespace mbkit
