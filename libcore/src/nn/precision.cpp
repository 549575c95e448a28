#include "mbkit/nn/precision.hpp"

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::nn {

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

std::optional<Precision> find_precision(std::string_view name) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    if (name == precision_name(p)) return p;
  }
  return std::nullopt;
}

Precision parse_precision(std::string_view name) {
  if (const auto precision = find_precision(name)) return *precision;
  usage_error(cat("--precision: unknown precision '", name, "' (known: fp32, tf32, bf16)"));
}

std::string describe_precision(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32: convolutions and dense layers on TF32 tensor cores, fp32 elsewhere";
    case Precision::kBf16:
      return "bf16: convolutions and dense layers on bf16 operands with fp32 accumulation, "
             "fp32 master weights and everything else in fp32";
  }
  return "?";
}

}  // namespace mbkit::nn
