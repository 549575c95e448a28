#include "mbkit/models/zoo.hpp"

#include <algorithm>
#include <functional>
#include <optional>

#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"
#include "tf_models.hpp"

namespace mbkit::models {

using nn::GraphBuilder;
using nn::Init;
using nn::Padding;

std::map<std::string, std::string> ModelConfig::to_map() const {
  if (name != "mlp") return {};
  std::vector<std::string> sizes;
  for (const int size : hidden) sizes.push_back(cat(size));
  return {{"hidden", join(sizes, ",")}, {"activation", activation}};
}

ModelConfig ModelConfig::from_map(const std::string& name,
                                  const std::map<std::string, std::string>& map) {
  ModelConfig config;
  config.name = name;
  if (name != "mlp") return config;
  try {
    config.hidden.clear();
    const auto hidden = map.find("hidden");
    if (hidden != map.end() && !hidden->second.empty()) {
      for (const auto& part : split(hidden->second, ',')) {
        config.hidden.push_back(static_cast<int>(parse_int(part, "hidden")));
      }
    }
    const auto activation = map.find("activation");
    if (activation != map.end()) config.activation = activation->second;
  } catch (const Error& error) {
    data_error(cat("model configuration of ", name, ": ", error.what()));
  }
  return config;
}

namespace {

int activation(GraphBuilder& b, int x, const std::string& kind) {
  if (kind == "relu") return b.relu(x);
  if (kind == "sigmoid") return b.sigmoid(x);
  if (kind == "tanh") return b.tanh(x);
  usage_error(cat("--activation: unknown activation '", kind, "' (known: relu, sigmoid, tanh)"));
}

nn::Graph mlp(const ModelConfig& config, nn::Dims input, int classes) {
  GraphBuilder b("mlp", input, classes);
  int x = b.flatten(b.input());
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    if (config.hidden[i] < 1) usage_error(cat("--hidden: layer sizes must be positive"));
    x = activation(b, b.dense(x, config.hidden[i], cat("fc", i + 1)), config.activation);
  }
  return b.finish(b.dense(x, classes, cat("fc", config.hidden.size() + 1)));
}

// The AMB models were written with tf.layers: Glorot-uniform kernels and zero biases.
const Init kTfKernel = Init::glorot_uniform();
const Init kTfBias = Init::zeros();

nn::Graph mnist_cnn(nn::Dims input, int classes) {
  GraphBuilder b("mnist-cnn", input, classes);
  int x = b.relu(b.conv2d(b.input(), 32, 5, 1, Padding::kSame, "conv1", true, kTfKernel, kTfBias));
  x = b.max_pool(x, 2, 2, Padding::kSame, "pool1");
  x = b.relu(b.conv2d(x, 64, 5, 1, Padding::kSame, "conv2", true, kTfKernel, kTfBias));
  x = b.max_pool(x, 2, 2, Padding::kSame, "pool2");
  x = b.relu(b.dense(x, 1024, "fc1", true, kTfKernel, kTfBias));
  return b.finish(b.dense(x, classes, "fc2", true, kTfKernel, kTfBias));
}

nn::Graph cifar10_cnn(nn::Dims input, int classes) {
  GraphBuilder b("cifar10-cnn", input, classes);
  // tf.layers.batch_normalization defaults: epsilon 1e-3, moving-average decay 0.99.
  constexpr double kEpsilon = 1e-3, kMomentum = 0.01;
  int x = b.input();
  const int channels[] = {64, 128, 256, 512};
  const int kernels[] = {3, 3, 5, 5};
  for (int i = 0; i < 4; ++i) {
    x = b.relu(b.conv2d(x, channels[i], kernels[i], 1, Padding::kSame, cat("conv", i + 1), false,
                        Init::truncated_normal(0.08)));
    x = b.max_pool(x, 2, 2, Padding::kSame, cat("pool", i + 1));
    x = b.batch_norm(x, cat("bn", i + 1), kEpsilon, kMomentum);
  }
  const int units[] = {128, 256, 512};
  for (int i = 0; i < 3; ++i) {
    x = b.relu(b.dense(x, units[i], cat("fc", i + 1), true, kTfKernel, kTfBias));
    x = b.dropout(x, 0.3);
    x = b.batch_norm(x, cat("bn", i + 5), kEpsilon, kMomentum);
  }
  return b.finish(b.dense(x, classes, "fc4", true, kTfKernel, kTfBias));
}

nn::Graph toy_fc(nn::Dims input, int classes) {
  GraphBuilder b("toy-fc", input, classes);
  int x = b.flatten(b.input());
  const int units[] = {500, 1000, 500};
  for (int i = 0; i < 3; ++i)
    x = b.relu(b.dense(x, units[i], cat("fc", i + 1), true, kTfKernel, kTfBias));
  return b.finish(b.dense(x, classes, "fc4", true, kTfKernel, kTfBias));
}

nn::Graph toy_conv(nn::Dims input, int classes) {
  GraphBuilder b("toy-conv", input, classes);
  int x = b.relu(b.conv2d(b.input(), 32, 5, 1, Padding::kSame, "conv1", true, kTfKernel, kTfBias));
  x = b.max_pool(x, 2, 2, Padding::kSame, "pool1");
  x = b.relu(b.conv2d(x, 64, 5, 1, Padding::kSame, "conv2", true, kTfKernel, kTfBias));
  x = b.max_pool(x, 2, 2, Padding::kSame, "pool2");
  return b.finish(b.dense(x, classes, "fc", true, kTfKernel, kTfBias));
}

// ResNets: He-normal convolutions without bias, each followed by batch norm.
int conv_bn(GraphBuilder& b, int x, int channels, int kernel, int stride, const std::string& name) {
  x = b.conv2d(x, channels, kernel, stride, kernel / 2, name + ".conv", false, Init::he_normal());
  return b.batch_norm(x, name + ".bn");
}

/// conv-bn-relu-conv-bn plus the shortcut (identity, or a 1x1 projection where the shape
/// changes), then relu.
int basic_block(GraphBuilder& b, int x, int channels, int stride, const std::string& name) {
  int y = b.relu(conv_bn(b, x, channels, 3, stride, name + ".1"));
  y = conv_bn(b, y, channels, 3, 1, name + ".2");
  const bool project = stride != 1 || b.dims(x).c != channels;
  const int shortcut = project ? conv_bn(b, x, channels, 1, stride, name + ".shortcut") : x;
  return b.relu(b.add(y, shortcut, name + ".add"));
}

/// 1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, plus the shortcut.
int bottleneck(GraphBuilder& b, int x, int channels, int stride, const std::string& name) {
  int y = b.relu(conv_bn(b, x, channels, 1, 1, name + ".1"));
  y = b.relu(conv_bn(b, y, channels, 3, stride, name + ".2"));
  y = conv_bn(b, y, channels * 4, 1, 1, name + ".3");
  const bool project = stride != 1 || b.dims(x).c != channels * 4;
  const int shortcut = project ? conv_bn(b, x, channels * 4, 1, stride, name + ".shortcut") : x;
  return b.relu(b.add(y, shortcut, name + ".add"));
}

nn::Graph cifar_resnet(const std::string& name, int blocks_per_stage, nn::Dims input, int classes) {
  GraphBuilder b(name, input, classes);
  int x = b.relu(conv_bn(b, b.input(), 16, 3, 1, "stem"));
  const int channels[] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage) {
    for (int block = 0; block < blocks_per_stage; ++block) {
      x = basic_block(b, x, channels[stage], stage > 0 && block == 0 ? 2 : 1,
                      cat("stage", stage + 1, ".", block));
    }
  }
  x = b.flatten(b.global_avg_pool(x, "pool"));
  return b.finish(b.dense(x, classes, "fc"));
}

