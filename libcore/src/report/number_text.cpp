#include "mbkit/report/number_text.hpp"

#include <charconv>
#include <cmath>

#include "mbkit/util/strings.hpp"

namespace mbkit::report {

std::string fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "-";
  return strprintf("%.*f", decimals, value);
}

std::string csv_number(double value) {
  if (!std::isfinite(value)) return {};
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, end);
}

}  // namespace mbkit::report
