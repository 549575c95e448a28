#include "mbkit/tools/mb_bench_bandwidth.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "mbkit/backend/device.hpp"
#include "mbkit/backend/factory.hpp"
#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/bench/bandwidth_fit.hpp"
#include "mbkit/bench/device_bench.hpp"
#include "mbkit/bench/measure.hpp"
#include "mbkit/comm/compression.hpp"
#include "mbkit/comm/world.hpp"
#include "mbkit/config.hpp"
#include "mbkit/nn/backend.hpp"
#include "mbkit/results/bandwidth_results.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::tools::bench_bandwidth {
namespace {

using mbkit::bench::Op;
using mbkit::bench::Transport;

// --op names; "all" is every operation `runs` (the device and transport run) says yes to.
std::vector<Op> parse_ops(const std::vector<std::string>& names,
                          const std::function<bool(Op)>& runs) {
  std::vector<Op> ops;
  for (const auto& given : names) {
    for (const auto& name : split(given, ',')) {
      if (name == "all") {
        for (const auto& each : mbkit::bench::op_names()) {
          const Op op = mbkit::bench::parse_op(each);
          if (runs(op)) ops.push_back(op);
        }
      } else {
        ops.push_back(mbkit::bench::parse_op(name));
      }
    }
  }
  if (ops.empty()) usage_error("--op: no operation given");
  return ops;
}

// "host" or "a x2, b".
std::string describe_hosts(const std::vector<std::string>& hosts) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& host : hosts) {
    if (!counts.empty() && counts.back().first == host) {
      ++counts.back().second;
    } else {
      counts.emplace_back(host, 1);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [host, n] : counts) parts.push_back(n > 1 ? cat(host, " x", n) : host);
  return join(parts, ", ");
}

void print_header(std::ostream& out, const BandwidthOptions& o, std::size_t large_from, int ranks,
                  const std::string& hosts, const std::string& device) {
  out << "# mb-bench-bandwidth " << MBKIT_VERSION << ": " << ranks
      << (ranks == 1 ? " rank" : " ranks") << " (" << hosts << "), " << o.iters << " iterations"
      << (large_from > 0 ? cat(" (", o.large_iters, " from ", large_from, " bytes)") : "")
      << " after " << o.warmup_iters << " warm-up, check " << (o.check ? "on" : "off") << "\n"
      << device
      << "# time: one iteration, averaged over the loop on each rank; time_us is the mean over "
         "ranks\n"
      << "# algbw = size / time_us; busbw = algbw * factor (mb-bench-bandwidth.1); sizes in "
         "bytes\n"
      << (o.fit ? "# pingpong-I-J (--fit): a message from rank I to J and back, halved; time_us "
                  "the median, min_us and max_us the fastest and slowest\n"
                  "# allreduce-world (--fit): a synchronous allreduce step of every rank (the "
                  "trainers' own --allreduce mpi exchange, its barrier included); an iteration "
                  "is its slowest rank's; time_us the median\n"
                  "# stream-I-J (--fit): windows of back-to-back sends from rank I to J, one "
                  "acknowledgement back; time_us the median window's time a message, min_us and "
                  "max_us the fastest and slowest window's\n"
                  "# async-I-J, async-busy-I-J (--fit): the asynchronous exchange's cycle, "
                  "rank I the master, J its worker, idle or busy between sends; time_us the "
                  "median seconds a gradient\n"
                  "# ps-round (--fit): a synchronous ps step's exchange (the trainers' own), rank "
                  "0 the server; an iteration is its slowest worker's; time_us the median\n"
                : "")
      << mbkit::results::column_header() << "\n";
}

// Which size did not fit in memory, and the flag it comes from.
std::string buffers_do_not_fit_message(const mbkit::bench::BuffersDoNotFit& too_large,
                                       const std::vector<std::size_t>& sizes,
                                       const std::vector<std::size_t>& range) {
  const bool smallest = too_large.bytes == sizes.front();
  const bool largest = too_large.bytes == sizes.back();
  const bool also = std::find(range.begin(), range.end(), too_large.bytes) == range.end() &&
                    std::find(sizes.begin(), sizes.end(), too_large.bytes) != sizes.end();
  const std::string flag = also                  ? "--also-bytes"
                           : smallest && largest ? "-b/--min-bytes and -e/--max-bytes"
                           : largest             ? "-e/--max-bytes"
                           : smallest            ? "-b/--min-bytes"
                                      : "a size between -b/--min-bytes and -e/--max-bytes";
  const std::string buffers =
      too_large.buffer_bytes > 0
          ? cat("its buffers (", human_bytes(double(too_large.buffer_bytes)), " on this rank)")
          : std::string("its buffers");
  return cat(too_large.op, " of ", too_large.bytes, " bytes (", flag, "): ", buffers,
             " do not fit in memory; give a smaller size");
}

