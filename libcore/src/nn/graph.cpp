#include "mbkit/nn/graph.hpp"

#include <cmath>

#include "mbkit/util/check.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::nn {

std::string Dims::text() const {
  return cat(c, "x", h, "x", w);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kInput:
      return "input";
    case Op::kDense:
      return "dense";
    case Op::kConv2d:
      return "conv2d";
    case Op::kMaxPool:
      return "max_pool";
    case Op::kAvgPool:
      return "avg_pool";
    case Op::kGlobalAvgPool:
      return "global_avg_pool";
    case Op::kBatchNorm:
      return "batch_norm";
    case Op::kRelu:
      return "relu";
    case Op::kSigmoid:
      return "sigmoid";
    case Op::kTanh:
      return "tanh";
    case Op::kDropout:
      return "dropout";
    case Op::kFlatten:
      return "flatten";
    case Op::kAdd:
      return "add";
    case Op::kSoftmaxCrossEntropy:
      return "softmax_cross_entropy";
    case Op::kConcat:
      return "concat";
    case Op::kLrn:
      return "lrn";
  }
  return "?";
}

std::int64_t ParamSpec::size() const {
  std::int64_t total = 1;
  for (const auto extent : shape) total *= extent;
  return total;
}

std::vector<const ParamSpec*> Graph::parameters() const {
  std::vector<const ParamSpec*> all;
  for (const auto& node : nodes_) {
    for (const auto& param : node.params) all.push_back(&param);
  }
  return all;
}

std::vector<const ParamSpec*> Graph::state_arrays() const {
  std::vector<const ParamSpec*> all;
  for (const auto& node : nodes_) {
    for (const auto& array : node.state) all.push_back(&array);
  }
  return all;
}

namespace {

void fill(std::span<float> values, const ParamSpec& spec, Rng& rng) {
  switch (spec.init.kind) {
    case InitKind::kZeros:
      std::fill(values.begin(), values.end(), 0.0f);
      break;
    case InitKind::kOnes:
      std::fill(values.begin(), values.end(), 1.0f);
      break;
    case InitKind::kUniformFanIn: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.fan_in));
      for (auto& v : values) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    case InitKind::kHeNormal: {
      const double stddev = std::sqrt(2.0 / static_cast<double>(spec.fan_in));
      for (auto& v : values) v = static_cast<float>(rng.normal(0.0, stddev));
      break;
    }
    case InitKind::kGlorotUniform: {
      const double bound = std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out));
      for (auto& v : values) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    case InitKind::kConstant:
      std::fill(values.begin(), values.end(), static_cast<float>(spec.init.value));
      break;
    case InitKind::kTruncatedNormal:
      for (auto& v : values) {
        double x = 0;
        do {
          x = rng.normal();
        } while (std::fabs(x) > 2.0);
        v = static_cast<float>(x * spec.init.stddev);
      }
      break;
  }
}

}  // namespace

void Graph::initialize(std::span<float> params, std::span<float> state, std::uint64_t seed) const {
  MBKIT_CHECK(params.size() == parameter_count_ && state.size() == state_count_,
              "initialize: buffers of ", params.size(), "/", state.size(), " floats for ",
              parameter_count_, "/", state_count_);
  std::uint64_t stream = 0;
  for (const auto* spec : parameters()) {
    // One stream per parameter: a parameter's values do not depend on the others' sizes.
    Rng rng(seed, 0x1000 + stream++);
    fill(params.subspan(spec->offset, static_cast<std::size_t>(spec->size())), *spec, rng);
  }
  for (const auto* spec : state_arrays()) {
    Rng rng(seed, 0);
    fill(state.subspan(spec->offset, static_cast<std::size_t>(spec->size())), *spec, rng);
  }
}

std::string Graph::summary() const {
  std::string text =
      strprintf("%-28s %-22s %-12s %12s\n", "layer", "operation", "output", "parameters");
  for (const auto& node : nodes_) {
    std::int64_t count = 0;
    for (const auto& param : node.params) count += param.size();
    text += strprintf("%-28s %-22s %-12s %12lld\n", node.name.c_str(), op_name(node.op),
                      node.output.text().c_str(), static_cast<long long>(count));
  }
  text += strprintf("%-28s %-22s %-12s %12zu\n", "total", "", "", parameter_count_);
  return text;
}

// ---------------------------------------------------------------------------------------------

