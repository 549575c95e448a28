// --augment LIST: parsing and its errors, each transform (crop, shift, flip) on a tiny
// hand-made image against outputs computed by hand for given draws, and the draws: ranges,
// coverage, and a stream that is a function of (seed, epoch, row) only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "mbkit/data/augment.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

// A 1 x 3 x 3 image holding 1..9 row by row, and a table doubling every value, so the output
// shows that pixels are normalised through the table.
const ImageShape kShape{1, 3, 3};
const std::vector<std::uint8_t> kImage = {1, 2, 3, 4, 5, 6, 7, 8, 9};

std::vector<float> doubling_table() {
  std::vector<float> table(256);
  for (int v = 0; v < 256; ++v) table[static_cast<std::size_t>(v)] = 2.0f * static_cast<float>(v);
  return table;
}

std::vector<float> apply(const Augmentation& augmentation, const AugmentDraw& draw) {
  const auto table = doubling_table();
  std::vector<float> scratch(kShape.pixels()), out(kShape.pixels(), -1.0f);
  augment_image(augmentation, draw, kShape, kImage.data(), table.data(), scratch.data(),
                out.data());
  return out;
}

TEST(Augment, ParsesTheListIntoItsCanonicalForm) {
  const Augmentation a = parse_augmentation("crop:4,flip");
  EXPECT_EQ(a.crop_padding, 4);
  EXPECT_TRUE(a.flip);
  EXPECT_EQ(a.shift, 0.0);
  EXPECT_EQ(a, default_augmentation());
  const Augmentation b = parse_augmentation("flip, shift:0.1");
  EXPECT_EQ(b.shift, 0.1);
  EXPECT_TRUE(b.flip);
  EXPECT_EQ(b.crop_padding, 0);
  EXPECT_EQ(b.text(), "shift:0.1,flip");
  EXPECT_EQ(parse_augmentation(b.text()), b);
  EXPECT_EQ(parse_augmentation("crop:2").text(), "crop:2");
  EXPECT_FALSE(Augmentation{}.enabled());
  EXPECT_EQ(Augmentation{}.text(), "");
  EXPECT_TRUE(parse_augmentation("flip").enabled());
}

TEST(Augment, BadListsAreUsageErrorsNamingTheOption) {
  for (const char* list : {"", "crop", "crop:0", "crop:65", "crop:x", "crop:-1", "shift", "shift:0",
                           "shift:1", "shift:-0.1", "shift:nan", "shift:abc", "flip:1", "rotate:10",
                           "flip,flip", "crop:2,crop:4", "crop:4,,flip"}) {
    SCOPED_TRACE(list);
    EXPECT_MBKIT_ERROR(parse_augmentation(list), ExitCode::kUsage, "--augment");
  }
  EXPECT_MBKIT_ERROR(parse_augmentation("rotate:10"), ExitCode::kUsage, "unknown item 'rotate:10'");
  EXPECT_MBKIT_ERROR(parse_augmentation("flip,flip"), ExitCode::kUsage, "'flip' is given twice");
}

TEST(Augment, CropReadsTheZeroPaddedImageAtTheDrawnOffset) {
  Augmentation crop;
  crop.crop_padding = 1;
  AugmentDraw draw;
  draw.crop_y = 1;   // output row y is input row y + 1
  draw.crop_x = -1;  // output column x is input column x - 1
  // Padding is a stored 0, normalised through the table (2 x 0 = 0).
  EXPECT_EQ(apply(crop, draw), (std::vector<float>{0, 8, 10,   //
                                                   0, 14, 16,  //
                                                   0, 0, 0}));
  draw = {};
  EXPECT_EQ(apply(crop, draw), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16, 18}));
}

TEST(Augment, FlipMirrorsEveryRow) {
  Augmentation flip;
  flip.flip = true;
  AugmentDraw draw;
  draw.flip = true;
  EXPECT_EQ(apply(flip, draw), (std::vector<float>{6, 4, 2, 12, 10, 8, 18, 16, 14}));
  draw.flip = false;
  EXPECT_EQ(apply(flip, draw), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16, 18}));
  // After a crop, as RandomCrop then RandomHorizontalFlip.
  flip.crop_padding = 1;
  draw.flip = true;
  draw.crop_y = 1;
  draw.crop_x = -1;
  EXPECT_EQ(apply(flip, draw), (std::vector<float>{10, 8, 0, 16, 14, 0, 0, 0, 0}));
}