nn::Graph resnet18(nn::Dims input, int classes) {
  GraphBuilder b("resnet18", input, classes);
  int x = b.relu(conv_bn(b, b.input(), 64, 3, 1, "stem"));
  const int channels[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int block = 0; block < 2; ++block) {
      x = basic_block(b, x, channels[stage], stage > 0 && block == 0 ? 2 : 1,
                      cat("stage", stage + 1, ".", block));
    }
  }
  x = b.flatten(b.global_avg_pool(x, "pool"));
  return b.finish(b.dense(x, classes, "fc"));
}

nn::Graph resnet50(nn::Dims input, int classes) {
  GraphBuilder b("resnet50", input, classes);
  int x = b.relu(conv_bn(b, b.input(), 64, 7, 2, "stem"));
  x = b.max_pool(x, 3, 2, 1, "stem.pool");  // torchvision's: one pixel of padding each side
  const int channels[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int block = 0; block < blocks[stage]; ++block) {
      x = bottleneck(b, x, channels[stage], stage > 0 && block == 0 ? 2 : 1,
                     cat("stage", stage + 1, ".", block));
    }
  }
  x = b.flatten(b.global_avg_pool(x, "pool"));
  return b.finish(b.dense(x, classes, "fc"));
}

// The CIFAR ResNets listed by name (completion, --help): the MXNet lab's depths. Any other
// 6n+2 builds too (cifar_resnet_blocks).
constexpr int kCifarResnetDepths[] = {8, 14, 20, 26, 32, 38, 44, 56, 110};

