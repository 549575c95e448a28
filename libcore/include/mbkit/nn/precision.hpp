// The arithmetic a backend computes convolutions and dense products in (--precision). Everything
// else (batch norm, activations, softmax, the loss, the optimizers) and every stored value
// (parameters, gradients, activations, checkpoints) stays fp32 at every precision.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mbkit::nn {

enum class Precision {
  kFp32,  ///< IEEE single precision throughout: results compare with the CPU backend's
  kTf32,  ///< fp32 data, products on TF32 tensor cores (10-bit mantissa operands)
  kBf16,  ///< bf16 operands (7-bit mantissa, fp32's range), fp32 accumulation; fp32 elsewhere
};

/// "fp32", "tf32", "bf16": the option's and the metric log's spelling.
std::string_view precision_name(Precision precision);
/// The precision a name spells, or nullopt.
std::optional<Precision> find_precision(std::string_view name);
/// As find_precision; anything else is a usage error naming --precision and the choices.
Precision parse_precision(std::string_view name);
/// A line for the start table: "bf16: convolutions and dense layers on bf16 operands ...".
std::string describe_precision(Precision precision);

}  // namespace mbkit::nn
