// The description of a network, independent of any backend: a list of nodes (layers) in
// topological order, each with its operation, attributes, inputs, output shape and the
// parameters it owns. Models (mbkit/models/zoo.hpp) build graphs with GraphBuilder, which infers
// shapes and fails with a clear message when a model cannot take its input; backends turn each
// node into a Kernel (mbkit/nn/backend.hpp).
//
// All parameters live in one flat buffer and all gradients in another, each parameter at an
// offset fixed here, in a canonical layout (PyTorch's): dense weight (out, in), conv weight
// (out, in, kh, kw), biases and batch-norm scale/shift (C). Non-trainable state (batch-norm
// running mean and variance) lives in a third flat buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mbkit::nn {

/// The shape of one sample's activation: channels, height, width. Flat (dense) activations are
/// (features, 1, 1).
struct Dims {
  int c = 0;
  int h = 1;
  int w = 1;
  std::int64_t size() const {
    return static_cast<std::int64_t>(c) * static_cast<std::int64_t>(h) *
           static_cast<std::int64_t>(w);
  }
  bool flat() const { return h == 1 && w == 1; }
  std::string text() const;  ///< "64x8x8"
  bool operator==(const Dims&) const = default;
};

enum class Op {
  kInput,
  kDense,
  kConv2d,
  kMaxPool,
  kAvgPool,
  kGlobalAvgPool,
  kBatchNorm,
  kRelu,
  kSigmoid,
  kTanh,
  kDropout,
  kFlatten,
  kAdd,
  kSoftmaxCrossEntropy,
  kConcat,  ///< inputs side by side along the channels, in input order
  kLrn,     ///< local response normalisation across channels
};
const char* op_name(Op op);

/// How a parameter is initialised.
enum class InitKind {
  kZeros,
  kOnes,
  kUniformFanIn,     ///< U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's Linear/Conv2d default
  kHeNormal,         ///< N(0, 2/fan_in)
  kGlorotUniform,    ///< U(-a, a), a = sqrt(6 / (fan_in + fan_out)): Keras/TF layers' default
  kTruncatedNormal,  ///< N(0, stddev^2) redrawn beyond 2 stddev (tf.truncated_normal)
  kConstant,         ///< every entry `value` (tf.constant_initializer)
};

struct Init {
  InitKind kind = InitKind::kZeros;
  double stddev = 0.0;  ///< for kTruncatedNormal
  double value = 0.0;   ///< for kConstant
  static Init zeros() { return {InitKind::kZeros, 0}; }
  static Init ones() { return {InitKind::kOnes, 0}; }
  static Init uniform_fan_in() { return {InitKind::kUniformFanIn, 0}; }
  static Init he_normal() { return {InitKind::kHeNormal, 0}; }
  static Init glorot_uniform() { return {InitKind::kGlorotUniform, 0}; }
  static Init truncated_normal(double stddev) { return {InitKind::kTruncatedNormal, stddev}; }
  static Init constant(double value) { return {InitKind::kConstant, 0, value}; }
};

struct ParamSpec {
  std::string name;                 ///< "block1.conv1.weight"
  std::vector<std::int64_t> shape;  ///< canonical layout
  Init init;
  std::int64_t fan_in = 1;
  std::int64_t fan_out = 1;
  std::size_t offset = 0;  ///< position in the flat buffer (set by GraphBuilder)
  std::int64_t size() const;
};

enum class Padding { kSame, kValid };

struct Node {
  Op op = Op::kInput;
  std::string name;
  std::vector<int> inputs;  ///< producer nodes
  Dims output;
  // Attributes (those of `op`).
  int units = 0;  ///< dense: output features; conv: output channels
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool bias = false;
  double rate = 0.0;      ///< dropout: probability of dropping a unit
  double epsilon = 1e-5;  ///< batch norm
  double momentum = 0.1;  ///< batch norm: running = (1 - momentum) running + momentum batch
  /// Batch norm: whether it learns a scale (gamma, params[0]) before its shift (beta); without
  /// one (tf_cnn_benchmarks' default) the shift is params[0] and the scale is 1.
  bool scale = true;
  /// LRN: x / (lrn_k + lrn_alpha / lrn_size * sum of x^2 over lrn_size channels)^lrn_beta,
  /// PyTorch's and oneDNN's convention (TensorFlow's alpha is lrn_alpha / lrn_size).
  int lrn_size = 0;
  double lrn_alpha = 0.0, lrn_beta = 0.0, lrn_k = 1.0;
  std::vector<ParamSpec> params;  ///< trainable, in the flat parameter buffer
  std::vector<ParamSpec> state;   ///< non-trainable, in the flat state buffer
};