GraphBuilder::GraphBuilder(std::string model, Dims input, int num_classes) {
  graph_.model_ = std::move(model);
  graph_.input_ = input;
  graph_.num_classes_ = num_classes;
  if (input.c < 1 || input.h < 1 || input.w < 1) {
    usage_error(cat("model ", graph_.model_, ": invalid input shape ", input.text()));
  }
  if (num_classes < 2) usage_error(cat("model ", graph_.model_, ": needs at least 2 classes"));
  Node node;
  node.op = Op::kInput;
  node.name = "input";
  node.output = input;
  graph_.nodes_.push_back(node);
}

Dims GraphBuilder::dims(int node) const {
  return at(node).output;
}

const Node& GraphBuilder::at(int index) const {
  MBKIT_CHECK(index >= 0 && index < static_cast<int>(graph_.nodes_.size()), "no node ", index);
  return graph_.nodes_[static_cast<std::size_t>(index)];
}

void GraphBuilder::cannot(const std::string& layer, const std::string& why) const {
  usage_error(cat("model ", graph_.model_, " cannot take ", graph_.input_.text(),
                  " inputs: ", layer, " ", why));
}

std::string GraphBuilder::auto_name(const char* prefix) {
  return cat(prefix, ++counter_);
}

int GraphBuilder::push(Node node) {
  for (const auto& existing : graph_.nodes_) {
    MBKIT_CHECK(existing.name != node.name, "model ", graph_.model_, ": two layers named ",
                node.name);
  }
  graph_.nodes_.push_back(std::move(node));
  return static_cast<int>(graph_.nodes_.size()) - 1;
}

namespace {

ParamSpec param(const std::string& name, std::vector<std::int64_t> shape, Init init,
                std::int64_t fan_in, std::int64_t fan_out) {
  ParamSpec spec;
  spec.name = name;
  spec.shape = std::move(shape);
  spec.init = init;
  spec.fan_in = fan_in;
  spec.fan_out = fan_out;
  return spec;
}

// TensorFlow's SAME: output ceil(in / stride), the padding split with the extra pixel after.
void same_padding(int in, int kernel, int stride, int& before, int& after, int& out) {
  out = (in + stride - 1) / stride;
  const int total = std::max((out - 1) * stride + kernel - in, 0);
  before = total / 2;
  after = total - before;
}

}  // namespace

int GraphBuilder::dense(int x, int units, const std::string& name, bool bias, Init weight,
                        Init bias_init) {
  const Dims in = dims(x);
  if (units < 1) cannot(name, "needs at least one unit");
  if (!in.flat()) x = flatten(x);
  const std::int64_t features = in.size();
  Node node;
  node.op = Op::kDense;
  node.name = name;
  node.inputs = {x};
  node.units = units;
  node.bias = bias;
  node.output = {units, 1, 1};
  node.params.push_back(param(name + ".weight", {units, features}, weight, features, units));
  if (bias) node.params.push_back(param(name + ".bias", {units}, bias_init, features, units));
  return push(std::move(node));
}

int GraphBuilder::make_conv(int x, int channels, int kernel_h, int kernel_w, int stride,
                            int pad_top, int pad_bottom, int pad_left, int pad_right,
                            const std::string& name, bool bias, Init weight, Init bias_init) {
  const Dims in = dims(x);
  if (channels < 1 || kernel_h < 1 || kernel_w < 1 || stride < 1) {
    cannot(name, "has an invalid configuration");
  }
  require_room_to_downsample(name, in, stride);
  const int padded_h = in.h + pad_top + pad_bottom, padded_w = in.w + pad_left + pad_right;
  if (padded_h < kernel_h || padded_w < kernel_w) {
    cannot(name, cat("needs at least ", kernel_h, "x", kernel_w, " pixels with its padding, got ",
                     in.h, "x", in.w));
  }
  Node node;
  node.op = Op::kConv2d;
  node.name = name;
  node.inputs = {x};
  node.units = channels;
  node.kernel_h = kernel_h;
  node.kernel_w = kernel_w;
  node.stride_h = node.stride_w = stride;
  node.pad_top = pad_top;
  node.pad_bottom = pad_bottom;
  node.pad_left = pad_left;
  node.pad_right = pad_right;
  node.bias = bias;
  node.output = {channels, (padded_h - kernel_h) / stride + 1, (padded_w - kernel_w) / stride + 1};
  const std::int64_t area = static_cast<std::int64_t>(kernel_h) * kernel_w;
  const std::int64_t fan_in = in.c * area;
  const std::int64_t fan_out = channels * area;
  node.params.push_back(
      param(name + ".weight", {channels, in.c, kernel_h, kernel_w}, weight, fan_in, fan_out));
  if (bias) node.params.push_back(param(name + ".bias", {channels}, bias_init, fan_in, fan_out));
  return push(std::move(node));
}

