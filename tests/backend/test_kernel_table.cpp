// The op -> kernel table every backend answers supports() and make_kernel() from.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/nn/kernel_table.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::nn {
namespace {

// Every op: the enum's values from the first to the last that op_name() knows (-Wswitch makes
// it name a new one), so that an op added at the end is covered too.
std::set<Op> all_ops() {
  std::set<Op> ops;
  for (int op = static_cast<int>(Op::kInput); std::string(op_name(static_cast<Op>(op))) != "?";
       ++op) {
    ops.insert(static_cast<Op>(op));
  }
  return ops;
}

struct FakeContext {
  std::string made;  ///< the node names of the kernels made, in order
};

class NoKernel final : public Kernel {
 public:
  void prepare(int, std::span<Tensor* const>, Tensor&) override {}
  void forward(KernelArgs&) override {}
  void backward(KernelArgs&) override {}
};

std::unique_ptr<Kernel> make_pool(FakeContext& context, const Node& node) {
  context.made += "pool:" + node.name + " ";
  return std::make_unique<NoKernel>();
}
std::unique_ptr<Kernel> make_activation(FakeContext& context, const Node& node) {
  context.made += "activation:" + node.name + " ";
  return std::make_unique<NoKernel>();
}

constexpr KernelTable<FakeContext> kPoolAndActivation{.pool = make_pool,
                                                      .activation = make_activation};

TEST(KernelTable, AKernelServesEveryOpOfItsKindAndNoOther) {
  const std::set<Op> served = {Op::kMaxPool, Op::kAvgPool, Op::kGlobalAvgPool,
                               Op::kRelu,    Op::kSigmoid, Op::kTanh};
  for (Op op : all_ops()) {
    EXPECT_EQ(kPoolAndActivation.supports(op), served.contains(op)) << op_name(op);
  }
}

TEST(KernelTable, MakesTheNodesKernelWithTheBackendsContext) {
  FakeContext context;
  Node pool;
  pool.op = Op::kGlobalAvgPool;
  pool.name = "gap";
  Node relu;
  relu.op = Op::kRelu;
  relu.name = "relu1";
  EXPECT_NE(kPoolAndActivation.make(context, pool, "fake"), nullptr);
  EXPECT_NE(kPoolAndActivation.make(context, relu, "fake"), nullptr);
  EXPECT_EQ(context.made, "pool:gap activation:relu1 ");
}

TEST(KernelTable, AnOpWithoutAKernelIsAnErrorNamingTheBackendAndTheOp) {
  FakeContext context;
  Node dense;
  dense.op = Op::kDense;
  dense.name = "fc1";
  try {
    kPoolAndActivation.make(context, dense, "fake");
    ADD_FAILURE() << "a kernel for an op the table lacks";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "fake backend: no kernel for dense");
  }
  EXPECT_EQ(context.made, "");
}

TEST(KernelTable, TheCpuBackendHasAKernelForEveryOp) {
  ASSERT_TRUE(all_ops().contains(Op::kLrn));  // the last op today
  const std::unique_ptr<Backend> cpu = backend::make_cpu_backend(1);
  for (Op op : all_ops()) EXPECT_TRUE(cpu->supports(op)) << op_name(op);
}

}  // namespace
}  // namespace mbkit::nn
