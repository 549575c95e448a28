#include "mbkit/bench/bandwidth.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::bench {

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = {"reduce-bcast",   "allreduce", "reduce",
                                                 "bcast",          "gather",    "allgather",
                                                 "reduce-scatter", "exchange"};
  return names;
}

Op parse_op(const std::string& name) {
  const auto& names = op_names();
  const auto found = std::find(names.begin(), names.end(), name);
  if (found == names.end()) {
    usage_error(cat("--op: '", name, "' is not an operation (", join(names, ", "), ")"));
  }
  return static_cast<Op>(found - names.begin());
}

const std::string& op_name(Op op) {
  return op_names()[static_cast<std::size_t>(op)];
}

Dtype parse_dtype(const std::string& name) {
  if (name == "float") return Dtype::kFloat;
  if (name == "double") return Dtype::kDouble;
  usage_error(cat("--dtype: '", name, "' is not float or double"));
}

std::size_t type_size(Dtype dtype) {
  return dtype == Dtype::kFloat ? 4 : 8;
}

const char* dtype_name(Dtype dtype) {
  return dtype == Dtype::kFloat ? "float" : "double";
}

std::size_t parse_bytes(const std::string& text, const std::string& flag) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  const std::string suffix = to_lower(text.substr(digits));
  std::size_t unit = 0;
  if (suffix.empty() || suffix == "b") unit = 1;
  if (suffix == "k" || suffix == "kib") unit = std::size_t{1} << 10;
  if (suffix == "m" || suffix == "mib") unit = std::size_t{1} << 20;
  if (suffix == "g" || suffix == "gib") unit = std::size_t{1} << 30;
  if (digits == 0 || digits > 12 || unit == 0) {
    usage_error(
        cat(flag, ": '", text, "' is not a size in bytes (a whole number, optionally K, M or G)"));
  }
  const auto value = static_cast<std::size_t>(std::stoull(text.substr(0, digits)));
  if (value == 0) usage_error(cat(flag, ": the size must be at least 1 byte"));
  if (value > (std::size_t{1} << 40) / unit) usage_error(cat(flag, ": ", text, " is over 1T"));
  return value * unit;
}

std::vector<std::size_t> size_series(std::size_t min_bytes, std::size_t max_bytes, int factor) {
  if (factor < 2) usage_error(cat("--step-factor: ", factor, " is below 2"));
  if (min_bytes > max_bytes) {
    usage_error(cat("--min-bytes ", min_bytes, " is more than --max-bytes ", max_bytes));
  }
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;) {
    sizes.push_back(bytes);
    if (bytes > max_bytes / static_cast<std::size_t>(factor)) break;
    bytes *= static_cast<std::size_t>(factor);
  }
  return sizes;
}

double bus_factor(Op op, int ranks, const std::string& exchange_mode) {
  const double n = ranks;
  switch (op) {
    case Op::kAllreduce:
      return 2 * (n - 1) / n;
    case Op::kReduceScatter:
    case Op::kAllgather:
    case Op::kGather:
      return (n - 1) / n;
    case Op::kReduce:
    case Op::kBcast:
      return 1;
    case Op::kReduceBcast:
      return 2;
    case Op::kExchange:
      return starts_with(exchange_mode, "allreduce") ? 2 * (n - 1) / n : 2;
  }
  return 1;
}

std::size_t element_count(Op op, std::size_t bytes, std::size_t type_bytes, int ranks) {
  const std::size_t count = std::max<std::size_t>(1, bytes / type_bytes);
  const bool blocks = op == Op::kGather || op == Op::kAllgather || op == Op::kReduceScatter;
  if (!blocks) return count;
  const auto n = static_cast<std::size_t>(ranks);
  return std::max<std::size_t>(1, count / n) * n;
}

void set_times(Row& row, const std::vector<double>& seconds, double factor) {
  double sum = 0;
  row.min_us = std::numeric_limits<double>::infinity();
  row.max_us = 0;
  for (const double s : seconds) {
    sum += s;
    row.min_us = std::min(row.min_us, s * 1e6);
    row.max_us = std::max(row.max_us, s * 1e6);
  }
  const double average = sum / static_cast<double>(seconds.size());
  row.avg_us = average * 1e6;
  row.algbw_gbps = average > 0 ? static_cast<double>(row.bytes) / average / 1e9 : 0;
  row.busbw_gbps = row.algbw_gbps * factor;
}

}  // namespace mbkit::bench
