// The one table from ops to the kernels that run them, shared by every backend. A backend fills
// a KernelTable with its own make_*_kernel functions, null where it has no kernel, and answers
// Backend::supports() and make_kernel() from it. A new op is a compile warning (-Wswitch) in
// maker() alone; when it needs a new kind of kernel, that is one member here, which each backend
// sets to its kernel or to nullptr.
#pragma once

#include <memory>
#include <string_view>

#include "mbkit/nn/backend.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::nn {

/// `Context` is what a backend's kernels share (its engine and stream, its GPU and handles).
template <class Context>
struct KernelTable {
  using Make = std::unique_ptr<Kernel> (*)(Context& context, const Node& node);

  Make input = nullptr;
  Make dense = nullptr;
  Make conv = nullptr;
  Make pool = nullptr;  ///< max, average and global average pooling
  Make batch_norm = nullptr;
  Make activation = nullptr;  ///< relu, sigmoid, tanh
  Make dropout = nullptr;
  Make flatten = nullptr;
  Make add = nullptr;
  Make loss = nullptr;  ///< softmax cross-entropy
  Make concat = nullptr;
  Make lrn = nullptr;

  /// The function that makes `op`'s kernel, or null where the backend has none.
  constexpr Make maker(Op op) const {
    switch (op) {
      case Op::kInput:
        return input;
      case Op::kDense:
        return dense;
      case Op::kConv2d:
        return conv;
      case Op::kMaxPool:
      case Op::kAvgPool:
      case Op::kGlobalAvgPool:
        return pool;
      case Op::kBatchNorm:
        return batch_norm;
      case Op::kRelu:
      case Op::kSigmoid:
      case Op::kTanh:
        return activation;
      case Op::kDropout:
        return dropout;
      case Op::kFlatten:
        return flatten;
      case Op::kAdd:
        return add;
      case Op::kSoftmaxCrossEntropy:
        return loss;
      case Op::kConcat:
        return concat;
      case Op::kLrn:
        return lrn;
    }
    return nullptr;
  }

  constexpr bool supports(Op op) const { return maker(op) != nullptr; }

  /// The kernel of `node`; an op without one is an internal error (a Network asks supports()
  /// before it builds anything), named with `backend` ("cpu").
  std::unique_ptr<Kernel> make(Context& context, const Node& node, std::string_view backend) const {
    const Make make_kernel = maker(node.op);
    if (make_kernel == nullptr) fail(cat(backend, " backend: no kernel for ", op_name(node.op)));
    return make_kernel(context, node);
  }
};

}  // namespace mbkit::nn
