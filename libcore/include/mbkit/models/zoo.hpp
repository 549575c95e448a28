// Models by name (--model). Each builds a Graph for the dataset's input shape and class count,
// or fails with a message saying why it cannot take them.
//
//   mlp          flatten -> dense(hidden...) with an activation -> dense(classes);
//                default one hidden layer of 256 sigmoid units (784-256-10 on MNIST, the seed
//                exercise); PyTorch's default initialisation
//   mnist-cnn    the AMB MNIST model: conv 5x5x32 SAME relu, max pool 2, conv 5x5x64 SAME relu,
//                max pool 2, dense 1024 relu, dense classes; 3,274,634 parameters on 1x28x28
//   cifar10-cnn  the AMB CIFAR-10 model: four conv (3x3x64, 3x3x128, 5x5x256, 5x5x512, no bias,
//                truncated normal 0.08) each followed by relu, max pool 2 and batch norm; then
//                dense 128, 256, 512, each relu, dropout 0.3 and batch norm; dense classes;
//                4,607,178 parameters on 3x32x32
//   toy-fc       the AMB toy model, fully connected: 100-500-1000-500-classes, relu
//   toy-conv     the AMB toy model, convolutional: conv 5x5x32 relu, max pool 2 SAME,
//                conv 5x5x64 relu, max pool 2 SAME, dense classes (576 features on 1x10x10)
//   resnet<6n+2> CIFAR ResNets of any depth 6n+2 but 50 (He et al. 2016, n blocks per stage,
//                16/32/64 channels, 1x1 projection shortcuts where the shape changes, as
//                torchvision-style CIFAR code and the PyTorch anchor benchmark); listed:
//                resnet8/14/20/26/32/38/44/56/110; 97,216 n - 19,824 + 65 per class
//                parameters (272,474 for resnet20)
//   resnet18     the CIFAR ResNet-18 of DBSL: 3x3 stem, no max pool, basic blocks 2-2-2-2 at
//                64-128-256-512 channels; 11.2 M parameters on 100 classes
//   resnet50     ImageNet-shaped ResNet-50 as torchvision builds it: 7x7/2 stem, 3x3/2 max
//                pool (padding 1), bottlenecks 3-4-6-3; 25.6 M parameters on 1000 classes
//                (for GPU runs)
//   alexnet      tf_cnn_benchmarks' AlexNet: on inputs up to 32x32 its CIFAR-10 model (conv
//                5x5x64, max pool 3/2, LRN, conv 5x5x64, LRN, max pool 3/2, dense 384, 192;
//                1,756,426 parameters on 3x32x32), on larger ones its ImageNet model (conv
//                11x11/4 VALID 64, 5x5 192, 3x3 384, 384, 256, three 3/2 max pools, dense 4096,
//                4096 with dropout 0.5; 61,838,248 parameters on 3x227x227, 1000 classes)
//   vgg16        tf_cnn_benchmarks' VGG-16 (configuration D, dense 4096, 4096 with dropout);
//                138,357,544 parameters on 3x224x224, 1000 classes; the dense layers read the
//                last pool's map, so 32x32 images give 33,638,218 on 10 classes
//   inception3   tf_cnn_benchmarks' Inception-v3 (no auxiliary head): convolutions without bias,
//                each followed by batch norm without a learned scale and relu; a VALID stem,
//                modules at 35x35, 17x17 (1x7, 7x1 kernels) and 8x8 on 3x299x299 images, global
//                average pooling; 23,817,352 parameters on 1000 classes (21,768,352 + 2,049 per
//                class); refuses images under 75x75
//   densenet40, densenet100
//                tf_cnn_benchmarks' densenet40_k12 and densenet100_k12 (CIFAR; 12 and 32 dense
//                layers per block, growth 12, transitions to 24 channels as it builds them);
//                357,322 and 2,217,002 parameters on 3x32x32, 10 classes
//
// Layers that downsample need at least as many pixels as their stride, so a model can be too
// deep for small images (resnet50 on 8x8): GraphBuilder then names the model and the layer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mbkit/nn/graph.hpp"

namespace mbkit::models {

/// Settings of a model; only `mlp` has any today (hidden sizes and activation).
struct ModelConfig {
  std::string name = "mlp";
  std::vector<int> hidden = {256};     ///< mlp: hidden layer sizes
  std::string activation = "sigmoid";  ///< mlp: relu, sigmoid or tanh
  /// The settings as key-value pairs, for checkpoints ("hidden" -> "256", ...).
  std::map<std::string, std::string> to_map() const;
  /// Parses to_map()'s output (a checkpoint's model_config) back; errors are data errors.
  static ModelConfig from_map(const std::string& name,
                              const std::map<std::string, std::string>& map);
};

/// "mlp, mnist-cnn, cifar10-cnn, toy-fc, toy-conv, resnet20, ...".
std::string known_models();
std::vector<std::string> model_names();

/// Builds the model's graph for inputs of `input` shape and `classes` classes. An unknown name
/// or an input the model cannot take is a usage error that says so.
nn::Graph build_model(const ModelConfig& config, nn::Dims input, int classes);

}  // namespace mbkit::models
