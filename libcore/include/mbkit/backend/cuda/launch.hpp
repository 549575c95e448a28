// Launch geometry of the CUDA backend's own kernels: grid-stride loops over `count` elements,
// in blocks of kThreads, with at most kMaxBlocks blocks (enough to fill a GPU many times over;
// each thread then takes several elements). Host-only arithmetic, tested without a GPU.
#pragma once

#include <cstdint>

namespace mbkit::backend::cuda {

inline constexpr int kThreads = 256;
inline constexpr std::int64_t kMaxBlocks = 65535;

/// Blocks for a grid-stride loop over `count` elements: ceil(count / threads), at least 1 (a
/// launch of zero blocks is an error), at most kMaxBlocks.
constexpr int blocks_for(std::int64_t count, int threads = kThreads) {
  const std::int64_t needed = count <= 0 ? 1 : (count + threads - 1) / threads;
  return static_cast<int>(needed < kMaxBlocks ? needed : kMaxBlocks);
}

/// Dropout draws its masks as the CPU backend does, from Rng(seed, block) over blocks of this
/// many elements, one GPU thread per block: the masks are the same on both backends.
inline constexpr std::int64_t kDropoutBlock = 4096;

constexpr std::int64_t dropout_streams(std::int64_t count) {
  return (count + kDropoutBlock - 1) / kDropoutBlock;
}

}  // namespace mbkit::backend::cuda
