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

/// libmbkit-cuda's backend on visible GPU `gpu` (checked by the caller against the plugin's
/// device_count()), computing at `precision` (an nn::Precision's value), owned by the caller;
/// throws mbkit::Error when the GPU cannot be set up. Declared here, where backends are made,
/// and defined by the plugin (mbkit/plugin/cuda_plugin.hpp).
extern "C" mbkit::nn::Backend* mbkit_cuda_make_backend(int gpu, int precision);

namespace mbkit::backend {

/// The plugin's mbkit_cuda_make_backend; nullptr when the plugin does not load.
decltype(&mbkit_cuda_make_backend) cuda_backend_maker();

}  // namespace mbkit::backend
