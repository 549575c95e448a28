// mb-eval: evaluates a checkpoint on a dataset split (the library side of the tool). The model
// is rebuilt from the checkpoint alone. Under mpirun each rank evaluates its slice of the split
// and the counts are summed, so every sample counts exactly once.
#pragma once

#include <ostream>
#include <string>

namespace mbkit::tools::eval {

struct EvalOptions {
  std::string checkpoint;
  std::string data;
  std::string split = "test";
  int top_k = 5;
  int batch_size = 256;
  std::uint64_t limit = 0;  ///< evaluate only the first N samples (0: all)
  int threads = 0;
  std::string device = "cpu";
  std::string precision = "fp32";  ///< --precision
  bool json = false;
  std::string output;  ///< RESULT.h5 (format "mbkit-eval")
  bool force = false;
};

/// Prints the result (table or JSON) on `out` (rank 0 only) and writes `output` if given.
int run_eval(const EvalOptions& options, std::ostream& out);

}  // namespace mbkit::tools::eval
