// Small string helpers used across the library (g++ 12 has no <format>).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace mbkit {

/// Concatenates anything streamable: cat("rank ", 3, " of ", 4) == "rank 3 of 4".
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

/// printf-style formatting into a std::string.
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

std::vector<std::string> split(std::string_view text, char separator);
std::string join(const std::vector<std::string>& parts, std::string_view separator);
std::string_view trim(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);
bool ends_with(std::string_view text, std::string_view suffix);
std::string to_lower(std::string_view text);

/// Edits (insertions, deletions, substitutions, swaps of neighbours) that turn a into b.
std::size_t edit_distance(std::string_view a, std::string_view b);
/// The candidates nearest to a misspelt `name` ("epoch" -> "epochs"), for a "did you mean"
/// hint: those at the smallest edit distance when it is small for the name's length (1 up to 4
/// characters, else 2), or else those `name` begins; none when nothing is near or `name` has
/// fewer than 3 characters.
std::vector<std::string> nearest_names(std::string_view name,
                                       const std::vector<std::string>& candidates);

/// "26.4 MB" style sizes (powers of 1000, as download tools print them).
std::string human_bytes(double bytes);
/// "1.2 s", "3 min 20 s", "2 h 05 min".
std::string human_duration(double seconds);

/// The unit a duration (or a time axis) reads best in.
struct TimeUnit {
  std::string name;    ///< "ms", "s", "min", "h"
  double seconds = 1;  ///< seconds per unit
};
/// The unit that keeps numbers short for times up to `max_seconds`: ms below 1 s, s below
/// 2 min, min below 2 h, h above.
TimeUnit choose_time_unit(double max_seconds);
/// A duration in the unit that suits it, three significant digits: "474 us" is "0.474 ms",
/// 95 s is "95 s", 600 s is "10 min".
std::string short_duration(double seconds);

/// 1234567 -> "1,234,567".
std::string with_commas(std::int64_t value);
/// The current time in UTC, ISO 8601 ("2026-11-25T03:04:05Z").
std::string utc_timestamp();
/// The shortest %g text that reads back as `value` ("0.9", "1e-10", "1.0000001"), for messages.
std::string shortest_decimal(double value);
/// Shell-style quoting of one argument, so a recorded command line can be pasted back.
std::string shell_quote(std::string_view argument);
/// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote or newline.
std::string csv_quote(std::string_view field);
/// Lowercase hexadecimal of a byte string.
std::string to_hex(const std::uint8_t* data, std::size_t size);

/// Parses a whole string as a number or throws Error naming `what` (e.g. "--shape").
long long parse_int(std::string_view text, std::string_view what);
double parse_double(std::string_view text, std::string_view what);

}  // namespace mbkit
