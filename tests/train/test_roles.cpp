// --emulate N under mpirun -n R: the ranks' contiguous shares of the workers (emulated_share),
// and the rank hosting a worker (emulated_host), which the asynchronous servers under shares
// broadcast a worker's round from.
#include <gtest/gtest.h>

#include "mbkit/train/roles.hpp"

namespace mbkit::train {
namespace {

TEST(EmulatedShares, EveryWorkerIsHostedByTheRankWhoseShareHoldsIt) {
  for (int workers = 1; workers <= 12; ++workers) {
    for (int ranks = 1; ranks <= workers; ++ranks) {
      int next = 0;  // the shares are contiguous, in rank order, and cover every worker once
      for (int rank = 0; rank < ranks; ++rank) {
        const auto [first, count] = emulated_share(workers, ranks, rank);
        EXPECT_EQ(first, next);
        EXPECT_EQ(count, workers / ranks + (rank < workers % ranks ? 1 : 0));
        for (int w = first; w < first + count; ++w) {
          EXPECT_EQ(emulated_host(workers, ranks, w), rank)
              << w << " of " << workers << " on " << ranks;
        }
        next = first + count;
      }
      EXPECT_EQ(next, workers);
    }
  }
}

TEST(EmulatedShares, SevenWorkersOnThreeRanks) {
  // Shares of 3, 2, 2 (the first N mod R ranks one more).
  const int hosts[] = {0, 0, 0, 1, 1, 2, 2};
  for (int w = 0; w < 7; ++w) EXPECT_EQ(emulated_host(7, 3, w), hosts[w]) << w;
}

}  // namespace
}  // namespace mbkit::train