int GraphBuilder::conv2d(int x, int channels, int kernel, int stride, Padding padding,
                         const std::string& name, bool bias, Init weight, Init bias_init) {
  return conv2d(x, channels, kernel, kernel, stride, padding, name, bias, weight, bias_init);
}

int GraphBuilder::conv2d(int x, int channels, int kernel_h, int kernel_w, int stride,
                         Padding padding, const std::string& name, bool bias, Init weight,
                         Init bias_init) {
  const Dims in = dims(x);
  int top = 0, bottom = 0, left = 0, right = 0, out = 0;
  if (padding == Padding::kSame) {
    same_padding(in.h, kernel_h, stride, top, bottom, out);
    same_padding(in.w, kernel_w, stride, left, right, out);
  }
  return make_conv(x, channels, kernel_h, kernel_w, stride, top, bottom, left, right, name, bias,
                   weight, bias_init);
}

int GraphBuilder::conv2d(int x, int channels, int kernel, int stride, int pad,
                         const std::string& name, bool bias, Init weight, Init bias_init) {
  if (pad < 0) cannot(name, "has negative padding");
  return make_conv(x, channels, kernel, kernel, stride, pad, pad, pad, pad, name, bias, weight,
                   bias_init);
}

void GraphBuilder::require_room_to_downsample(const std::string& layer, Dims in, int stride) const {
  if (stride > 1 && (in.h < stride || in.w < stride)) {
    cannot(layer, cat("needs at least ", stride, "x", stride, " pixels to downsample, got ", in.h,
                      "x", in.w));
  }
}

namespace {

Node pooling(Op op, const std::string& name, int x, Dims in, int kernel, int stride) {
  Node node;
  node.op = op;
  node.name = name;
  node.inputs = {x};
  node.kernel_h = node.kernel_w = kernel;
  node.stride_h = node.stride_w = stride;
  node.output.c = in.c;
  return node;
}

}  // namespace

int GraphBuilder::max_pool(int x, int kernel, int stride, Padding padding,
                           const std::string& name) {
  const Dims in = dims(x);
  if (kernel < 1 || stride < 1) cannot(name, "has an invalid configuration");
  require_room_to_downsample(name, in, stride);
  Node node = pooling(Op::kMaxPool, name, x, in, kernel, stride);
  if (padding == Padding::kSame) {
    same_padding(in.h, kernel, stride, node.pad_top, node.pad_bottom, node.output.h);
    same_padding(in.w, kernel, stride, node.pad_left, node.pad_right, node.output.w);
  } else {
    if (in.h < kernel || in.w < kernel) {
      cannot(name, cat("needs at least ", kernel, "x", kernel, " pixels, got ", in.h, "x", in.w));
    }
    node.output.h = (in.h - kernel) / stride + 1;
    node.output.w = (in.w - kernel) / stride + 1;
  }
  return push(std::move(node));
}

int GraphBuilder::max_pool(int x, int kernel, int stride, int pad, const std::string& name) {
  const Dims in = dims(x);
  if (kernel < 1 || stride < 1 || pad < 0 || pad >= kernel) {
    cannot(name, "has an invalid configuration");
  }
  require_room_to_downsample(name, in, stride);
  if (in.h + 2 * pad < kernel || in.w + 2 * pad < kernel) {
    cannot(name, cat("needs at least ", kernel, "x", kernel, " pixels with its padding, got ", in.h,
                     "x", in.w));
  }
  Node node = pooling(Op::kMaxPool, name, x, in, kernel, stride);
  node.pad_top = node.pad_bottom = node.pad_left = node.pad_right = pad;
  node.output.h = (in.h + 2 * pad - kernel) / stride + 1;
  node.output.w = (in.w + 2 * pad - kernel) / stride + 1;
  return push(std::move(node));
}

int GraphBuilder::avg_pool(int x, int kernel, int stride, Padding padding,
                           const std::string& name) {
  const int index = max_pool(x, kernel, stride, padding, name);
  graph_.nodes_.back().op = Op::kAvgPool;
  return index;
}

int GraphBuilder::global_avg_pool(int x, const std::string& name) {
  const Dims in = dims(x);
  Node node = pooling(Op::kGlobalAvgPool, name, x, in, 0, 1);
  node.kernel_h = in.h;
  node.kernel_w = in.w;
  node.output = {in.c, 1, 1};
  return push(std::move(node));
}

