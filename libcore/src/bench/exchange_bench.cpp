// --op exchange: what each --comm mode of the trainers sends per step, through the trainers'
// own exchange (train/exchange.hpp) and their own choice of the allreduce sum (train/roles.hpp,
// comm/allreduce_trial.hpp), on a gradient of the row's size. The per-step tail of reports
// travels too, as in a run; S counts the gradient only.
//
// The combined gradient must be the plain sum to be checked exactly: the first worker reports
// the step's one sample and the others none, so neither the sync scaling (nominal / total) nor
// the async master's division (1 / samples) changes a value.
//
// Modes beyond the trainers' defaults (--servers, --compress): "ps-2s" is ps with 2 server
// ranks, "async-2s" ps --async with 2 servers (each the master of its shard), "+fp16" (or +bf16,
// +2bit:T) sends the gradients encoded. The check then expects the sum of each worker's values as
// the codec delivers them from a fresh residual (fp16 and bf16 carry the small integers sent here
// exactly; 2bit sends +-T or 0).
#include <algorithm>
#include <new>
#include <optional>
#include <span>

#include "mbkit/bench/bandwidth_fit.hpp"
#include "mbkit/bench/measure.hpp"
#include "mbkit/comm/allreduce_trial.hpp"
#include "mbkit/comm/compression.hpp"
#include "mbkit/comm/shared_sum.hpp"
#include "mbkit/train/exchange.hpp"
#include "mbkit/train/options.hpp"
#include "mbkit/train/roles.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/strings.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::bench {
namespace {

using train::AllreduceVia;

float value(int rank, std::size_t i) {
  return static_cast<float>(rank + 1 + (i % 13));
}

// An exchange mode parsed: "ps", "ps-2s", "allreduce-mpi+fp16", ...
struct Mode {
  std::string base;  ///< ps, allreduce-mpi, allreduce-shm, allreduce-auto, async
  int servers = 1;   ///< ps and async
  comm::CompressionSpec compression;

  explicit Mode(const std::string& text) {
    std::string rest = text;
    const auto plus = rest.find('+');
    if (plus != std::string::npos) {
      compression = comm::parse_compression(rest.substr(plus + 1));
      rest = rest.substr(0, plus);
    }
    const auto dash = rest.rfind('-');
    if ((starts_with(rest, "ps-") || starts_with(rest, "async-")) && dash != std::string::npos &&
        ends_with(rest, "s")) {
      servers = std::stoi(rest.substr(dash + 1, rest.size() - dash - 2));
      rest = rest.substr(0, dash);
    }
    base = rest;
  }
  bool ps() const { return base == "ps"; }
  /// The first rank that computes (sends gradients): after the servers (async: masters).
  int first_worker() const { return ps() || base == "async" ? servers : 0; }
};

// The sum over the computing ranks of element i, each rank's value as the codec delivers it.
float expected_sum(const comm::World& world, const Mode& mode, std::size_t i) {
  float sum = 0;
  for (int r = mode.first_worker(); r < world.size(); ++r) {
    if (!mode.compression.enabled()) {
      sum += value(r, i);
      continue;
    }
    const float sent = value(r, i);
    float residual = 0;
    std::vector<std::uint8_t> encoded(mode.compression.encoded_bytes(1));
    comm::encode(mode.compression, std::span<const float>(&sent, 1), std::span<float>(&residual, 1),
                 encoded);
    float decoded = 0;
    comm::add_decoded(mode.compression, encoded, std::span<float>(&decoded, 1));
    sum += decoded;
  }
  return sum;
}

// Elements [first, first + result.size()) of the sum.
std::int64_t count_wrong(const comm::World& world, const Mode& mode, std::span<float> result,
                         const MeasureOptions& options, std::size_t first = 0) {
  if (options.corrupt && world.rank() == 0 && !result.empty()) result[0] += 1.0f;
  // The values repeat every 13 elements: the 13 sums, computed once.
  std::vector<float> sums(13);
  for (std::size_t k = 0; k < sums.size(); ++k) sums[k] = expected_sum(world, mode, k);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < result.size(); ++i) {
    if (result[i] != sums[(first + i) % 13]) ++wrong;
  }
  return wrong;
}

