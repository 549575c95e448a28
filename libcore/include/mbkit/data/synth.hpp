// Synthetic datasets, seeded and reproducible (the same seed gives the same file).
#pragma once

#include <cstdint>
#include <string>

#include "mbkit/data/format.hpp"

namespace mbkit::data {

/// The AMB toy problem: 100 features (stored as 1x10x10 images) drawn from N(0, 1), labels
/// uniform over 10 classes. With `learnable`, features are drawn around a class-dependent mean
/// (each class mean ~ N(0, separation^2) per feature) so that a model can fit them.
/// Features are stored quantised to uint8 as 128 + 32 x / sqrt(1 + s^2) (clamped), which the
/// file's mean/std bring back to about unit variance.
struct ToySynthOptions {
  std::uint64_t train = 10000;
  std::uint64_t test = 1000;
  int classes = 10;
  bool learnable = false;
  double separation = 1.0;
  std::uint64_t seed = 1;
};

/// Random images of a given shape and uniform random labels, like the synthetic ImageNet of
/// tf_cnn_benchmarks: for measuring throughput, not for learning.
struct ImagesSynthOptions {
  ImageShape shape{3, 224, 224};
  int classes = 1000;
  std::uint64_t train = 1024;
  std::uint64_t test = 256;
  std::uint64_t seed = 1;
};

void write_synth_toy(const std::string& path, const ToySynthOptions& options, int deflate_level);
void write_synth_images(const std::string& path, const ImagesSynthOptions& options,
                        int deflate_level);

}  // namespace mbkit::data
