// Backends by name: the one place that knows which backends exist (nn/ defines the interface,
// backend/ the implementations, so that nn/ never depends on them).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend {

/// The backends built into this mbkit: "cpu" always, "cuda" when built with it.
std::vector<std::string> available_backends();
/// Makes a backend by name ("cpu"); `threads` = 0 keeps the default (all cores). Only a GPU
/// backend computes at tf32 or bf16: another precision on the CPU is a usage error.
std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads,
                                          nn::Precision precision = nn::Precision::kFp32);

/// Whether --device `name` computes at `precision`, before anything else is opened: the CPU
/// computes in fp32 only, anything else is one usage error naming both flags. (Whether a GPU's
/// generation has the tensor cores is known once the backend is made.)
void check_precision(const std::string& name, nn::Precision precision);

/// Makes a backend for a --device name; `threads` as make_backend's.
using BackendFactory = std::function<std::unique_ptr<nn::Backend>(int threads)>;
/// Tests: make_backend(`name`) calls `factory` from now on (a fake device backend run through
/// the real engine). Not listed by available_backends(); registering a name again replaces it.
void register_backend(const std::string& name, BackendFactory factory);

}  // namespace mbkit::backend
