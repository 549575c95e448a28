// mb-bench-bandwidth's measurements, done the way nccl-tests and the OSU micro-benchmarks do
// them: per size, warm-up iterations, a barrier, a timed loop, the time of one iteration
// averaged over the loop on every rank and then over the ranks (avg, min, max), the algorithm
// bandwidth S / t and the bus bandwidth S / t * factor, and a check of the result on an
// untimed iteration (#wrong: elements that differ from the exact expected value).
//
// Sizes (nccl-tests' convention): S is the bytes of the whole result: count * type size for
// allreduce, reduce, bcast and reduce-bcast; the gathered or scattered buffer (count = every
// rank's block together) for gather, allgather and reduce-scatter. Bus factors make busbw
// comparable with the link's bandwidth, whatever the number of ranks n:
//
//   allreduce 2(n-1)/n   reduce-scatter, allgather, gather (n-1)/n   reduce, bcast 1
//   reduce-bcast 2 (a reduce then a bcast of S each: the AMB master's exchange)
//   exchange: ps and async 2 (the gradients in, the parameters out), allreduce 2(n-1)/n
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mbkit/results/bandwidth_results.hpp"

namespace mbkit::bench {

enum class Op {
  kReduceBcast,
  kAllreduce,
  kReduce,
  kBcast,
  kGather,
  kAllgather,
  kReduceScatter,
  kExchange,
};

/// The names of --op, in the order of the enum.
const std::vector<std::string>& op_names();
/// --op NAME (a usage error naming the flag when unknown).
Op parse_op(const std::string& name);
const std::string& op_name(Op op);

enum class Dtype { kFloat, kDouble };
/// --dtype float|double.
Dtype parse_dtype(const std::string& name);
std::size_t type_size(Dtype dtype);
const char* dtype_name(Dtype dtype);

/// "4096", "64K", "1M", "2G" (powers of 1024) into bytes; a usage error naming `flag`.
std::size_t parse_bytes(const std::string& text, const std::string& flag);
/// The sizes from `min` to `max` multiplying by `factor` (nccl-tests' -b -e -f); usage errors
/// for an empty or reversed range or a factor below 2.
std::vector<std::size_t> size_series(std::size_t min_bytes, std::size_t max_bytes, int factor);

/// The bus bandwidth factor of an operation on `ranks` ranks (see above); for exchange,
/// `exchange_mode` is its mode's name ("ps", "allreduce-mpi", ...).
double bus_factor(Op op, int ranks, const std::string& exchange_mode = {});

/// The elements an iteration moves for a requested size: the whole result, a multiple of
/// `ranks` for the operations that split it into per-rank blocks (at least one per rank).
std::size_t element_count(Op op, std::size_t bytes, std::size_t type_bytes, int ranks);

/// The table's rows and the results file are results' (mbkit/results/bandwidth_results.hpp).
using results::Row;
using results::Run;

/// Fills the time and bandwidth fields from every rank's seconds per iteration.
void set_times(Row& row, const std::vector<double>& seconds, double factor);

}  // namespace mbkit::bench
