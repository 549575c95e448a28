// Backends by name: the one place that knows which backends exist (nn/ defines the interface,
// backend/ the implementations, so that nn/ never depends on them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mbkit/nn/backend.hpp"

namespace mbkit::backend {

/// The backends built into this mbkit: "cpu" always, "cuda" when built with it.
std::vector<std::string> available_backends();
/// Makes a backend by name ("cpu"); `threads` = 0 keeps the default (all cores).
std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads);

}  // namespace mbkit::backend