// allreduce-auto: the trainers' rule (train::decide_role) and, where it asks for one, their
// timing of both sums on this buffer.
AllreduceVia auto_choice(const comm::World& world, std::size_t floats) {
  train::TrainOptions trainer;
  trainer.comm = train::CommMode::kAllreduce;
  trainer.allreduce = AllreduceVia::kAuto;
  train::Role role = train::decide_role(trainer, world);
  if (role.time_allreduce) {
    role.shared_memory = comm::time_allreduce_sums(world, floats).shared_memory();
  }
  return role.shared_memory ? AllreduceVia::kSharedMemory : AllreduceVia::kMpi;
}

struct SyncStep {
  train::SyncExchange exchange;
  std::vector<float> own;  ///< gradients + tail, when not in the shared window
  std::span<float> gradients, tail;
  std::vector<float> parameters;  ///< ps: what the master distributes
  train::WorkerReport report;

  SyncStep(const comm::World& world, const Mode& mode, AllreduceVia via, std::size_t count)
      : exchange(world, mode.ps(), via, mode.servers) {
    if (mode.compression.enabled()) exchange.set_compression(mode.compression);
    const std::size_t floats = count + exchange.tail_floats(0);
    std::span<float> buffer;
    if (exchange.shared_memory()) {
      buffer = exchange.shared_buffer(floats);
    } else {
      own.resize(floats);
      buffer = own;
    }
    gradients = buffer.first(count);
    tail = buffer.subspan(count);
    if (mode.ps()) parameters.resize(count);
    report.rank = world.rank();
    report.samples = world.rank() == mode.first_worker() ? 1 : 0;
  }
  void run(std::int64_t step) {
    exchange.combine(gradients, {}, report, step, 1, tail);
    exchange.distribute(parameters, {}, train::kContinue, step);
  }
};

// With servers, server s holds shard s of the sum after combine() and sends it back as the
// parameters; every worker then holds all of them.
std::int64_t check_sync(const comm::World& world, SyncStep& s, const Mode& mode,
                        const MeasureOptions& options) {
  for (std::size_t i = 0; i < s.gradients.size(); ++i) s.gradients[i] = value(world.rank(), i);
  std::fill(s.parameters.begin(), s.parameters.end(), -1.0f);
  world.barrier();
  s.exchange.combine(s.gradients, {}, s.report, 0, 1, s.tail);
  std::int64_t wrong = 0;
  const bool server = mode.ps() && world.rank() < mode.servers;
  if (!mode.ps()) wrong = count_wrong(world, mode, s.gradients, options);
  if (server) {
    const auto [first, last] = train::server_shard(s.gradients.size(), world.rank(), mode.servers);
    const auto shard = s.gradients.subspan(first, last - first);
    wrong = count_wrong(world, mode, shard, options, first);
    std::copy(shard.begin(), shard.end(),
              s.parameters.begin() + static_cast<std::ptrdiff_t>(first));
  }
  s.exchange.distribute(s.parameters, {}, train::kContinue, 0);
  if (mode.ps() && !server) wrong = count_wrong(world, mode, s.parameters, options);
  return wrong;
}

