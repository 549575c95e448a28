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

/// Parses an (already decompressed) IDX file. `name` is used in messages.
IdxArray parse_idx(std::vector<std::uint8_t> bytes, const std::string& name);

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
