// Reading published dataset formats into memory and writing them as mbkit dataset files.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/parsers.hpp"

namespace mbkit::data {

/// Both splits of a dataset, in memory.
struct LoadedDataset {
  LabeledImages train;
  LabeledImages test;
  int num_classes = 0;
  std::vector<std::string> class_names;
  std::vector<std::string> coarse_class_names;
};

/// A named blob of (decompressed) file content.
struct NamedBytes {
  std::string name;
  std::vector<std::uint8_t> bytes;
};

/// Four IDX files in the order train images, train labels, test images, test labels.
/// num_classes = 0 infers it from the largest label.
LoadedDataset load_idx(std::array<NamedBytes, 4> files, int num_classes);
/// Same, reading the files (each gzip-compressed or not). Every header is read first and the
/// four checked against each other (magic numbers, one label per image, image extents, content
/// a gzip file of that size can hold) before any data is inflated, each into one buffer of its
/// declared size.
LoadedDataset load_idx_files(const std::array<std::string, 4>& paths, int num_classes);

/// CIFAR-10 or CIFAR-100 binary version from the published tar archive or from a directory
/// holding the extracted batch files (directly or in cifar-10-batches-bin/, cifar-100-binary/).
/// Class names come from the archive's meta files, else from `default_*`.
LoadedDataset load_cifar(const std::string& path, bool cifar100,
                         const std::vector<std::string>& default_class_names,
                         const std::vector<std::string>& default_coarse_class_names);

/// Writes `dataset` into the (temporary) file `path` as an mbkit dataset. The header's
/// num_classes and class names are taken from `dataset`.
void write_dataset(const std::string& path, const LoadedDataset& dataset, DatasetHeader header,
                   int deflate_level);

}  // namespace mbkit::data
