#include "mbkit/train/roles.hpp"

#include <algorithm>

#include "mbkit/train/exchange.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

// Expands the %d conversions (flags and width allowed) of a shard pattern: the first takes the
// worker index, the second the number of workers; %% is a percent sign.
std::string expand_pattern(const std::string& pattern, int worker, int workers) {
  std::string out;
  int conversions = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    bool zeros = false;
    for (; j < pattern.size() && pattern[j] == '0'; ++j) zeros = true;
    std::size_t width = 0;
    for (; j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width < 100; ++j)
      width = width * 10 + static_cast<std::size_t>(pattern[j] - '0');
    if (j >= pattern.size() || pattern[j] != 'd' || conversions == 2) {
      usage_error(cat("--data: '", pattern,
                      "' is not a shard pattern: it takes %d (or %05d) for the worker index and "
                      "optionally a second %d for the number of workers"));
    }
    const std::string digits = std::to_string(conversions == 0 ? worker : workers);
    if (digits.size() < width) out.append(width - digits.size(), zeros ? '0' : ' ');
    out += digits;
    ++conversions;
    i = j;
  }
  return out;
}

}  // namespace

bool allreduce_with_nccl(const TrainOptions& o, bool distributed) {
  const bool cuda = o.device.rfind("cuda", 0) == 0;  // cuda or cuda:N (parse_device checks)
  if (o.allreduce == AllreduceVia::kNccl) {
    if (!cuda) {
      usage_error(cat("--allreduce nccl sums gradients in GPU memory; --device is ", o.device,
                      " (use --device cuda, or --allreduce mpi)"));
    }
    if (o.compression.enabled()) {
      usage_error("--compress: encoded gradients are gathered through MPI; use --allreduce mpi");
    }
    return o.comm == CommMode::kAllreduce;
  }
  return o.allreduce == AllreduceVia::kAuto && cuda && distributed &&
         o.comm == CommMode::kAllreduce && !o.async && !o.dbsl.enabled && !o.compression.enabled();
}

namespace {

void check_async_min_grads(const TrainOptions& o, const Role& role) {
  if (role.async && o.async_min_grads > role.workers) {
    usage_error(cat("--async-min-grads ", o.async_min_grads, " is more than the ", role.workers,
                    " workers"));
  }
}

}  // namespace

