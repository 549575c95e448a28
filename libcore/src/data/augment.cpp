#include "mbkit/data/augment.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::data {
namespace {

constexpr int kMaxCropPadding = 64;
constexpr std::uint64_t kAugmentStream = 0x6175676d65;  // "augme"

const char* const kItems = "crop:PAD, shift:FRACTION and flip";

// Output (y, x) of the crop is input (y + crop_y, x + crop_x), or a stored 0 outside the image.
void crop_image(const AugmentDraw& draw, ImageShape shape, const std::uint8_t* source,
                const float* table, float* target) {
  const std::int64_t height = shape.height;
  const std::int64_t width = shape.width;
  const std::int64_t shift_y = draw.crop_y;
  const std::int64_t shift_x = draw.crop_x;
  // Output columns [x_begin, x_end) come from inside the image.
  const std::int64_t x_begin = std::clamp<std::int64_t>(-shift_x, 0, width);
  const std::int64_t x_end = std::clamp<std::int64_t>(width - shift_x, x_begin, width);
  for (std::int64_t c = 0; c < shape.channels; ++c) {
    const float* channel_table = table + c * 256;
    const float zero = channel_table[0];
    for (std::int64_t y = 0; y < height; ++y) {
      float* out = target + (c * height + y) * width;
      const std::int64_t source_y = y + shift_y;
      if (source_y < 0 || source_y >= height) {
        std::fill(out, out + width, zero);
        continue;
      }
      const std::uint8_t* in = source + (c * height + source_y) * width;
      std::fill(out, out + x_begin, zero);
      for (std::int64_t x = x_begin; x < x_end; ++x) out[x] = channel_table[in[x + shift_x]];
      std::fill(out + x_end, out + width, zero);
    }
  }
}

void normalise_image(ImageShape shape, const std::uint8_t* source, const float* table,
                     float* target) {
  const auto plane = static_cast<std::size_t>(shape.height) * static_cast<std::size_t>(shape.width);
  for (std::size_t c = 0; c < static_cast<std::size_t>(shape.channels); ++c) {
    const float* channel_table = table + c * 256;
    for (std::size_t i = 0; i < plane; ++i) {
      target[c * plane + i] = channel_table[source[c * plane + i]];
    }
  }
}

// Linear interpolation at coordinate `at` of a line of `size` samples, with the coordinate
// clamped to [0, size - 1]: the same as extending the line by its edge values (scipy's mode
// 'nearest', which Keras' fill_mode='nearest' passes on).
struct Tap {
  std::int64_t low = 0;
  std::int64_t high = 0;
  float weight = 0.0f;  ///< of high
};
Tap tap_at(double at, std::int64_t size) {
  const double clamped = std::clamp(at, 0.0, static_cast<double>(size - 1));
  Tap tap;
  tap.low = static_cast<std::int64_t>(std::floor(clamped));
  tap.high = std::min(tap.low + 1, size - 1);
  tap.weight = static_cast<float>(clamped - static_cast<double>(tap.low));
  return tap;
}

// Separable: each input row interpolated along x once (into target), then pairs of those rows
// blended along y in place, the same float operations as interpolating every output pixel from
// its four neighbours. Output row y reads rows at or below y when shifting down (y ascending
// overwrites only rows already used), at or above y when shifting up (y descending).
void shift_image(const AugmentDraw& draw, ImageShape shape, const float* source, float* target) {
  const std::int64_t height = shape.height;
  const std::int64_t width = shape.width;
  std::vector<Tap> columns(static_cast<std::size_t>(width));
  for (std::int64_t x = 0; x < width; ++x) {
    columns[static_cast<std::size_t>(x)] = tap_at(static_cast<double>(x) + draw.shift_x, width);
  }
  for (std::int64_t c = 0; c < shape.channels; ++c) {
    const float* in = source + c * height * width;
    float* plane = target + c * height * width;
    for (std::int64_t y = 0; y < height; ++y) {
      const float* line = in + y * width;
      float* out = plane + y * width;
      for (std::int64_t x = 0; x < width; ++x) {
        const Tap& column = columns[static_cast<std::size_t>(x)];
        out[x] = (1.0f - column.weight) * line[column.low] + column.weight * line[column.high];
      }
    }
    const bool down = draw.shift_y >= 0;
    for (std::int64_t i = 0; i < height; ++i) {
      const std::int64_t y = down ? i : height - 1 - i;
      const Tap row = tap_at(static_cast<double>(y) + draw.shift_y, height);
      const float* upper = plane + row.low * width;
      const float* lower = plane + row.high * width;
      float* out = plane + y * width;
      const float weight = row.weight;
      for (std::int64_t x = 0; x < width; ++x) {
        out[x] = (1.0f - weight) * upper[x] + weight * lower[x];
      }
    }
  }
}

}  // namespace