// The range -b, -e, -f and --also-bytes "814120,1M" besides it, in order, each once.
std::vector<std::size_t> sizes_to_time(const BandwidthOptions& options) {
  std::vector<std::size_t> sizes = mbkit::bench::size_series(
      mbkit::bench::parse_bytes(options.min_bytes, "--min-bytes"),
      mbkit::bench::parse_bytes(options.max_bytes, "--max-bytes"), options.step_factor);
  for (const auto& text : options.also_bytes) {
    for (const auto& item : split(text, ',')) {
      sizes.push_back(mbkit::bench::parse_bytes(item, "--also-bytes"));
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// --servers "1,2": each a whole number of server ranks that leaves a worker on `ranks` ranks.
std::vector<int> parse_servers(const std::vector<std::string>& given, int ranks) {
  std::vector<int> servers;
  for (const auto& text : given) {
    for (const auto& item : split(text, ',')) {
      const long long s = parse_int(item, "--servers");
      if (s < 1 || s >= ranks) {
        usage_error(cat("--servers ", item, ": needs 1 to ", ranks - 1,
                        " servers so that a worker is left on ", ranks, " ranks"));
      }
      servers.push_back(static_cast<int>(s));
    }
  }
  if (servers.empty()) usage_error("--servers: no server count given");
  return servers;
}

// --compress "none,fp16": each checked as the trainers' --compress.
std::vector<std::string> parse_compressions(const std::vector<std::string>& given) {
  std::vector<std::string> compressions;
  for (const auto& text : given) {
    for (const auto& item : split(text, ',')) {
      compressions.push_back(comm::parse_compression(item).text());
    }
  }
  if (compressions.empty()) usage_error("--compress: no encoding given");
  return compressions;
}

bool corrupt_for_tests() {
  const char* value = std::getenv("MBKIT_BENCH_CORRUPT");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// --fit's lines after the table, and the model written to --comm-model (an unusable one is
// refused, status 1) or, without it, a warning where it would be.
void write_fit(const BandwidthOptions& options, mbkit::bench::PingPong& ping_pong,
               std::ostream& out) {
  train::fit_pairs(ping_pong.records);
  ping_pong.records.min_r_squared = options.min_r_squared;
  mbkit::bench::write_comm_fits(out, ping_pong.records);
  out.flush();
  if (!out) fail("cannot write the table to standard output");
  if (const auto problem = train::comm_fit_problem(ping_pong.records.allreduce.fit);
      !problem.empty()) {
    log::warn(cat("the fit of the allreduce is no usable model: ", problem,
                  options.comm_model.empty()
                      ? ""
                      : "; it is left out of the file (the trainers time the allreduce as a "
                        "ring of messages)"));
  }
  if (const auto problem = train::stream_problem(ping_pong.records.stream); !problem.empty()) {
    log::warn(cat("the streamed messages are no usable model: ", problem,
                  options.comm_model.empty()
                      ? ""
                      : "; it is left out of the file (the trainers price streamed messages by "
                        "the line)"));
  }
  if (const auto problem = train::async_cycle_problem(ping_pong.records.async_cycle);
      !problem.empty()) {
    log::warn(cat("the async cycle is no usable model: ", problem,
                  options.comm_model.empty()
                      ? ""
                      : "; it is left out of the file (the trainers price --async by the "
                        "streamed messages)"));
  }
  if (const auto problem = train::ps_round_problem(ping_pong.records.ps_round); !problem.empty()) {
    log::warn(cat("the ps round is no usable model: ", problem,
                  options.comm_model.empty()
                      ? ""
                      : "; it is left out of the file (the trainers price a synchronous ps "
                        "step's messages by the line)"));
  }
  if (!options.comm_model.empty()) {
    train::write_comm_model(options.comm_model, ping_pong.records);
    log::info(cat("wrote ", options.comm_model));
    return;
  }
  if (const auto problem = train::comm_fit_problem(ping_pong.records.all, options.min_r_squared);
      !problem.empty()) {
    log::warn(cat("the fit of every pair together is no usable message model: ", problem));
  }
}

}  // namespace

int run_bench_bandwidth(const BandwidthOptions& options, std::ostream& out) {
  // Where the buffers live and what moves them, refused before anything is opened.
  const auto device = backend::parse_device(options.device);
  const bool gpu = device.kind == backend::Device::Kind::kCuda;
  const Transport transport = options.transport.empty()
                                  ? (gpu ? Transport::kNccl : Transport::kMpi)
                                  : mbkit::bench::parse_transport(options.transport);
  if (!gpu && transport == Transport::kNccl) {
    usage_error("--transport nccl: NCCL moves GPU memory; give --device cuda (or cuda:N) too");
  }
  const auto ops = parse_ops(options.ops, [&](Op op) {
    if (!gpu) return true;
    return op != Op::kExchange && (transport == Transport::kMpi || mbkit::bench::nccl_has(op));
  });
  for (const Op op : ops) {
    if (gpu && op == Op::kExchange) {
      usage_error("--op exchange: the trainers' exchange is timed on host buffers (--device cpu)");
    }
    if (transport == Transport::kNccl && !mbkit::bench::nccl_has(op)) {
      usage_error(cat("--op ", mbkit::bench::op_name(op),
                      ": NCCL has no such collective (it has allreduce, reduce, bcast, allgather, "
                      "reduce-scatter; --transport mpi runs every collective)"));
    }
  }
  const auto dtype = mbkit::bench::parse_dtype(options.dtype);
  const auto sizes = sizes_to_time(options);
  if (options.iters < 1) usage_error(cat("--iters: ", options.iters, " is below 1"));
  if (options.warmup_iters < 0) usage_error("--warmup-iters must not be negative");
  if (options.large_from.empty() != (options.large_iters == 0)) {
    usage_error("--large-iters and --large-from go together: give both or neither");
  }
  if (options.large_iters < 0)
    usage_error(cat("--large-iters: ", options.large_iters, " is below 1"));
  const std::size_t large_from =
      options.large_from.empty() ? 0
                                 : mbkit::bench::parse_bytes(options.large_from, "--large-from");
  if (sizes.back() / mbkit::bench::type_size(dtype) > static_cast<std::size_t>(INT_MAX)) {
    usage_error(cat("--max-bytes: ", sizes.back(), " bytes are more ", options.dtype,
                    " elements than an MPI count holds"));
  }
  const bool exchange = std::find(ops.begin(), ops.end(), Op::kExchange) != ops.end();
  if (exchange && dtype != mbkit::bench::Dtype::kFloat) {
    usage_error("--dtype double: the exchange sends the trainers' float gradients");
  }
  const auto compressions = parse_compressions(options.compress);
  const bool more_modes = options.servers != std::vector<std::string>{"1"} ||
                          compressions != std::vector<std::string>{"none"};
  if (more_modes && !exchange) usage_error("--servers and --compress apply to --op exchange only");
  if (!options.comm_model.empty() && !options.fit) usage_error("--comm-model needs --fit");
  if (const auto problem = train::min_r_squared_problem(options.min_r_squared); !problem.empty()) {
    usage_error(cat("--min-r-squared: ", problem));
  }
  if (options.min_r_squared != train::kCommModelMinRSquared && options.comm_model.empty()) {
    usage_error("--min-r-squared needs --comm-model");
  }
  if (options.fit && sizes.size() < 2) {
    usage_error(
        "--fit needs at least two sizes: a -e/--max-bytes of at least -b/--min-bytes "
        "times -f/--step-factor");
  }
  if (options.fit && gpu) usage_error("--fit times messages between host buffers (--device cpu)");
  if (!options.comm_model.empty()) fs::require_replaceable(options.comm_model, options.force);
  const bool collectives = !options.fit || options.ops_given;
  comm::World world;
  world.set_timeout(options.comm_timeout);
  return world.run_collectively([&] {
    if (world.size() < 2 && exchange && collectives) {
      usage_error("--op exchange needs at least 2 ranks (mpirun -n 2 or more)");
    }
    if (world.size() < 2 && options.fit) {
      usage_error("--fit times messages between ranks: it needs at least 2 (mpirun -n 2 or more)");
    }
    const auto servers =
        exchange ? parse_servers(options.servers, world.size()) : std::vector<int>{};
    const std::string hosts = describe_hosts(world.all_gather(world.host()));
    // On a GPU: the local rank's GPU, chosen and refused as the trainers do; its buffers and,
    // with NCCL, a communicator joined by every rank.
    std::unique_ptr<nn::Backend> gpu_backend;
    std::unique_ptr<mbkit::bench::DeviceBench> bench;
    std::string device_lines;
    if (gpu) {
      gpu_backend = backend::make_backend(options.device, 0);
      bench = mbkit::bench::make_device_bench(world, *gpu_backend, transport == Transport::kNccl);
      // "cuda:0: NAME (80.0 GiB)": the backend's description without its cuDNN and cuBLAS.
      std::string mine = gpu_backend->description();
      mine = mine.substr(0, mine.find(", cuDNN"));
      device_lines =
          cat("# device: ", describe_hosts(world.all_gather(mine)), "\n", "# transport: ",
              transport == Transport::kNccl
                  ? cat(bench->nccl_description(), " on the GPU buffers, timed with CUDA events")
                  : std::string("MPI, each iteration staged through pinned host memory (GPU to "
                                "host, MPI, host to GPU), timed on the host's clock"),
              "\n");
    }
    // GPU rows and runs carry the transport: they sit beside the CPU's in one --append file.
    const std::string suffix =
        gpu ? cat("-", transport == Transport::kNccl ? "nccl" : "cuda-mpi") : std::string();
    mbkit::bench::MeasureOptions measure;
    measure.dtype = dtype;
    measure.iters = options.iters;
    measure.warmup_iters = options.warmup_iters;
    measure.large_from = large_from;
    measure.large_iters = options.large_iters;
    measure.check = options.check;
    measure.corrupt = corrupt_for_tests();
    if (world.rank() == 0) {
      print_header(out, options, large_from, world.size(), hosts, device_lines);
    }
    std::int64_t wrong = 0;
    std::vector<mbkit::results::Run> runs;
    for (const Op op : collectives ? ops : std::vector<Op>{}) {
      mbkit::results::Run run;
      run.ranks = world.size();
      run.op = mbkit::bench::op_name(op) + suffix;
      run.dtype = mbkit::bench::dtype_name(dtype);
      run.iters = options.iters;
      run.warmup_iters = options.warmup_iters;
      run.large_iters = options.large_iters;
      run.large_from = large_from;
      run.hosts = hosts;
      run.created = utc_timestamp();
      const auto print = [&](const std::vector<mbkit::results::Row>& rows) {
        for (const auto& row : rows) {
          if (world.rank() == 0) out << mbkit::results::format_row(row) << "\n" << std::flush;
          wrong += row.wrong;
          run.rows.push_back(row);
        }
      };
      try {
        if (op == Op::kExchange) {
          for (const auto& mode : mbkit::bench::exchange_modes(world, servers, compressions)) {
            print(mbkit::bench::measure_exchange(world, mode, sizes, measure));
          }
        } else if (bench) {
          auto rows =
              mbkit::bench::measure_device_collective(world, *bench, transport, op, sizes, measure);
          for (auto& row : rows) row.op += suffix;
          print(rows);
        } else {
          print(mbkit::bench::measure_collective(world, op, sizes, measure));
        }
      } catch (const mbkit::bench::BuffersDoNotFit& too_large) {
        fail(buffers_do_not_fit_message(
            too_large, sizes,
            mbkit::bench::size_series(mbkit::bench::parse_bytes(options.min_bytes, "--min-bytes"),
                                      mbkit::bench::parse_bytes(options.max_bytes, "--max-bytes"),
                                      options.step_factor)));
      }
      runs.push_back(std::move(run));
    }
    std::optional<mbkit::bench::PingPong> ping_pong;
    if (options.fit) {
      ping_pong = mbkit::bench::measure_ping_pong(world, sizes, measure);
      mbkit::bench::measure_fit_allreduce(world, sizes, measure, *ping_pong);
      mbkit::bench::measure_stream(world, sizes, measure, *ping_pong);
      mbkit::bench::measure_async_cycle(world, sizes, measure, *ping_pong);
      mbkit::bench::measure_ps_round(world, sizes, measure, *ping_pong);
      for (const auto& row : ping_pong->rows) {
        if (world.rank() == 0) out << mbkit::results::format_row(row) << "\n" << std::flush;
        wrong += row.wrong;
      }
    }
    if (world.rank() == 0) {
      out << "# wrong elements: " << wrong << "\n" << std::flush;
      if (!out) fail("cannot write the table to standard output");
      for (const auto& run : runs) {
        if (!options.append.empty()) mbkit::results::append_run(options.append, run);
      }
      if (!options.append.empty())
        log::info(cat("added ", runs.size(), " run(s) to ", options.append));
      if (wrong > 0) {
        std::fprintf(stderr, "%s: error: the check found %lld wrong elements (column wrong)\n",
                     log::program().c_str(), static_cast<long long>(wrong));
      }
      if (ping_pong && wrong == 0) write_fit(options, *ping_pong, out);
    }
    return wrong > 0 ? static_cast<int>(ExitCode::kFailure) : 0;
  });
}

}  // namespace mbkit::tools::bench_bandwidth
