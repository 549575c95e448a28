// mb-dataset: the library side of the tool (main() only parses options and calls these).
// Each run_* function returns the process exit status; errors are thrown as mbkit::Error.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "mbkit/data/fetch.hpp"
#include "mbkit/data/shard.hpp"
#include "mbkit/data/synth.hpp"

namespace mbkit::tools::dataset {

/// Default deflate level of dataset files: Fashion-MNIST converts in about a second.
inline constexpr int kDefaultCompression = 4;

int run_fetch(const data::FetchOptions& options);

struct ImportOptions {
  std::string format;  ///< idx, cifar10, cifar100
  std::string output;
  std::string name;                      ///< dataset name recorded in the file
  std::array<std::string, 4> idx_files;  ///< train images, train labels, test images, test labels
  std::string from;                      ///< cifar: archive or directory
  int num_classes = 0;                   ///< idx: 0 = largest label + 1
  std::string class_names;               ///< comma-separated, or @FILE with one name per line
  bool force = false;
  int deflate_level = kDefaultCompression;
};
int run_import(const ImportOptions& options);

struct ImportTraceOptions {
  std::string format;  ///< pai (Alibaba PAI mini-batch-time job file) or csv (worker,step,seconds)
  std::string input;
  std::string output;  ///< the HDF5 delay trace (mbkit/emulation/delay_trace.hpp)
  bool whole = false;  ///< pai: each worker's whole time, not its excess over the fastest
  bool force = false;
};
/// Converts a per-worker, per-step time file into the HDF5 delay trace --induce trace:FILE reads.
int run_import_trace(const ImportTraceOptions& options);

struct SynthOptions {
  std::string kind;  ///< toy or images
  std::string output;
  data::ToySynthOptions toy;
  data::ImagesSynthOptions images;
  std::string shape;  ///< images: "C,H,W"
  bool force = false;
  int deflate_level = kDefaultCompression;
};
int run_synth(SynthOptions options);

/// Prints the shard paths on stdout, one per line (for scripts).
int run_shard(const data::ShardOptions& options, std::ostream& out);

struct InfoOptions {
  std::string path;
  bool json = false;
};
int run_info(const InfoOptions& options, std::ostream& out);

struct VerifyOptions {
  std::vector<std::string> paths;
  bool json = false;
};
/// "FILE: OK (...)" per valid file on `out`; each problem as an error line on stderr;
/// exit status 3 when any file is invalid.
int run_verify(const VerifyOptions& options, std::ostream& out);

}  // namespace mbkit::tools::dataset
