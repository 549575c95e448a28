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
/// Makes a backend by name ("cpu"); `threads` = 0 keeps the default (all cores).
std::unique_ptr<nn::Backend> make_backend(const std::string& name, int threads);

/// Makes a backend for a --device name; `threads` as make_backend's.
using BackendFactory = std::function<std::unique_ptr<nn::Backend>(int threads)>;
/// Tests: make_backend(`name`) calls `factory` from now on (a fake device backend run through
/// the real engine). Not listed by available_backends(); registering a name again replaces it.
void register_backend(const std::string& name, BackendFactory factory);

}  // namespace mbkit::backend
