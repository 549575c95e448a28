// `mb-dataset fetch`: get a known dataset's published files (download with a cache, a mirror,
// a local copy, or a distribution package), check them against their published checksums, and
// write one mbkit dataset file, atomically.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mbkit/data/catalog.hpp"
#include "mbkit/data/format.hpp"

namespace mbkit::data {

struct FetchOptions {
  std::string name;            ///< catalog name: mnist, fashion-mnist, cifar10, cifar100
  std::string output;          ///< the .h5 file to write
  std::string from;            ///< local directory (or, for one-file datasets, the archive)
  std::string mirror;          ///< base URL replacing the published ones
  std::string cache_dir;       ///< download cache; empty = $XDG_CACHE_HOME/mbkit
  std::string checksums_file;  ///< md5sum/sha256sum-style list replacing published checksums
  bool no_checksum = false;    ///< accept files whose checksum is unknown or differs
  bool force = false;          ///< rebuild even when a valid output exists
  int retries = 3;
  long stall_timeout = 60;
  int deflate_level = 4;
};

struct FetchReport {
  std::string output;
  bool kept_existing = false;  ///< a valid output was already there (and not --force)
  std::string source;          ///< where the files came from
  DatasetInfo info;
  double seconds = 0;
};

FetchReport fetch_dataset(const FetchOptions& options);

/// Parses an md5sum/sha256sum-style list ("<hex>  <name>" per line; md5 when 32 hex digits,
/// sha256 when 64) into name -> lowercase hex digest.
std::map<std::string, std::string> parse_checksum_list(const std::string& text,
                                                       const std::string& list_name);

}  // namespace mbkit::data
