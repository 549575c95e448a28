// Per-sample augmentation of training images (--augment LIST), as the originals use it:
//
//   crop:PAD       zero-pad by PAD pixels on every side, then crop a window of the original size
//                  at a random position (torchvision RandomCrop(size, padding=PAD), the CIFAR
//                  ResNet recipe; MXNet's pad_size + random_crop; tf_cnn_benchmarks' pad-and-crop)
//   shift:FRACTION Keras ImageDataGenerator(width_shift_range=F, height_shift_range=F), the DBSL
//                  original's: a real-valued shift of up to F x height rows and F x width columns,
//                  linear interpolation, fill mode 'nearest' (the edge pixel repeats; the Keras
//                  default, which the original keeps)
//   flip           random horizontal mirror with probability 1/2 (RandomHorizontalFlip,
//                  random_mirror, horizontal_flip)
//
// The transforms run in that order (crop, shift, flip) whatever order the list names them in.
// Every draw of one sample comes from its own stream, a function of (seed, epoch, the sample's
// row in the split): the same sample is augmented the same way whichever rank, thread or
// prefetch depth loads it.
#pragma once

#include <cstdint>
#include <string>

#include "mbkit/data/format.hpp"
#include "mbkit/util/random.hpp"

namespace mbkit::data {

struct Augmentation {
  int crop_padding = 0;  ///< crop:PAD (0: no crop)
  double shift = 0.0;    ///< shift:FRACTION (0: no shift)
  bool flip = false;     ///< flip

  bool enabled() const { return crop_padding > 0 || shift > 0 || flip; }
  /// The list in its canonical form ("crop:4,flip"), as --augment takes it; "" when disabled.
  std::string text() const;
  bool operator==(const Augmentation&) const = default;
};

/// What bare --augment means: crop:4,flip (the CIFAR recipe; mbkit's --augment before LIST).
Augmentation default_augmentation();

/// Parses --augment's comma-separated LIST (crop:PAD, shift:FRACTION, flip, each at most once;
/// PAD from 1 to 64, FRACTION in (0, 1)); bad lists are usage errors naming --augment.
Augmentation parse_augmentation(const std::string& list);

/// The random draws of one sample.
struct AugmentDraw {
  int crop_y = 0;        ///< crop: rows the window moves down from the centre, in [-PAD, PAD]
  int crop_x = 0;        ///< crop: columns the window moves right, in [-PAD, PAD]
  double shift_y = 0.0;  ///< shift: output row y reads input row y + shift_y
  double shift_x = 0.0;  ///< shift: output column x reads input column x + shift_x
  bool flip = false;
};

/// The stream of sample `row` (its row in the whole split) in `epoch`.
Rng augment_rng(std::uint64_t seed, std::int64_t epoch, std::uint64_t row);

/// Draws in this order: crop_y, crop_x (below(2 PAD + 1) - PAD each), shift_y, shift_x
/// (uniform in [-F, F) times height, width, as Keras), flip (below(2) == 1); only for the
/// transforms `augmentation` has.
AugmentDraw draw_augmentation(const Augmentation& augmentation, ImageShape shape, Rng& rng);

/// Writes the augmented, normalised image: `source` is one stored uint8 image (C, H, W),
/// `table[c * 256 + v]` the normalised value of v in channel c, `scratch` room for one image
/// (used by shift). Padding of crop is a stored 0 (table[c * 256]); shift interpolates the
/// normalised values: (1 - wy) ((1 - wx) a + wx b) + wy ((1 - wx) c + wx d), in float.
void augment_image(const Augmentation& augmentation, const AugmentDraw& draw, ImageShape shape,
                   const std::uint8_t* source, const float* table, float* scratch, float* target);

}  // namespace mbkit::data
