// The tf_cnn_benchmarks models (tensorflow/benchmarks, scripts/tf_cnn_benchmarks/models) that
// the seed's scaling tables measured: alexnet, vgg16, inception3, densenet40/100 (k = 12),
// layer by layer as its ConvNetBuilder builds them, with its initialisers. Its convolutions are
// SAME with a bias and a ReLU unless said otherwise, its dense layers ("affine") ReLU too, and
// the final class layer linear: what these builders do.
#include "tf_models.hpp"

#include <cmath>
#include <string>

#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::models {

using nn::GraphBuilder;
using nn::Init;
using nn::Padding;

namespace {

// tf.variance_scaling_initializer()'s default: a normal truncated at 2 stddev, scaled so that
// the truncated distribution has variance 1 / fan_in (0.8796... is the truncated normal's
// standard deviation).
Init variance_scaling(std::int64_t fan_in) {
  return Init::truncated_normal(std::sqrt(1.0 / static_cast<double>(fan_in)) / 0.87962566103423978);
}

/// ConvNetBuilder.conv: SAME or VALID, square stride, a bias of `bias` (none where batch
/// norm follows), optionally a ReLU.
struct Conv {
  GraphBuilder& b;
  int conv(int x, int channels, int kh, int kw, int stride, Padding padding,
           const std::string& name, bool relu = true, double stddev = 0.0, double bias = 0.0) {
    const std::int64_t fan_in = static_cast<std::int64_t>(b.dims(x).c) * kh * kw;
    const Init weight = stddev > 0 ? Init::truncated_normal(stddev) : variance_scaling(fan_in);
    const int y =
        b.conv2d(x, channels, kh, kw, stride, padding, name, true, weight, Init::constant(bias));
    return relu ? b.relu(y) : y;
  }
  /// ConvNetBuilder.affine: stddev sqrt(2 / in) before a ReLU, sqrt(1 / in) for the linear
  /// class layer, unless given.
  int affine(int x, int units, const std::string& name, bool relu = true, double stddev = 0.0,
             double bias = 0.0) {
    const auto in = static_cast<double>(b.dims(x).size());
    if (stddev == 0.0) stddev = std::sqrt((relu ? 2.0 : 1.0) / in);
    const int y =
        b.dense(x, units, name, true, Init::truncated_normal(stddev), Init::constant(bias));
    return relu ? b.relu(y) : y;
  }
};

// AlexnetCifar10Model: the TensorFlow CIFAR-10 tutorial's network. tf.nn.lrn(depth_radius 4,
// bias 1, alpha 0.001 / 9, beta 0.75) sums 9 channels and divides alpha by nothing: in
// PyTorch's convention that is size 9, alpha 0.001.
nn::Graph alexnet_cifar(nn::Dims input, int classes) {
  GraphBuilder b("alexnet", input, classes);
  Conv c{b};
  int x = c.conv(b.input(), 64, 5, 5, 1, Padding::kSame, "conv1", true, 5e-2);
  x = b.max_pool(x, 3, 2, Padding::kSame, "pool1");
  x = b.lrn(x, 9, 0.001, 0.75, 1.0, "lrn1");
  x = c.conv(x, 64, 5, 5, 1, Padding::kSame, "conv2", true, 5e-2, 0.1);
  x = b.lrn(x, 9, 0.001, 0.75, 1.0, "lrn2");
  x = b.max_pool(x, 3, 2, Padding::kSame, "pool2");
  x = c.affine(b.flatten(x), 384, "fc1", true, 0.04, 0.1);
  x = c.affine(x, 192, "fc2", true, 0.04, 0.1);
  return b.finish(c.affine(x, classes, "fc3", false));
}

// AlexnetModel: the one-tower ImageNet AlexNet (64-192-384-384-256), its first convolution
// VALID (tf_cnn_benchmarks feeds it 227x227 crops); dropout 0.5 after each hidden dense layer.
nn::Graph alexnet_imagenet(nn::Dims input, int classes) {
  GraphBuilder b("alexnet", input, classes);
  Conv c{b};
  int x = c.conv(b.input(), 64, 11, 11, 4, Padding::kValid, "conv1");
  x = b.max_pool(x, 3, 2, Padding::kValid, "pool1");
  x = c.conv(x, 192, 5, 5, 1, Padding::kSame, "conv2");
  x = b.max_pool(x, 3, 2, Padding::kValid, "pool2");
  x = c.conv(x, 384, 3, 3, 1, Padding::kSame, "conv3");
  x = c.conv(x, 384, 3, 3, 1, Padding::kSame, "conv4");
  x = c.conv(x, 256, 3, 3, 1, Padding::kSame, "conv5");
  x = b.max_pool(x, 3, 2, Padding::kValid, "pool3");
  x = b.dropout(c.affine(b.flatten(x), 4096, "fc1"), 0.5);
  x = b.dropout(c.affine(x, 4096, "fc2"), 0.5);
  return b.finish(c.affine(x, classes, "fc3", false));
}

}  // namespace

