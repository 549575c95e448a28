// A portable, seeded random number generator: the same seed gives the same numbers with every
// compiler and standard library (std::normal_distribution and std::shuffle do not promise that),
// which --seed determinism relies on.
#pragma once

#include <cstdint>
#include <iterator>
#include <utility>

namespace mbkit {

/// xoshiro256** (Blackman & Vigna), seeded through SplitMix64.
class Rng {
 public:
  /// Independent streams for the same seed: e.g. Rng(seed, rank) or Rng(seed, epoch).
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0);

  std::uint64_t next_u64();
  std::uint32_t next_u32() { return static_cast<std::uint32_t>(next_u64() >> 32); }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Uniform in [0, n) without modulo bias (Lemire's method); n > 0.
  std::uint64_t below(std::uint64_t n);
  /// Standard normal (Marsaglia's polar method; the spare value is kept).
  double normal();
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  /// Fisher-Yates shuffle of a random-access range.
  template <class RandomIt>
  void shuffle(RandomIt first, RandomIt last) {
    const auto count = static_cast<std::uint64_t>(std::distance(first, last));
    for (std::uint64_t i = count; i > 1; --i) {
      const auto j = below(i);
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(j)]);
    }
  }

 private:
  std::uint64_t state_[4];
  double spare_normal_ = 0.0;
  bool has_spare_normal_ = false;
};

/// SplitMix64 step: also a good 64-bit mixing function for deriving seeds.
std::uint64_t splitmix64(std::uint64_t& state);

}  // namespace mbkit