// This rank's seconds per step.
double measure_sync(const comm::World& world, const Mode& mode, std::size_t count,
                    const MeasureOptions& options, std::int64_t& wrong) {
  AllreduceVia via = AllreduceVia::kMpi;
  if (mode.base == "allreduce-shm") via = AllreduceVia::kSharedMemory;
  if (mode.base == "allreduce-auto") via = auto_choice(world, count);
  double seconds = 0;
  {
    SyncStep s(world, mode, via, count);
    std::fill(s.gradients.begin(), s.gradients.end(), 1.0f);
    std::int64_t step = 0;
    for (int i = 0; i < options.warmup_iters; ++i) s.run(step++);
    world.barrier();
    const auto start = SteadyClock::now();
    for (int i = 0; i < options.iters; ++i) s.run(step++);
    seconds = seconds_since(start) / options.iters;
    if (mode.base == "allreduce-auto") {
      log::verbose(cat("allreduce-auto chose ", s.exchange.shared_memory() ? "shm" : "mpi", " for ",
                       count, " floats"));
    }
    // 2bit's residuals now hold the timed steps' remainders: checked below from fresh ones.
    if (options.check && !mode.compression.enabled()) wrong = check_sync(world, s, mode, options);
  }
  if (options.check && mode.compression.enabled()) {
    SyncStep fresh(world, mode, via, count);
    wrong = check_sync(world, fresh, mode, options);
  }
  return seconds;
}

// One session of the async protocol with `rounds` rounds (each master waiting for every
// worker, so a round is what a step sends); returns this rank's seconds per round from round
// `first_timed` on. With `check`, the first round's sum is checked on each master (its shard)
// and, as the parameters of the second round, on the workers.
double async_session(const comm::World& world, const Mode& mode, std::size_t count, int rounds,
                     int first_timed, const MeasureOptions& options, std::int64_t* wrong) {
  std::optional<SteadyClock::time_point> start;
  if (world.rank() < mode.servers) {
    const auto [first, last] = train::server_shard(count, world.rank(), mode.servers);
    std::vector<float> gradients(last - first), parameters(last - first, 0.0f);
    const int workers = world.size() - mode.servers;
    train::AsyncMaster master(world, gradients.size(), 0, mode.servers);
    master.start(parameters, {}, 0);
    for (int r = 0; r < rounds; ++r) {
      if (r == first_timed) start = SteadyClock::now();
      master.collect(gradients, {}, workers, r);
      if (wrong != nullptr && r == 0) {
        *wrong = count_wrong(world, mode, gradients, options, first);
        std::copy(gradients.begin(), gradients.end(), parameters.begin());
      }
      if (r + 1 < rounds) master.publish(parameters, {}, r + 1);
    }
    const double seconds = seconds_since(*start) / (rounds - first_timed);
    master.finish(rounds, train::kFinished);
    return seconds;
  }
  std::vector<float> gradients(count), parameters(count, 0.0f);
  train::AsyncWorker worker(world, count, 0, mode.servers);
  train::WorkerReport report;
  report.rank = world.rank();
  report.samples = world.rank() == mode.first_worker() ? 1 : 0;
  std::int64_t based_on = 0;
  for (std::size_t i = 0; i < count; ++i) gradients[i] = value(world.rank(), i);
  int r = 0;
  while (worker.refresh(parameters, {}, true, based_on)) {
    if (r == first_timed) start = SteadyClock::now();
    if (wrong != nullptr && r == 1) {
      *wrong = count_wrong(world, mode, parameters, options);
    }
    report.based_on = based_on;
    worker.send(gradients, {}, report);
    ++r;
  }
  const double seconds = seconds_since(*start) / (rounds - first_timed);
  worker.finish();
  return seconds;
}

}  // namespace

std::vector<std::string> exchange_modes(const comm::World& world, const std::vector<int>& servers,
                                        const std::vector<std::string>& compressions) {
  const auto suffix = [](const std::string& compression) {
    return comm::parse_compression(compression).enabled() ? "+" + compression : std::string();
  };
  std::vector<std::string> modes;
  for (const int s : servers) {
    MBKIT_CHECK(s >= 1 && s < world.size(), "--servers ", s, " on ", world.size(), " ranks");
    for (const auto& c : compressions)
      modes.push_back(cat(s == 1 ? "ps" : cat("ps-", s, "s"), suffix(c)));
  }
  for (const auto& c : compressions) modes.push_back("allreduce-mpi" + suffix(c));
  if (comm::SharedSum::possible(world)) modes.push_back("allreduce-shm");
  modes.push_back("allreduce-auto");
  for (const int s : servers) modes.push_back(s == 1 ? "async" : cat("async-", s, "s"));
  return modes;
}

