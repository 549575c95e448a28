// Parsers for the formats datasets are published in: IDX (MNIST, Fashion-MNIST) and the CIFAR
// binary record files. Each checks sizes, magic numbers and label ranges and reports a data
// error naming the file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mbkit/data/format.hpp"

namespace mbkit::data {

/// Images and labels of one split, in memory.
struct LabeledImages {
  ImageShape shape;
  std::vector<std::uint8_t> images;  ///< count() * shape.pixels() bytes, C,H,W order
  std::vector<std::int32_t> labels;
  std::vector<std::int32_t> coarse_labels;  ///< CIFAR-100 superclasses; empty otherwise
  std::uint64_t count() const { return labels.size(); }
};

/// An IDX array of unsigned bytes (type code 0x08).
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

/// What an IDX file is given as: decides the magic numbers it may carry (images 0x00000803 or
/// 0x00000804, labels 0x00000801).
enum class IdxRole { kAny, kImages, kLabels };

/// An IDX header: the extents and what they make the file's size.
struct IdxHeader {
  std::vector<std::uint32_t> dims;
  std::size_t header_bytes = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t file_bytes() const { return header_bytes + data_bytes; }
};

/// The longest IDX header (4 dimensions): how much of a file parse_idx_header needs.
inline constexpr std::size_t kLongestIdxHeader = 4 + 4 * 4;

/// Reads and checks an IDX header from the first bytes of a file (the data need not follow):
/// an empty file, a magic number that is not `role`'s (with the value found and the one
/// expected), absurd extents. `name` is used in messages.
IdxHeader parse_idx_header(std::span<const std::uint8_t> bytes, const std::string& name,
                           IdxRole role = IdxRole::kAny);

/// What an IDX header declares, for messages: "60000 images of 28x28", "60000 labels".
std::string describe_idx(const IdxHeader& header, IdxRole role);

/// Parses an (already decompressed) IDX file. `name` is used in messages.
IdxArray parse_idx(std::vector<std::uint8_t> bytes, const std::string& name,
                   IdxRole role = IdxRole::kAny);

/// Checks an image file's extents against its label file's before their data are read: one
/// label per image, 3 or 4 image dimensions, each image extent in 1..65536, one label dimension.
void check_idx_pair(const std::vector<std::uint32_t>& image_dims, const std::string& images_name,
                    const std::vector<std::uint32_t>& label_dims, const std::string& labels_name);

/// Combines an IDX image file (N, H, W) or (N, C, H, W) with an IDX label file (N): counts must
/// match and labels must lie in [0, num_classes).
LabeledImages combine_idx(IdxArray images, const std::string& images_name, IdxArray labels,
                          const std::string& labels_name, int num_classes);

/// CIFAR binary records: `label_bytes` label bytes then 3x32x32 pixels (R, G, B planes).
/// CIFAR-10 has one label byte; CIFAR-100 two (coarse, then fine: the fine one is the label).
LabeledImages parse_cifar(std::span<const std::uint8_t> bytes, int label_bytes, int num_classes,
                          int num_coarse_classes, const std::string& name);

/// Class names from a CIFAR meta text file (one per line, blank lines ignored).
std::vector<std::string> parse_class_name_lines(std::span<const std::uint8_t> bytes);

/// Appends b to a (same shape).
void append_images(LabeledImages& a, LabeledImages&& b);

}  // namespace mbkit::data