bool cifar_sized(nn::Dims input) {
  return input.h <= 32 && input.w <= 32;
}

nn::Graph alexnet(nn::Dims input, int classes) {
  return cifar_sized(input) ? alexnet_cifar(input, classes) : alexnet_imagenet(input, classes);
}

// Vgg16Model (configuration D): 2-2-3-3-3 3x3 convolutions at 64-128-256-512-512 channels,
// each stage closed by a 2x2 max pool, then dense 4096, 4096 with dropout 0.5. The dense
// layers read what the last pool leaves: 512 x 7 x 7 on 224x224 images, 512 on 32x32.
nn::Graph vgg16(nn::Dims input, int classes) {
  GraphBuilder b("vgg16", input, classes);
  Conv c{b};
  const int channels[] = {64, 128, 256, 512, 512};
  const int convs[] = {2, 2, 3, 3, 3};
  int x = b.input();
  for (int stage = 0; stage < 5; ++stage) {
    for (int i = 0; i < convs[stage]; ++i) {
      x = c.conv(x, channels[stage], 3, 3, 1, Padding::kSame, cat("conv", stage + 1, "_", i + 1));
    }
    x = b.max_pool(x, 2, 2, Padding::kValid, cat("pool", stage + 1));
  }
  x = b.dropout(c.affine(b.flatten(x), 4096, "fc1"), 0.5);
  x = b.dropout(c.affine(x, 4096, "fc2"), 0.5);
  return b.finish(c.affine(x, classes, "fc3", false));
}

// DensenetCifar10Model. Each dense layer is batch norm (scale, decay 0.9, epsilon 1e-5), ReLU
// and a 3x3 convolution to k channels (no ReLU), whose output is concatenated to the layer's
// input. Each transition is batch norm, ReLU, a 1x1 convolution with ReLU and a 2x2 average
// pool. tf_cnn_benchmarks' transition convolution has 2k channels, not as many as its input:
// the builder's channel count (top_size) is set to k by each dense layer's convolution and
// then grows by k, so it reads 2k where the input has 16 + L k. That is the network its users
// ran and the seed's table counts (364,772 for densenet40_k12), so it is built the same here.
nn::Graph densenet(const std::string& name, int layers, int growth, nn::Dims input, int classes) {
  GraphBuilder b(name, input, classes);
  Conv c{b};
  constexpr double kEpsilon = 1e-5, kMomentum = 0.1;
  int x = c.conv(b.input(), 16, 3, 3, 1, Padding::kSame, "stem", false);
  for (int block = 1; block <= 3; ++block) {
    for (int layer = 1; layer <= layers; ++layer) {
      const std::string prefix = cat("block", block, ".", layer);
      int y = b.relu(b.batch_norm(x, prefix + ".bn", kEpsilon, kMomentum));
      y = c.conv(y, growth, 3, 3, 1, Padding::kSame, prefix + ".conv", false,
                 std::sqrt(2.0 / 9.0 / growth));
      x = b.concat({x, y}, prefix + ".cat");
    }
    if (block == 3) break;
    const std::string prefix = cat("transition", block);
    const int channels = 2 * growth;  // tf_cnn_benchmarks' top_size, see above
    x = b.relu(b.batch_norm(x, prefix + ".bn", kEpsilon, kMomentum));
    x = c.conv(x, channels, 1, 1, 1, Padding::kSame, prefix + ".conv", true,
               std::sqrt(2.0 / 9.0 / channels));
    x = b.avg_pool(x, 2, 2, Padding::kValid, prefix + ".pool");
  }
  x = b.relu(b.batch_norm(x, "final.bn", kEpsilon, kMomentum));
  x = b.flatten(b.global_avg_pool(x, "pool"));
  return b.finish(c.affine(x, classes, "fc", false));
}

}  // namespace mbkit::models
