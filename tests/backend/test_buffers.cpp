// Flat buffers on every backend this build has: made zero, copied to and from the host by range
// with every byte counted (also on the CPU, where a copy is a memcpy), moved, filled and summed in
// backend memory, and updated by the optimizer operation. Range errors are caught, not written.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mbkit/backend/factory.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/util/error.hpp"

namespace mbkit::backend {
namespace {

class Buffers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { backend_ = make_backend(GetParam(), 1); }

  std::vector<float> read(const nn::Buffer& buffer) {
    std::vector<float> host(buffer.size());
    backend_->copy_to_host(buffer, 0, host);
    return host;
  }

  std::unique_ptr<nn::Backend> backend_;
};

TEST_P(Buffers, MadeZeroAndCopiedByRangeWithEveryByteCounted) {
  auto buffer = backend_->make_buffer(6);
  ASSERT_EQ(buffer->size(), 6u);
  const nn::CopyCounts before = backend_->copied();
  EXPECT_EQ(read(*buffer), std::vector<float>(6, 0.0f));
  const std::vector<float> values = {1, 2, 3};
  backend_->copy_from_host(values, *buffer, 2);
  EXPECT_EQ(read(*buffer), (std::vector<float>{0, 0, 1, 2, 3, 0}));
  std::vector<float> part(2);
  backend_->copy_to_host(*buffer, 3, part);
  EXPECT_EQ(part, (std::vector<float>{2, 3}));
  const nn::CopyCounts moved = backend_->copied() - before;
  EXPECT_EQ(moved.to_host, (6 + 6 + 2) * sizeof(float));
  EXPECT_EQ(moved.from_host, 3 * sizeof(float));
}

TEST_P(Buffers, RangesOutsideTheBufferAreRefused) {
  auto buffer = backend_->make_buffer(4);
  std::vector<float> three(3, 7.0f);
  const nn::CopyCounts before = backend_->copied();
  EXPECT_THROW(backend_->copy_from_host(three, *buffer, 2), Error);
  EXPECT_THROW(backend_->copy_to_host(*buffer, 5, std::span<float>(three).first(0)), Error);
  EXPECT_THROW(backend_->copy_to_host(*buffer, 2, three), Error);
  EXPECT_EQ(backend_->copied().total(), before.total());  // nothing was moved
  EXPECT_EQ(read(*buffer), std::vector<float>(4, 0.0f));
}

TEST_P(Buffers, CopyFillAndAddStayInBackendMemory) {
  auto a = backend_->make_buffer(5);
  auto b = backend_->make_buffer(5);
  backend_->copy_from_host(std::vector<float>{1, 2, 3, 4, 5}, *a, 0);
  const nn::CopyCounts before = backend_->copied();
  backend_->copy(*a, 1, *b, 0, 3);  // b = 2 3 4 0 0
  backend_->fill(*b, 3, 2, 0.5f);   // b = 2 3 4 .5 .5
  backend_->add(*a, *b, 4);         // a = 3 5 7 4.5 5
  EXPECT_EQ(backend_->copied().total(), before.total());
  EXPECT_EQ(read(*b), (std::vector<float>{2, 3, 4, 0.5f, 0.5f}));
  EXPECT_EQ(read(*a), (std::vector<float>{3, 5, 7, 4.5f, 5}));
}

TEST_P(Buffers, HostViewIsTheBufferItselfWhereTheHostCanReachIt) {
  auto buffer = backend_->make_buffer(3);
  const nn::CopyCounts before = backend_->copied();
  nn::HostView view(*backend_, *buffer, 1, 2);
  view.values()[0] = 4;
  view.values()[1] = 5;
  view.write_back();
  EXPECT_EQ(view.staged(), !backend_->host_accessible());
  const nn::CopyCounts moved = backend_->copied() - before;
  // A view copies nothing; a staged copy moves its range once each way.
  EXPECT_EQ(moved.total(), backend_->host_accessible() ? 0u : 4 * sizeof(float));
  EXPECT_EQ(read(*buffer), (std::vector<float>{0, 4, 5}));
}

TEST_P(Buffers, OptimizerStepUpdatesTheRangeItIsGiven) {
  auto params = backend_->make_buffer(4);
  auto grads = backend_->make_buffer(4);
  auto accumulator = backend_->make_buffer(4);
  backend_->copy_from_host(std::vector<float>{1, 1, 1, 1}, *params, 0);
  backend_->copy_from_host(std::vector<float>{1, 2, 3, 4}, *grads, 0);
  nn::OptimizerUpdate update;
  update.rule = nn::OptimizerUpdate::Rule::kMomentum;
  update.count = 2;
  update.params = params->data() + 1;
  update.grads = grads->data() + 1;
  update.state[0] = accumulator->data() + 1;
  update.lr = 0.5f;
  update.momentum = 0.9f;
  backend_->optimizer_step(update);  // a = g; p = 1 - 0.5 g
  backend_->optimizer_step(update);  // a = 1.9 g; p = 1 - 0.5 g - 0.95 g
  EXPECT_EQ(read(*accumulator), (std::vector<float>{0, 0.9f * 2 + 2, 0.9f * 3 + 3, 0}));
  const float p1 = (1.0f - 0.5f * 2) - 0.5f * (0.9f * 2 + 2);
  const float p2 = (1.0f - 0.5f * 3) - 0.5f * (0.9f * 3 + 3);
  EXPECT_EQ(read(*params), (std::vector<float>{1, p1, p2, 1}));
}

INSTANTIATE_TEST_SUITE_P(Backends, Buffers, ::testing::ValuesIn(available_backends()),
                         [](const auto& backend_name) { return backend_name.param; });

}  // namespace
}  // namespace mbkit::backend
