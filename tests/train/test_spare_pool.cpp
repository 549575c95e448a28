#include "mbkit/train/spare_pool.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace mbkit::train {
namespace {

struct Values {
  std::vector<float> floats;
};

TEST(SparePool, AnObjectLetGoIsHandedOutAgainWithItsMemory) {
  SparePool<Values> pool(2);
  const Values* first = nullptr;
  {
    auto taken = pool.take();
    taken->floats.assign(1000, 1.0f);
    first = taken.get();
    auto copy = taken;  // still held by the copy when the first goes
    taken.reset();
    auto other = pool.take();
    EXPECT_NE(other.get(), first);
  }
  auto again = pool.take();
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(again->floats.size(), 1000U);  // reused: no new allocation to fault in
}

TEST(SparePool, KeepsNoMoreThanItsLimit) {
  SparePool<Values> pool(2);
  std::vector<std::shared_ptr<Values>> out;
  std::vector<const Values*> addresses;
  for (int i = 0; i < 4; ++i) {
    out.push_back(pool.take());
    addresses.push_back(out.back().get());
  }
  for (auto& taken : out) taken.reset();  // given back in order: the last two past the limit
  auto a = pool.take(), b = pool.take();
  EXPECT_EQ(a.get(), addresses[1]);  // the spares, last kept first
  EXPECT_EQ(b.get(), addresses[0]);
}

TEST(SparePool, ObjectsMayOutliveThePoolAndGoBackOnAnotherThread) {
  std::shared_ptr<Values> outlives;
  {
    SparePool<Values> pool(4);
    outlives = pool.take();
    auto on_thread = pool.take();
    std::thread([held = std::move(on_thread)]() mutable { held.reset(); }).join();
    EXPECT_NE(pool.take().get(), outlives.get());
  }
  outlives->floats.assign(3, 2.0f);
  outlives.reset();  // back into spares the pool no longer owns, then freed with them
  SUCCEED();
}

}  // namespace
}  // namespace mbkit::train