TEST(Augment, ShiftInterpolatesAndRepeatsTheEdgeAsKerasNearest) {
  Augmentation shift;
  shift.shift = 0.5;
  AugmentDraw draw;
  draw.shift_y = 0.5;   // rows y + 0.5: halfway between two rows; row 2.5 clamps to row 2
  draw.shift_x = -1.0;  // columns x - 1: column -1 repeats column 0
  // Input doubled: 2 4 6 / 8 10 12 / 14 16 18.
  EXPECT_EQ(apply(shift, draw), (std::vector<float>{5, 5, 7,     //
                                                    11, 11, 13,  //
                                                    14, 14, 16}));
  // A quarter column to the right: 0.75 a + 0.25 b; the last column repeats.
  draw.shift_y = 0.0;
  draw.shift_x = 0.25;
  EXPECT_EQ(apply(shift, draw),
            (std::vector<float>{2.5f, 4.5f, 6, 8.5f, 10.5f, 12, 14.5f, 16.5f, 18}));
  // Far outside, every output pixel is the nearest corner.
  draw.shift_y = -7.0;
  draw.shift_x = 9.0;
  EXPECT_EQ(apply(shift, draw), std::vector<float>(9, 6.0f));
  // Flip after the shift, as Keras' apply_transform.
  shift.flip = true;
  draw.shift_y = 0.5;
  draw.shift_x = -1.0;
  draw.flip = true;
  EXPECT_EQ(apply(shift, draw), (std::vector<float>{7, 5, 5, 13, 11, 11, 16, 14, 14}));
}

TEST(Augment, DrawsStayInRangeAndCoverIt) {
  const Augmentation all = parse_augmentation("crop:2,shift:0.1,flip");
  const ImageShape shape{3, 20, 30};
  std::set<int> crops;
  int flips = 0;
  double shift_y_min = 1, shift_y_max = -1, shift_x_min = 1, shift_x_max = -1;
  constexpr int kDraws = 2000;
  for (std::uint64_t row = 0; row < kDraws; ++row) {
    Rng rng = augment_rng(7, 0, row);
    const AugmentDraw draw = draw_augmentation(all, shape, rng);
    ASSERT_GE(draw.crop_y, -2);
    ASSERT_LE(draw.crop_y, 2);
    ASSERT_GE(draw.crop_x, -2);
    ASSERT_LE(draw.crop_x, 2);
    crops.insert(draw.crop_y * 10 + draw.crop_x);
    ASSERT_LE(std::abs(draw.shift_y), 2.0);  // 0.1 x 20 rows
    ASSERT_LE(std::abs(draw.shift_x), 3.0);  // 0.1 x 30 columns
    shift_y_min = std::min(shift_y_min, draw.shift_y);
    shift_y_max = std::max(shift_y_max, draw.shift_y);
    shift_x_min = std::min(shift_x_min, draw.shift_x);
    shift_x_max = std::max(shift_x_max, draw.shift_x);
    flips += draw.flip ? 1 : 0;
  }
  EXPECT_EQ(crops.size(), 25u);
  EXPECT_LT(shift_y_min, -1.9);
  EXPECT_GT(shift_y_max, 1.9);
  EXPECT_LT(shift_x_min, -2.9);
  EXPECT_GT(shift_x_max, 2.9);
  // Fair coins: 1000 +- 3.5 standard deviations (22).
  EXPECT_GT(flips, 920);
  EXPECT_LT(flips, 1080);
  // Real-valued shifts, as Keras draws them: not whole pixels.
  Rng rng = augment_rng(7, 0, 0);
  const AugmentDraw draw = draw_augmentation(all, shape, rng);
  EXPECT_NE(draw.shift_y, std::round(draw.shift_y));
}

TEST(Augment, TheStreamIsAFunctionOfSeedEpochAndRow) {
  const Augmentation all = parse_augmentation("crop:4,shift:0.2,flip");
  const ImageShape shape{3, 32, 32};
  const auto draws = [&](std::uint64_t seed, std::int64_t epoch, std::uint64_t row) {
    Rng rng = augment_rng(seed, epoch, row);
    const AugmentDraw d = draw_augmentation(all, shape, rng);
    return std::vector<double>{double(d.crop_y), double(d.crop_x), d.shift_y, d.shift_x,
                               double(d.flip)};
  };
  EXPECT_EQ(draws(1, 2, 3), draws(1, 2, 3));
  EXPECT_NE(draws(1, 2, 3), draws(1, 3, 3));  // another epoch
  EXPECT_NE(draws(1, 2, 3), draws(1, 2, 4));  // another row
  EXPECT_NE(draws(1, 2, 3), draws(2, 2, 3));  // another seed
  EXPECT_NE(draws(1, 2, 3), draws(1, 3, 2));  // epoch and row do not commute
}

}  // namespace
}  // namespace mbkit::data
