// The datasets `mb-dataset fetch` knows: where they are published, the checksums their
// publishers list, and their classes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mbkit::data {

enum class SourceFormat {
  kIdx,       ///< four IDX files: train images, train labels, test images, test labels
  kCifar10,   ///< cifar-10-binary.tar.gz
  kCifar100,  ///< cifar-100-binary.tar.gz
};

struct CatalogFile {
  std::string name;        ///< published file name, e.g. train-images-idx3-ubyte.gz
  std::string md5;         ///< checksum published with the dataset (of the archive bytes)
  std::uint64_t size = 0;  ///< published size in bytes (progress display)
  /// SHA-256 of the decompressed bytes, where known: accepts copies that were recompressed
  /// (Debian's dataset-fashion-mnist strips the gzip name field, changing the archive's MD5).
  std::string content_sha256;
};

struct CatalogEntry {
  std::string name;
  std::string title;
  SourceFormat format = SourceFormat::kIdx;
  std::vector<std::string> mirrors;  ///< base URLs, tried in order
  std::vector<CatalogFile> files;
  int num_classes = 0;
  int num_coarse_classes = 0;
  std::vector<std::string> class_names;
  std::vector<std::string> coarse_class_names;
  /// A system directory holding the files (a distribution package), used when it exists and
  /// neither --from nor --mirror is given.
  std::string system_directory;
  std::string system_package;
  std::string homepage;
};

const std::vector<CatalogEntry>& catalog();
/// nullptr when unknown.
const CatalogEntry* find_catalog_entry(const std::string& name);
/// "mnist, fashion-mnist, cifar10, cifar100".
std::string known_dataset_names();

}  // namespace mbkit::data
