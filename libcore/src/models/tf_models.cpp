// The tf_cnn_benchmarks models (tensorflow/benchmarks, scripts/tf_cnn_benchmarks/models) that
// the seed's scaling tables measured: alexnet, vgg16, inception3, densenet40/100 (k = 12),
// layer by layer as its ConvNetBuilder builds them, with its initialisers. Its convolutions are
// SAME with a bias and a ReLU unless said otherwise (inception3's have batch norm instead of
// the bias), its dense layers ("affine") ReLU too, and the final class layer linear: what
// these builders do.
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
  /// ConvNetBuilder.conv under use_batch_norm (inception3): no bias, then batch norm as
  /// ConvNetBuilder.batch_norm's defaults make it (no learned scale, decay 0.999: momentum
  /// 0.001 here, epsilon 1e-3), then a ReLU. Layers "<name>.conv" and "<name>.bn".
  int conv_bn(int x, int channels, int kh, int kw, const std::string& name, int stride = 1,
              Padding padding = Padding::kSame) {
    const std::int64_t fan_in = static_cast<std::int64_t>(b.dims(x).c) * kh * kw;
    const int y = b.conv2d(x, channels, kh, kw, stride, padding, name + ".conv", false,
                           variance_scaling(fan_in));
    return b.relu(b.batch_norm(y, name + ".bn", 1e-3, 1e-3, /*scale=*/false));
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

// Inceptionv3Model's modules (ConvNetBuilder.inception_module): columns of layers on the
// module's input, their last outputs concatenated in column order. Every convolution is
// Conv::conv_bn, SAME and stride 1 unless said otherwise. A column's layers are named
// "<module>.b<column>.<row>" (rows from 1), its pooling "<module>.b<column>.pool".
struct Inception {
  GraphBuilder& b;
  Conv c{b};

  std::string at(const std::string& module, int column, int row) const {
    return cat(module, ".b", column, ".", row);
  }

  // incept_v3_a: 35x35 at 299x299.
  int a(int x, int pool_channels, const std::string& m) {
    const int b1 = c.conv_bn(x, 64, 1, 1, at(m, 1, 1));
    const int b2 = c.conv_bn(c.conv_bn(x, 48, 1, 1, at(m, 2, 1)), 64, 5, 5, at(m, 2, 2));
    int b3 = c.conv_bn(x, 64, 1, 1, at(m, 3, 1));
    b3 = c.conv_bn(c.conv_bn(b3, 96, 3, 3, at(m, 3, 2)), 96, 3, 3, at(m, 3, 3));
    const int pool = b.avg_pool(x, 3, 1, Padding::kSame, cat(m, ".b4.pool"));
    const int b4 = c.conv_bn(pool, pool_channels, 1, 1, at(m, 4, 1));
    return b.concat({b1, b2, b3, b4}, m);
  }

  // incept_v3_b: 35x35 -> 17x17.
  int reduce_a(int x, const std::string& m) {
    const int b1 = c.conv_bn(x, 384, 3, 3, at(m, 1, 1), 2, Padding::kValid);
    int b2 = c.conv_bn(c.conv_bn(x, 64, 1, 1, at(m, 2, 1)), 96, 3, 3, at(m, 2, 2));
    b2 = c.conv_bn(b2, 96, 3, 3, at(m, 2, 3), 2, Padding::kValid);
    const int b3 = b.max_pool(x, 3, 2, Padding::kValid, cat(m, ".b3.pool"));
    return b.concat({b1, b2, b3}, m);
  }

  // incept_v3_c: 17x17, factorised 7x7 convolutions of n channels.
  int c7(int x, int n, const std::string& m) {
    const int b1 = c.conv_bn(x, 192, 1, 1, at(m, 1, 1));
    int b2 = c.conv_bn(c.conv_bn(x, n, 1, 1, at(m, 2, 1)), n, 1, 7, at(m, 2, 2));
    b2 = c.conv_bn(b2, 192, 7, 1, at(m, 2, 3));
    int b3 = c.conv_bn(c.conv_bn(x, n, 1, 1, at(m, 3, 1)), n, 7, 1, at(m, 3, 2));
    b3 = c.conv_bn(c.conv_bn(b3, n, 1, 7, at(m, 3, 3)), n, 7, 1, at(m, 3, 4));
    b3 = c.conv_bn(b3, 192, 1, 7, at(m, 3, 5));
    const int pool = b.avg_pool(x, 3, 1, Padding::kSame, cat(m, ".b4.pool"));
    const int b4 = c.conv_bn(pool, 192, 1, 1, at(m, 4, 1));
    return b.concat({b1, b2, b3, b4}, m);
  }

  // incept_v3_d: 17x17 -> 8x8.
  int reduce_b(int x, const std::string& m) {
    const int b1 =
        c.conv_bn(c.conv_bn(x, 192, 1, 1, at(m, 1, 1)), 320, 3, 3, at(m, 1, 2), 2, Padding::kValid);
    int b2 = c.conv_bn(c.conv_bn(x, 192, 1, 1, at(m, 2, 1)), 192, 1, 7, at(m, 2, 2));
    b2 = c.conv_bn(c.conv_bn(b2, 192, 7, 1, at(m, 2, 3)), 192, 3, 3, at(m, 2, 4), 2,
                   Padding::kValid);
    const int b3 = b.max_pool(x, 3, 2, Padding::kValid, cat(m, ".b3.pool"));
    return b.concat({b1, b2, b3}, m);
  }

  // incept_v3_e: 8x8. Its 'share' columns reuse the previous column's layers: column 3 reads
  // column 2's 1x1, column 5 column 4's 1x1 and 3x3 (so they are built once).
  int e(int x, bool max_pool, const std::string& m) {
    const int b1 = c.conv_bn(x, 320, 1, 1, at(m, 1, 1));
    const int shared2 = c.conv_bn(x, 384, 1, 1, at(m, 2, 1));
    const int b2 = c.conv_bn(shared2, 384, 1, 3, at(m, 2, 2));
    const int b3 = c.conv_bn(shared2, 384, 3, 1, at(m, 3, 2));
    int shared4 = c.conv_bn(x, 448, 1, 1, at(m, 4, 1));
    shared4 = c.conv_bn(shared4, 384, 3, 3, at(m, 4, 2));
    const int b4 = c.conv_bn(shared4, 384, 1, 3, at(m, 4, 3));
    const int b5 = c.conv_bn(shared4, 384, 3, 1, at(m, 5, 3));
    const std::string pool_name = cat(m, ".b6.pool");
    const int pool = max_pool ? b.max_pool(x, 3, 1, Padding::kSame, pool_name)
                              : b.avg_pool(x, 3, 1, Padding::kSame, pool_name);
    const int b6 = c.conv_bn(pool, 192, 1, 1, at(m, 6, 1));
    return b.concat({b1, b2, b3, b4, b5, b6}, m);
  }
};

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

// Inceptionv3Model without its auxiliary head (tf_cnn_benchmarks' default), 299x299 ImageNet
// images in mind: a VALID stem to 35x35, three incept_v3_a, a reduction to 17x17, four
// incept_v3_c, a reduction to 8x8, two incept_v3_e (the second with a max pool, as
// tf_cnn_benchmarks has it; Keras and slim average there), then its 8x8 VALID average pool and
// the linear class layer. That pool is a global average here, the same at 299x299, so that
// larger images work too (tf_cnn_benchmarks' reshape to 2048 features would mix samples).
// Smaller ones: the stem and the two reductions (VALID 3x3 windows, stride 2) need 75x75
// pixels to leave the second reduction its 3x3 (75 -> 37 -> 35 -> 17 -> 15 -> 7 -> 3 -> 1).
nn::Graph inception3(nn::Dims input, int classes) {
  constexpr int kSmallest = 75;
  if (input.c >= 1 && (input.h < kSmallest || input.w < kSmallest)) {
    usage_error(cat("model inception3 cannot take ", input.text(), " inputs: it needs at least ",
                    kSmallest, "x", kSmallest, " pixels (its ImageNet size is 299x299)"));
  }
  GraphBuilder b("inception3", input, classes);
  Inception net{b};
  Conv& c = net.c;
  int x = c.conv_bn(b.input(), 32, 3, 3, "conv1", 2, Padding::kValid);
  x = c.conv_bn(x, 32, 3, 3, "conv2", 1, Padding::kValid);
  x = c.conv_bn(x, 64, 3, 3, "conv3");
  x = b.max_pool(x, 3, 2, Padding::kValid, "pool1");
  x = c.conv_bn(x, 80, 1, 1, "conv4", 1, Padding::kValid);
  x = c.conv_bn(x, 192, 3, 3, "conv5", 1, Padding::kValid);
  x = b.max_pool(x, 3, 2, Padding::kValid, "pool2");
  x = net.a(x, 32, "mixed0");
  x = net.a(x, 64, "mixed1");
  x = net.a(x, 64, "mixed2");
  x = net.reduce_a(x, "mixed3");
  x = net.c7(x, 128, "mixed4");
  x = net.c7(x, 160, "mixed5");
  x = net.c7(x, 160, "mixed6");
  x = net.c7(x, 192, "mixed7");
  x = net.reduce_b(x, "mixed8");
  x = net.e(x, false, "mixed9");
  x = net.e(x, true, "mixed10");
  x = b.flatten(b.global_avg_pool(x, "pool"));
  return b.finish(c.affine(x, classes, "fc", false));
}

}  // namespace mbkit::models