std::vector<Row> measure_exchange(const comm::World& world, const std::string& mode_name,
                                  const std::vector<std::size_t>& sizes,
                                  const MeasureOptions& all_sizes) {
  const Mode mode(mode_name);
  MBKIT_CHECK(world.size() >= 2, "the exchange needs 2 ranks");
  MBKIT_CHECK(all_sizes.dtype == Dtype::kFloat, "the exchange sends float gradients");
  std::vector<Row> rows;
  for (const std::size_t bytes : sizes) {
    MeasureOptions options = all_sizes;
    options.iters = all_sizes.iters_at(bytes);
    const std::size_t count = element_count(Op::kExchange, bytes, sizeof(float), world.size());
    std::int64_t wrong = 0;
    double seconds = 0;
    try {
      if (mode.base == "async") {
        seconds = async_session(world, mode, count, options.warmup_iters + options.iters,
                                options.warmup_iters, options, nullptr);
        if (options.check) async_session(world, mode, count, 2, 0, options, &wrong);
      } else {
        seconds = measure_sync(world, mode, count, options, wrong);
      }
    } catch (const std::bad_alloc&) {
      throw BuffersDoNotFit(cat("exchange-", mode_name), bytes, 0);
    }
    Row row;
    row.op = cat("exchange-", mode_name);
    row.count = count;
    row.bytes = count * sizeof(float);
    row.type = "float";
    set_times(row, gather_seconds(world, seconds),
              bus_factor(Op::kExchange, world.size(), mode_name));
    world.allreduce_sum(std::span<std::int64_t>(&wrong, 1));
    row.wrong = wrong;
    rows.push_back(row);
  }
  return rows;
}