class Graph {
 public:
  const std::string& model() const { return model_; }
  Dims input() const { return input_; }
  int num_classes() const { return num_classes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int index) const { return nodes_.at(static_cast<std::size_t>(index)); }
  int logits() const { return logits_; }  ///< the node whose output are the class scores
  int loss() const { return loss_; }      ///< the softmax cross-entropy node
  std::size_t parameter_count() const { return parameter_count_; }
  std::size_t state_count() const { return state_count_; }
  /// Every parameter (then every state array) in buffer order.
  std::vector<const ParamSpec*> parameters() const;
  std::vector<const ParamSpec*> state_arrays() const;

  /// Fills the buffers with each parameter's initialiser, seeded: the same seed gives the same
  /// values on every machine. State starts as running mean 0, running variance 1.
  void initialize(std::span<float> params, std::span<float> state, std::uint64_t seed) const;
  /// A table of the layers: name, operation, output shape, parameters.
  std::string summary() const;

 private:
  friend class GraphBuilder;
  std::string model_;
  Dims input_;
  int num_classes_ = 0;
  std::vector<Node> nodes_;
  int logits_ = -1;
  int loss_ = -1;
  std::size_t parameter_count_ = 0;
  std::size_t state_count_ = 0;
};

/// Builds a Graph node by node, inferring output shapes. Every method returns the new node's
/// index. A shape a layer cannot take is a usage error naming the model, the layer and the
/// input shape ("model mnist-cnn cannot take 1x2x2 inputs: pool2 needs at least 2x2 pixels to
/// downsample, got 1x1"). A layer with stride s needs at least s x s pixels: padding could always
/// make room, but downsampling a single pixel is a model that no longer sees its input.
class GraphBuilder {
 public:
  GraphBuilder(std::string model, Dims input, int num_classes);

  int input() const { return 0; }
  Dims dims(int node) const;

  int dense(int x, int units, const std::string& name, bool bias = true,
            Init weight = Init::uniform_fan_in(), Init bias_init = Init::uniform_fan_in());
  int conv2d(int x, int channels, int kernel, int stride, Padding padding, const std::string& name,
             bool bias = true, Init weight = Init::uniform_fan_in(),
             Init bias_init = Init::uniform_fan_in());
  /// Explicit symmetric zero padding.
  int conv2d(int x, int channels, int kernel, int stride, int pad, const std::string& name,
             bool bias = true, Init weight = Init::uniform_fan_in(),
             Init bias_init = Init::uniform_fan_in());
  /// A kernel_h x kernel_w kernel (inception's 1x7 and 7x1), TensorFlow's SAME or VALID.
  int conv2d(int x, int channels, int kernel_h, int kernel_w, int stride, Padding padding,
             const std::string& name, bool bias = true, Init weight = Init::uniform_fan_in(),
             Init bias_init = Init::uniform_fan_in());
  int max_pool(int x, int kernel, int stride, Padding padding, const std::string& name);
  /// Explicit symmetric padding (padded positions never win: they count as -infinity).
  int max_pool(int x, int kernel, int stride, int pad, const std::string& name);
  int avg_pool(int x, int kernel, int stride, Padding padding, const std::string& name);
  int global_avg_pool(int x, const std::string& name);
  /// `scale` false: no learned scale, only the shift ("<name>.bias"), as tf_cnn_benchmarks'
  /// ConvNetBuilder.batch_norm builds it by default.
  int batch_norm(int x, const std::string& name, double epsilon = 1e-5, double momentum = 0.1,
                 bool scale = true);
  int relu(int x);
  int sigmoid(int x);
  int tanh(int x);
  int dropout(int x, double rate);
  int flatten(int x);
  int add(int a, int b, const std::string& name = "");
  /// The inputs' channels side by side, in order; every input must have the same height and
  /// width.
  int concat(const std::vector<int>& xs, const std::string& name);
  /// Local response normalisation across `size` channels (see Node::lrn_alpha).
  int lrn(int x, int size, double alpha, double beta, double k, const std::string& name);

  /// Adds the softmax cross-entropy loss on `logits`, which must be flat with num_classes
  /// features, lays out the flat buffers, and returns the graph.
  Graph finish(int logits);

 private:
  int push(Node node);
  const Node& at(int index) const;
  [[noreturn]] void cannot(const std::string& layer, const std::string& why) const;
  void require_room_to_downsample(const std::string& layer, Dims in, int stride) const;
  std::string auto_name(const char* prefix);
  int make_conv(int x, int channels, int kernel_h, int kernel_w, int stride, int pad_top,
                int pad_bottom, int pad_left, int pad_right, const std::string& name, bool bias,
                Init weight, Init bias_init);
  Graph graph_;
  int counter_ = 0;
};

}  // namespace mbkit::nn
