// The tf_cnn_benchmarks models of the zoo (zoo.cpp registers them; zoo.hpp describes them).
#pragma once

#include <string>

#include "mbkit/nn/graph.hpp"

namespace mbkit::models {

/// Whether an input is CIFAR-sized (at most 32x32): alexnet takes its CIFAR-10 variant then,
/// as tf_cnn_benchmarks does on its cifar10 dataset, else its ImageNet one.
bool cifar_sized(nn::Dims input);

nn::Graph alexnet(nn::Dims input, int classes);
nn::Graph vgg16(nn::Dims input, int classes);
/// Refuses inputs under 75x75 pixels, the smallest its VALID layers take.
nn::Graph inception3(nn::Dims input, int classes);
/// densenet<3 layers + 4>_k<growth>: `layers` dense layers per block.
nn::Graph densenet(const std::string& name, int layers, int growth, nn::Dims input, int classes);

}  // namespace mbkit::models