int GraphBuilder::batch_norm(int x, const std::string& name, double epsilon, double momentum,
                             bool scale) {
  const Dims in = dims(x);
  Node node;
  node.op = Op::kBatchNorm;
  node.name = name;
  node.inputs = {x};
  node.output = in;
  node.epsilon = epsilon;
  node.momentum = momentum;
  node.scale = scale;
  if (scale) node.params.push_back(param(name + ".weight", {in.c}, Init::ones(), in.c, in.c));
  node.params.push_back(param(name + ".bias", {in.c}, Init::zeros(), in.c, in.c));
  node.state.push_back(param(name + ".running_mean", {in.c}, Init::zeros(), in.c, in.c));
  node.state.push_back(param(name + ".running_var", {in.c}, Init::ones(), in.c, in.c));
  return push(std::move(node));
}

namespace {

Node elementwise(Op op, const std::string& name, int x, Dims in) {
  Node node;
  node.op = op;
  node.name = name;
  node.inputs = {x};
  node.output = in;
  return node;
}

}  // namespace

int GraphBuilder::relu(int x) {
  return push(elementwise(Op::kRelu, auto_name("relu"), x, dims(x)));
}
int GraphBuilder::sigmoid(int x) {
  return push(elementwise(Op::kSigmoid, auto_name("sigmoid"), x, dims(x)));
}
int GraphBuilder::tanh(int x) {
  return push(elementwise(Op::kTanh, auto_name("tanh"), x, dims(x)));
}

int GraphBuilder::dropout(int x, double rate) {
  Node node = elementwise(Op::kDropout, auto_name("dropout"), x, dims(x));
  if (!(rate >= 0.0 && rate < 1.0)) cannot(node.name, cat("rate ", rate, " is not in [0, 1)"));
  node.rate = rate;
  return push(std::move(node));
}

int GraphBuilder::flatten(int x) {
  const Dims in = dims(x);
  Node node = elementwise(Op::kFlatten, auto_name("flatten"), x, in);
  node.output = {static_cast<int>(in.size()), 1, 1};
  return push(std::move(node));
}

int GraphBuilder::add(int a, int b, const std::string& name) {
  const std::string node_name = name.empty() ? auto_name("add") : name;
  if (dims(a) != dims(b)) {
    cannot(node_name, cat("adds ", dims(a).text(), " to ", dims(b).text()));
  }
  Node node = elementwise(Op::kAdd, node_name, a, dims(a));
  node.inputs = {a, b};
  return push(std::move(node));
}

int GraphBuilder::concat(const std::vector<int>& xs, const std::string& name) {
  if (xs.size() < 2) cannot(name, "needs at least two inputs");
  const Dims first = dims(xs.front());
  Node node = elementwise(Op::kConcat, name, xs.front(), first);
  node.inputs = xs;
  node.output.c = 0;
  for (const int x : xs) {
    const Dims in = dims(x);
    if (in.h != first.h || in.w != first.w) {
      cannot(name, cat("joins ", first.text(), " and ", in.text(), ": their pixels differ"));
    }
    node.output.c += in.c;
  }
  return push(std::move(node));
}

int GraphBuilder::lrn(int x, int size, double alpha, double beta, double k,
                      const std::string& name) {
  Node node = elementwise(Op::kLrn, name, x, dims(x));
  if (size < 1 || !(alpha >= 0.0) || !(beta >= 0.0) || !(k > 0.0)) {
    cannot(name, "has an invalid configuration");
  }
  node.lrn_size = size;
  node.lrn_alpha = alpha;
  node.lrn_beta = beta;
  node.lrn_k = k;
  return push(std::move(node));
}

Graph GraphBuilder::finish(int logits) {
  const Dims out = dims(logits);
  if (!out.flat() || out.c != graph_.num_classes_) {
    cannot("its output", cat("has shape ", out.text(), " for ", graph_.num_classes_, " classes"));
  }
  Node loss = elementwise(Op::kSoftmaxCrossEntropy, "loss", logits, out);
  graph_.logits_ = logits;
  graph_.loss_ = push(std::move(loss));
  for (const auto& node : graph_.nodes_) {
    for (int input : node.inputs) {
      MBKIT_CHECK(input >= 0 && input < static_cast<int>(graph_.nodes_.size()), "bad input of ",
                  node.name);
    }
  }
  std::size_t offset = 0, state_offset = 0;
  for (auto& node : graph_.nodes_) {
    for (auto& spec : node.params) {
      spec.offset = offset;
      offset += static_cast<std::size_t>(spec.size());
    }
    for (auto& spec : node.state) {
      spec.offset = state_offset;
      state_offset += static_cast<std::size_t>(spec.size());
    }
  }
  graph_.parameter_count_ = offset;
  graph_.state_count_ = state_offset;
  return std::move(graph_);
}

}  // namespace mbkit::nn