// n of a name "resnet<6n+2>", n >= 1; nullopt for other names, and for resnet50, which is
// the ImageNet ResNet-50 (6 x 8 + 2 = 50 is taken).
std::optional<int> cifar_resnet_blocks(const std::string& name) {
  if (!starts_with(name, "resnet") || name == "resnet50") return std::nullopt;
  const std::string digits = name.substr(6);
  if (digits.empty() || digits.size() > 6 || digits[0] == '0' ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const int depth = std::stoi(digits);
  if (depth < 8 || (depth - 2) % 6 != 0) return std::nullopt;
  return (depth - 2) / 6;
}

struct Entry {
  std::string name;
  std::function<nn::Graph(const ModelConfig&, nn::Dims, int)> build;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"mlp", mlp},
      {"mnist-cnn", [](const ModelConfig&, nn::Dims in, int k) { return mnist_cnn(in, k); }},
      {"cifar10-cnn", [](const ModelConfig&, nn::Dims in, int k) { return cifar10_cnn(in, k); }},
      {"toy-fc", [](const ModelConfig&, nn::Dims in, int k) { return toy_fc(in, k); }},
      {"toy-conv", [](const ModelConfig&, nn::Dims in, int k) { return toy_conv(in, k); }},
      {"resnet18", [](const ModelConfig&, nn::Dims in, int k) { return resnet18(in, k); }},
      {"resnet50", [](const ModelConfig&, nn::Dims in, int k) { return resnet50(in, k); }},
      {"alexnet", [](const ModelConfig&, nn::Dims in, int k) { return alexnet(in, k); }},
      {"vgg16", [](const ModelConfig&, nn::Dims in, int k) { return vgg16(in, k); }},
      {"inception3", [](const ModelConfig&, nn::Dims in, int k) { return inception3(in, k); }},
      {"densenet40", [](const ModelConfig&, nn::Dims in,
                        int k) { return densenet("densenet40", 12, 12, in, k); }},
      {"densenet100", [](const ModelConfig&, nn::Dims in,
                         int k) { return densenet("densenet100", 32, 12, in, k); }},
  };
  return entries;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) {
    // The CIFAR ResNets after the CIFAR models, before resnet18.
    if (entry.name == "resnet18") {
      for (const int depth : kCifarResnetDepths) names.push_back(cat("resnet", depth));
    }
    names.push_back(entry.name);
  }
  return names;
}

std::string known_models() {
  return join(model_names(), ", ");
}

nn::Graph build_model(const ModelConfig& config, nn::Dims input, int classes) {
  for (const auto& entry : registry()) {
    if (entry.name == config.name) return entry.build(config, input, classes);
  }
  if (const auto blocks = cifar_resnet_blocks(config.name)) {
    return cifar_resnet(config.name, *blocks, input, classes);
  }
  usage_error(cat("--model: unknown model '", config.name, "' (known: ", known_models(),
                  ", or any CIFAR resnet<6n+2>)"));
}

}  // namespace mbkit::models
