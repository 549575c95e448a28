// How mb-report's tables and CSV files write a number, one rule for every report (runs,
// scaling, --compare).
#pragma once

#include <string>

namespace mbkit::report {

/// `value` with `decimals` decimals for a table; "-" when it is not finite.
std::string fixed(double value, int decimals);

/// The shortest text that reads back as `value` (CSV, JSON-free files); empty when it is not
/// finite.
std::string csv_number(double value);

}  // namespace mbkit::report