std::pair<int, int> emulated_share(int workers, int ranks, int rank) {
  const int base = workers / ranks, extra = workers % ranks;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

int emulated_host(int workers, int ranks, int worker) {
  int rank = 0;
  while (rank + 1 < ranks && worker >= emulated_share(workers, ranks, rank + 1).first) ++rank;
  return rank;
}

namespace {

// --emulate N under mpirun -n R: every rank hosts a share of the workers (the ranks' shares
// combine every mode the one process runs).
void check_emulated_shares(const TrainOptions& o, int ranks) {
  if (o.emulate < ranks) {
    usage_error(cat("--emulate ", o.emulate, " under mpirun -n ", ranks,
                    ": each rank hosts at least one worker; give --emulate ", ranks,
                    " or more, or fewer ranks"));
  }
}

}  // namespace

Role decide_role(const TrainOptions& o, const comm::World& world) {
  Role role;
  role.distributed = world.distributed();
  if (o.emulate > 0) {
    if (role.distributed) check_emulated_shares(o, world.size());
    const auto [first, count] = emulated_share(o.emulate, world.size(), world.rank());
    role.emulated_first = first;
    role.emulated_hosted = count;
    role.shares = role.distributed;  // mpirun: this rank hosts its share of the workers
    role.distributed = true;         // an emulated run of o.emulate workers
    role.emulated = o.emulate;
    role.parameter_server = o.comm == CommMode::kPs;
    // --servers k: the emulated run's ranks 0 to k - 1, all played by this process (it updates
    // every shard), its workers ranks k to k + N - 1 as under mpirun.
    role.servers = role.parameter_server ? o.servers : 0;
    role.master = role.parameter_server;
    role.server = role.parameter_server;
    role.computes = false;
    role.workers = o.emulate;
    role.async = o.async || o.dbsl.enabled;  // as under mpirun: DBSL's server takes pushes
    role.comm = !role.parameter_server ? "allreduce"
                : o.dbsl.enabled       ? "ps-dbsl"
                : o.async              ? "ps-async"
                                       : "ps";
    role.shared_memory = true;  // the workers' sums are added as the shared-memory sum adds
    check_async_min_grads(o, role);
    return role;
  }
  role.nccl = allreduce_with_nccl(o, role.distributed);
  if (!role.distributed) {
    if (o.dbsl.enabled) {
      usage_error(
          "mb-train-dbsl needs a parameter server and workers: run under mpirun -n 2 or more "
          "(--plan needs neither)");
    }
    if (o.async) usage_error("--async needs a master and workers: run under mpirun -n 2 or more");
    if (o.delayed_gradients.enabled && o.clock != ClockMode::kVirtual) {
      usage_error(cat("--delayed-gradients ", o.given.delayed_gradients,
                      " on the wall clock needs a master and workers, whose rounds go on while "
                      "their sums are in flight: run under mpirun -n 2 or more, or give --clock "
                      "virtual"));
    }
    if (o.compression.enabled()) {
      usage_error("--compress compresses the exchange: run under mpirun -n 2 or more");
    }
    if (o.servers > 1) {
      usage_error(cat("--servers ", o.servers, " needs servers and workers: run under mpirun -n ",
                      o.servers + 1, " or more"));
    }
    return role;
  }
  role.parameter_server = o.comm == CommMode::kPs;
  role.async = o.async || o.dbsl.enabled;  // DBSL's server merges each push as it comes
  role.servers = role.parameter_server ? o.servers : 0;
  if (role.servers > 1 && world.size() <= role.servers) {
    usage_error(cat("--servers ", o.servers, " leaves no worker among the ", world.size(),
                    " ranks: run under mpirun -n ", o.servers + 1, " or more"));
  }
  role.master = role.parameter_server && world.rank() == 0;
  role.server = world.rank() < role.servers;
  role.computes = !role.server;
  role.workers = worker_count(world.size(), role.servers);
  role.worker = worker_of_rank(world.rank(), role.servers);
  role.comm = role.parameter_server ? (o.dbsl.enabled ? "ps-dbsl"
                                       : o.async      ? "ps-async"
                                                      : "ps")
                                    : "allreduce";
  if (o.compression.enabled() && o.allreduce == AllreduceVia::kSharedMemory) {
    usage_error("--compress: the shared-memory sum adds floats in place; use --allreduce mpi");
  }
  // Compressed gradients are gathered through MPI, never summed in shared memory.
  const AllreduceVia via = o.compression.enabled() ? AllreduceVia::kMpi
                           : role.nccl             ? AllreduceVia::kNccl
                                                   : o.allreduce;
  role.shared_memory = SyncExchange::uses_shared_memory(world, role.parameter_server, via);
  if (via == AllreduceVia::kAuto && role.shared_memory) {
    // The faster sum, timed at start, where both give the same bits: with two ranks each sum
    // is one addition, a + b. With more, their orders of addition differ, and a run must not
    // depend on a timing: MPI_Allreduce (--allreduce shm asks for the other). Buckets exist
    // only in the MPI sum.
    role.shared_memory = world.size() == 2 && o.bucket_mb <= 0;
    role.time_allreduce = role.shared_memory;
  } else if (o.bucket_mb > 0 && role.shared_memory) {
    usage_error(
        "--bucket-mb: the shared-memory sum has no buckets (it needs every gradient at once); "
        "use --allreduce mpi or auto");
  }
  check_async_min_grads(o, role);
  if (o.k_async > role.workers) {
    usage_error(cat("--k-async ", o.k_async, " is more than the ", role.workers,
                    " workers (it takes K distinct workers' gradients per update)"));
  }
  return role;
}

WorkerData worker_data(const std::string& data, int worker, int workers) {
  if (data.find('%') != std::string::npos) return {expand_pattern(data, worker, workers), 0, 1};
  if (data.find(',') != std::string::npos) {
    const auto files = split(data, ',');
    if (static_cast<int>(files.size()) != workers) {
      usage_error(cat("--data lists ", files.size(), " files for ", workers, " workers"));
    }
    return {files[static_cast<std::size_t>(worker)], 0, 1};
  }
  return {data, worker, workers};
}

// "0 on a; 1-3 on b": ranks grouped by host.
std::string describe_hosts(const std::vector<std::string>& hosts, const Role& role) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= hosts.size(); ++i) {
    if (i < hosts.size() && hosts[i] == hosts[begin]) continue;
    const std::string ranks = i - begin == 1 ? cat(begin) : cat(begin, "-", i - 1);
    parts.push_back(cat(ranks, " on ", hosts[begin]));
    begin = i;
  }
  std::string text = join(parts, "; ");
  if (role.servers > 1) {
    text += cat(" (ranks 0-", role.servers - 1, " are the servers)");
  } else if (role.parameter_server) {
    text += " (rank 0 is the master)";
  }
  return text;
}

// Every rank must run the same training: the ranks' descriptions are compared key by key and
// the first difference is reported with the ranks on each side.
void check_agreement(const comm::World& world, const std::vector<std::string>& lines) {
  std::string mine;
  for (const auto& line : lines) mine += line + "\n";
  const auto all = world.all_gather(mine);
  for (int rank = 1; rank < world.size(); ++rank) {
    if (all[static_cast<std::size_t>(rank)] == all[0]) continue;
    const auto theirs = split(all[static_cast<std::size_t>(rank)], '\n');
    std::string difference = "their settings";
    std::string advice = "every rank must get the same options and data of the same shape";
    for (std::size_t i = 0; i < std::max(lines.size(), theirs.size()); ++i) {
      const std::string a = i < lines.size() ? lines[i] : "";
      const std::string b = i < theirs.size() ? theirs[i] : "";
      if (a != b) {
        difference =
            cat(a.empty() ? "(nothing)" : a, " on rank 0 but ", b.empty() ? "(nothing)" : b);
        // Per-rank log paths look like a request for per-rank logs, which do not exist.
        if (a.starts_with("--log ")) {
          advice =
              "rank 0 alone writes the metric log, with every rank's rows: give every rank the "
              "same --log";
        }
        break;
      }
    }
    std::vector<int> differing;
    for (int r = 1; r < world.size(); ++r) {
      if (all[static_cast<std::size_t>(r)] != all[0]) differing.push_back(r);
    }
    usage_error(cat("the ranks do not run the same training: ", difference, " on rank",
                    differing.size() > 1 ? "s " : " ", comm::rank_list(differing), "; ", advice));
  }
}

}  // namespace mbkit::train