namespace {

// One size of a synchronous exchange of the trainers timed as a step: the idle steps, an
// iteration its slowest computing rank's, sorted; the busy passes' slack and tick; the check.
struct TimedRound {
  std::vector<double> slowest;
  double slack = 0, tick = 0;
  std::int64_t wrong = 0;
};

TimedRound time_round(comm::World& world, const Mode& mode, std::size_t count,
                      const MeasureOptions& options) {
  TimedRound timed;
  const auto iters = static_cast<std::size_t>(options.iters_at(count * sizeof(float)));
  const bool computes = world.rank() >= mode.first_worker();
  std::vector<double> mine(iters, 0.0);  // a server's stay 0: a step ends at its workers
  SyncStep s(world, mode, AllreduceVia::kMpi, count);
  // Zeros: an allreduce's sums stay 0 (no overflow, no denormals however many steps).
  std::fill(s.gradients.begin(), s.gradients.end(), 0.0f);
  std::int64_t step = 0;
  for (int i = 0; i < options.warmup_iters; ++i) s.run(step++);
  // Back to back, as steps whose compute is short: no rendezvous between them, a server
  // waiting for the next gradient as a training run's does.
  for (std::size_t i = 0; i < iters; ++i) {
    const auto start = SteadyClock::now();
    s.run(step++);
    if (computes) mine[i] = seconds_since(start);
  }
  if (options.check) {
    timed.wrong = check_sync(world, s, mode, options);
    std::fill(s.gradients.begin(), s.gradients.end(), 0.0f);
  }
  timed.slowest = slowest_per_iteration(world, mine);
  // Busy passes: the computing ranks spin before each step, a little longer a pass, until the
  // step outgrows the idle one (every rank decides on the same gathered times).
  const double idle = median_of_sorted(timed.slowest);
  const double grew_by = train::kPsBusyStep / 2;
  // A pass's sorted steps.
  const auto pass = [&](double busy) {
    for (std::size_t i = 0; i < iters; ++i) {
      const auto start = SteadyClock::now();
      if (computes) busy_for(busy);
      s.run(step++);
      if (computes) mine[i] = seconds_since(start);
    }
    return slowest_per_iteration(world, mine);
  };
  const auto grew = [&](const std::vector<double>& sorted) {
    return median_of_sorted(sorted) > idle + grew_by;
  };
  double hidden = 0;  // the longest compute the step hid
  double grown = 0;   // the steps that grew at the first compute it did not hide
  for (double busy = train::kPsBusyStep; busy <= train::kPsBusyMost + 1e-12;
       busy += train::kPsBusyStep) {
    const std::vector<double> sorted = pass(busy);
    if (grew(sorted)) {
      // Where the step had been hidden, the next pass confirms (near the slack a pass mixes
      // the two levels, and one pass's median may flip early): else this one was noise.
      if (hidden > 0 && busy + train::kPsBusyStep <= train::kPsBusyMost + 1e-12 &&
          !grew(pass(busy + train::kPsBusyStep))) {
        hidden = busy += train::kPsBusyStep;
        continue;
      }
      // What the steps that grew took.
      const auto first = std::upper_bound(sorted.begin(), sorted.end(), idle + grew_by);
      grown = median_of_sorted(std::vector<double>(first, sorted.end()));
      break;
    }
    hidden = busy;
  }
  // Past the last busy time hidden, halfway to the first that was not; where none was hidden
  // the step grows with the compute (no tick), where every one was it is unknown.
  const bool ticked = hidden > 0 && grown > 0;
  timed.slack = std::min(ticked ? hidden + grew_by : hidden, idle);  // a step outlasts its compute
  timed.tick = ticked ? grown - idle : 0.0;
  return timed;
}

// Per size, a row (`op`, busbw `bus_times_alg` times algbw) and the record's points, slack and
// tick, of the exchange `mode` timed as a step (time_round). Record: CommPsRoundRecord or
// CommAllreduceRecord.
template <typename Record>
void measure_rounds(comm::World& world, const std::vector<std::size_t>& sizes,
                    const MeasureOptions& options, const Mode& mode, const char* op,
                    double bus_times_alg, std::vector<Row>& rows, Record& record) {
  record = {};
  record.ranks = world.size();
  for (const std::size_t size : sizes) {
    const std::size_t count = std::max<std::size_t>(size / sizeof(float), 1);
    TimedRound timed;
    try {
      timed = time_round(world, mode, count, options);
    } catch (const std::bad_alloc&) {
      throw BuffersDoNotFit(op, count * sizeof(float), 0);
    }
    world.allreduce_sum(std::span<std::int64_t>(&timed.wrong, 1));
    const double median = median_of_sorted(timed.slowest);
    Row row;
    row.op = op;
    row.count = count;
    row.bytes = count * sizeof(float);
    row.type = "float";
    row.avg_us = median * 1e6;
    row.min_us = timed.slowest.front() * 1e6;
    row.max_us = timed.slowest.back() * 1e6;
    row.algbw_gbps = static_cast<double>(row.bytes) / median * 1e-9;
    row.busbw_gbps = bus_times_alg * row.algbw_gbps;
    row.wrong = timed.wrong;
    rows.push_back(row);
    record.bytes.push_back(static_cast<double>(row.bytes));
    record.seconds.push_back(median);
    record.slack.push_back(timed.slack);
    record.tick.push_back(timed.tick);
  }
}

}  // namespace

void measure_ps_round(comm::World& world, const std::vector<std::size_t>& sizes,
                      const MeasureOptions& options, PingPong& ping_pong) {
  MBKIT_CHECK(world.size() >= 2, "the ps round needs 2 ranks");
  // busbw twice algbw: the gradient to the server, the parameters back.
  measure_rounds(world, sizes, options, Mode("ps"), "ps-round", 2, ping_pong.rows,
                 ping_pong.records.ps_round);
}

void measure_fit_allreduce(comm::World& world, const std::vector<std::size_t>& sizes,
                           const MeasureOptions& options, PingPong& ping_pong) {
  measure_rounds(world, sizes, options, Mode("allreduce-mpi"), "allreduce-world",
                 bus_factor(Op::kAllreduce, world.size()), ping_pong.rows,
                 ping_pong.records.allreduce);
}

}  // namespace mbkit::bench