std::string Augmentation::text() const {
  std::vector<std::string> items;
  if (crop_padding > 0) items.push_back(cat("crop:", crop_padding));
  if (shift > 0) items.push_back(cat("shift:", shortest_decimal(shift)));
  if (flip) items.emplace_back("flip");
  return join(items, ",");
}

Augmentation default_augmentation() {
  Augmentation augmentation;
  augmentation.crop_padding = 4;
  augmentation.flip = true;
  return augmentation;
}

Augmentation parse_augmentation(const std::string& list) {
  Augmentation augmentation;
  bool crop = false;
  bool shift = false;
  for (const std::string& item : split(list, ',')) {
    const std::string_view name = trim(item);
    const auto colon = name.find(':');
    const std::string_view kind = name.substr(0, colon);
    const std::string_view value =
        colon == std::string_view::npos ? std::string_view() : name.substr(colon + 1);
    const auto refuse_repeat = [&](bool seen) {
      if (seen) usage_error(cat("--augment: '", kind, "' is given twice in '", list, "'"));
    };
    if (kind == "crop") {
      refuse_repeat(crop);
      crop = true;
      if (value.empty()) usage_error(cat("--augment: crop needs its padding, as crop:4"));
      const long long padding = parse_int(value, "--augment crop");
      if (padding < 1 || padding > kMaxCropPadding) {
        usage_error(cat("--augment: crop:", value, ": the padding must be from 1 to ",
                        kMaxCropPadding, " pixels"));
      }
      augmentation.crop_padding = static_cast<int>(padding);
    } else if (kind == "shift") {
      refuse_repeat(shift);
      shift = true;
      if (value.empty()) usage_error(cat("--augment: shift needs its fraction, as shift:0.1"));
      const double fraction = parse_double(value, "--augment shift");
      if (!(fraction > 0 && fraction < 1)) {
        usage_error(cat("--augment: shift:", value,
                        ": the fraction of the width and height must be in (0, 1)"));
      }
      augmentation.shift = fraction;
    } else if (kind == "flip") {
      refuse_repeat(augmentation.flip);
      if (colon != std::string_view::npos) {
        usage_error(cat("--augment: flip takes no value ('", name, "')"));
      }
      augmentation.flip = true;
    } else if (name.empty()) {
      usage_error(cat("--augment: '", list, "' has an empty item; items are ", kItems));
    } else {
      usage_error(cat("--augment: unknown item '", name, "'; items are ", kItems));
    }
  }
  return augmentation;
}

Rng augment_rng(std::uint64_t seed, std::int64_t epoch, std::uint64_t row) {
  std::uint64_t state = kAugmentStream;
  std::uint64_t stream = splitmix64(state);
  for (const std::uint64_t part : {static_cast<std::uint64_t>(epoch), row}) {
    state = stream ^ part;
    stream = splitmix64(state);
  }
  return Rng(seed, stream);
}

AugmentDraw draw_augmentation(const Augmentation& augmentation, ImageShape shape, Rng& rng) {
  AugmentDraw draw;
  if (augmentation.crop_padding > 0) {
    const auto window = 2 * static_cast<std::uint64_t>(augmentation.crop_padding) + 1;
    draw.crop_y = static_cast<int>(rng.below(window)) - augmentation.crop_padding;
    draw.crop_x = static_cast<int>(rng.below(window)) - augmentation.crop_padding;
  }
  if (augmentation.shift > 0) {
    // Keras: np.random.uniform(-range, range) * the image's height (rows), then width.
    draw.shift_y = (2.0 * rng.uniform() - 1.0) * augmentation.shift * shape.height;
    draw.shift_x = (2.0 * rng.uniform() - 1.0) * augmentation.shift * shape.width;
  }
  if (augmentation.flip) draw.flip = rng.below(2) == 1;
  return draw;
}

void augment_image(const Augmentation& augmentation, const AugmentDraw& draw, ImageShape shape,
                   const std::uint8_t* source, const float* table, float* scratch, float* target) {
  const bool shift = augmentation.shift > 0;
  float* first = shift ? scratch : target;
  if (augmentation.crop_padding > 0) {
    crop_image(draw, shape, source, table, first);
  } else {
    normalise_image(shape, source, table, first);
  }
  if (shift) shift_image(draw, shape, scratch, target);
  if (draw.flip) {
    const auto width = static_cast<std::size_t>(shape.width);
    const std::size_t lines =
        static_cast<std::size_t>(shape.channels) * static_cast<std::size_t>(shape.height);
    for (std::size_t line = 0; line < lines; ++line) {
      std::reverse(target + line * width, target + (line + 1) * width);
    }
  }
}

}  // namespace mbkit::data
