#include "mbkit/train/dbsl_plan.hpp"

#include <cmath>
#include <sstream>

#include "mbkit/util/error.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {
namespace {

// Python's int() of a positive float, but a value a rounding error below an integer counts as
// that integer: the general plan's sums and quotients reach Eq. 8's values up to an ulp.
std::int64_t floor_int(double x) {
  return static_cast<std::int64_t>(std::floor(x + 1e-9 * std::max(1.0, std::fabs(x))));
}

void check_input(const DbslPlanInput& in) {
  if (in.workers < 1) usage_error(cat("--workers ", in.workers, " must be at least 1"));
  if (in.small_workers < 0 || in.small_workers > in.workers) {
    usage_error(cat("--small-workers ", in.small_workers, ": there are ", in.workers,
                    " workers, so at most ", in.workers, " can be small"));
  }
  if (!(in.extra_time >= 1) || !std::isfinite(in.extra_time)) {
    usage_error(cat("--extra-time ", in.extra_time,
                    " must be at least 1: small workers take fewer samples only in the time "
                    "the extra gives them"));
  }
  if (in.base_batch < 1) usage_error(cat("--base-batch ", in.base_batch, " must be at least 1"));
  if (in.samples < in.workers) {
    usage_error(cat("--train-samples ", in.samples, " is fewer than the ", in.workers, " workers"));
  }
  if (in.models.size() != 1 && in.models.size() != static_cast<std::size_t>(in.workers)) {
    usage_error(cat("the plan needs one time model or one per worker (", in.workers, "), not ",
                    in.models.size()));
  }
}

const TimeModel& model_of(const DbslPlanInput& in, int w) {
  return in.models.size() == 1 ? in.models[0] : in.models[static_cast<std::size_t>(w)];
}

// The batch that makes `samples` take `time` on `model`; a usage error when none does.
int small_batch(const TimeModel& model, double time, std::int64_t samples, const DbslPlanInput& in,
                int worker) {
  const double per_sample = time / static_cast<double>(samples) - model.a;
  const double batch = per_sample > 0 ? model.b / per_sample : 0;
  const std::int64_t b = per_sample > 0 ? floor_int(batch) : 0;
  if (b < 1 || b > samples) {
    usage_error(cat("impossible plan: small worker ", worker, " would take ", samples,
                    " samples in ", strprintf("%.4g", time), " s, which needs a batch of ",
                    per_sample > 0 ? strprintf("%.3g", batch) : std::string("more than any"),
                    " (B_S must be from 1 to its samples); with --extra-time ", in.extra_time,
                    " and ", in.small_workers, " small of ", in.workers,
                    " workers, change --extra-time or "
                    "--small-workers"));
  }
  return static_cast<int>(b);
}

void finish(DbslPlan& plan, const DbslPlanInput& in) {
  for (int w = 0; w < in.workers; ++w) {
    auto& worker = plan.workers[static_cast<std::size_t>(w)];
    worker.predicted_time =
        round_time(model_of(in, w), static_cast<double>(worker.samples), worker.batch);
  }
}

}  // namespace

std::int64_t DbslPlan::total_samples() const {
  std::int64_t total = 0;
  for (const auto& w : workers) total += w.samples;
  return total;
}

DbslPlan eq8_plan(const DbslPlanInput& in) {
  check_input(in);
  const TimeModel& m = in.models[0];
  const double N = static_cast<double>(in.samples);
  const double n = in.workers;
  const int n_small = in.small_workers;
  const int n_large = in.workers - n_small;
  DbslPlan plan;
  // The original's count_small_BS_data_size(), operation for operation.
  plan.base_time = (m.a + m.b / in.base_batch) * N / n;
  plan.target_time = in.extra_time * plan.base_time;
  const auto d_large = static_cast<std::int64_t>(in.extra_time * N / n);
  plan.large_samples = n_large > 0 ? d_large : 0;
  std::int64_t d_small = 0;
  int b_small = 0;
  if (n_small > 0) {
    d_small = static_cast<std::int64_t>((N - static_cast<double>(d_large * n_large)) / n_small);
    if (d_small < 1) {
      usage_error(cat("impossible plan: the ", n_large, " large workers take ", d_large * n_large,
                      " of ", in.samples,
                      " samples, none is left for the small ones; lower "
                      "--extra-time"));
    }
    b_small = small_batch(m, plan.target_time, d_small, in, n_large + 1);
  }
  for (int w = 0; w < in.workers; ++w) {
    DbslWorkerPlan worker;
    worker.small = w >= n_large;
    worker.batch = worker.small ? b_small : in.base_batch;
    worker.samples = worker.small ? d_small : d_large;
    worker.factor = worker.small ? static_cast<double>(d_small) / static_cast<double>(d_large) : 1;
    plan.workers.push_back(worker);
  }
  finish(plan, in);
  return plan;
}

DbslPlan dbsl_plan(const DbslPlanInput& in) {
  check_input(in);
  const int n_large = in.workers - in.small_workers;
  const double N = static_cast<double>(in.samples);
  // T0: the round time at which all workers at B_L together take N samples.
  double speed = 0;  // samples per second of the whole cluster at B_L
  for (int w = 0; w < in.workers; ++w) speed += 1.0 / round_time(model_of(in, w), 1, in.base_batch);
  DbslPlan plan;
  plan.base_time = N / speed;
  plan.target_time = in.extra_time * plan.base_time;
  plan.workers.resize(static_cast<std::size_t>(in.workers));
  // What a worker would take in T at B_L.
  auto large_share = [&](int w) {
    return floor_int(in.extra_time * N / round_time(model_of(in, w), 1, in.base_batch) / speed);
  };
  std::int64_t left = in.samples;
  for (int w = 0; w < n_large; ++w) {
    auto& worker = plan.workers[static_cast<std::size_t>(w)];
    worker.batch = in.base_batch;
    worker.samples = large_share(w);
    left -= worker.samples;
  }
  plan.large_samples = n_large > 0 ? plan.workers[0].samples : 0;
  if (in.small_workers > 0 && left < in.small_workers) {
    usage_error(cat("impossible plan: the ", n_large, " large workers take ", in.samples - left,
                    " of ", in.samples,
                    " samples, none is left for the small ones; lower "
                    "--extra-time"));
  }
  // The rest in proportion to 1 / a (equal shares when a device has no per-sample cost).
  bool per_sample = true;
  double capacity = 0;
  for (int w = n_large; w < in.workers; ++w) {
    per_sample = per_sample && model_of(in, w).a > 0;
    capacity += model_of(in, w).a > 0 ? 1.0 / model_of(in, w).a : 0;
  }
  for (int w = n_large; w < in.workers; ++w) {
    auto& worker = plan.workers[static_cast<std::size_t>(w)];
    const double share = per_sample ? 1.0 / model_of(in, w).a / capacity : 1.0 / in.small_workers;
    worker.small = true;
    worker.samples = floor_int(static_cast<double>(left) * share);
    worker.batch = small_batch(model_of(in, w), plan.target_time, worker.samples, in, w + 1);
    worker.factor = static_cast<double>(worker.samples) / static_cast<double>(large_share(w));
  }
  finish(plan, in);
  return plan;
}

TimeModel parse_time_model_ab(const std::string& text, const std::string& flag) {
  const auto parts = split(text, ',');
  if (parts.size() != 2) {
    usage_error(cat(flag, ": '", text, "' is not A,B (seconds per sample, seconds per batch)"));
  }
  TimeModel model{parse_double(trim(parts[0]), flag), parse_double(trim(parts[1]), flag)};
  if (!time_model_problem(model).empty()) {
    usage_error(cat(flag, ": '", text, "' needs A >= 0 and B >= 0, not both 0"));
  }
  return model;
}

std::string plan_table(const DbslPlan& plan, const DbslPlanInput& in) {
  std::ostringstream out;
  out << strprintf("DBSL plan: N=%lld samples, %d workers (%d small), B_L=%d, k=%g\n",
                   static_cast<long long>(in.samples), in.workers, in.small_workers, in.base_batch,
                   in.extra_time);
  out << strprintf("all-large round %.4f s, target round %.4f s\n", plan.base_time,
                   plan.target_time);
  out << strprintf("%-7s %-6s %7s %9s %8s %12s\n", "worker", "kind", "batch", "samples", "factor",
                   "round (s)");
  for (std::size_t w = 0; w < plan.workers.size(); ++w) {
    const auto& p = plan.workers[w];
    out << strprintf("%-7zu %-6s %7d %9lld %8.4f %12.4f\n", w + 1, p.small ? "small" : "large",
                     p.batch, static_cast<long long>(p.samples), p.factor, p.predicted_time);
  }
  out << strprintf("samples per round: %lld of %lld\n",
                   static_cast<long long>(plan.total_samples()),
                   static_cast<long long>(in.samples));
  return out.str();
}

std::string plan_json(const DbslPlan& plan, const DbslPlanInput& in) {
  std::ostringstream out;
  {
    JsonWriter json(out);
    json.begin_object();
    json.key("train_samples").value(static_cast<std::int64_t>(in.samples));
    json.key("workers").value(in.workers);
    json.key("small_workers").value(in.small_workers);
    json.key("base_batch").value(in.base_batch);
    json.key("extra_time").value(in.extra_time);
    json.key("base_time").value(plan.base_time);
    json.key("target_time").value(plan.target_time);
    json.key("samples_per_round").value(plan.total_samples());
    json.key("plan").begin_array();
    for (std::size_t w = 0; w < plan.workers.size(); ++w) {
      const auto& p = plan.workers[w];
      json.begin_object();
      json.key("worker").value(static_cast<std::int64_t>(w + 1));
      json.key("kind").value(p.small ? "small" : "large");
      json.key("batch").value(p.batch);
      json.key("samples").value(p.samples);
      json.key("factor").value(p.factor);
      json.key("predicted_round_time").value(p.predicted_time);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  out << '\n';
  return out.str();
}

}  // namespace mbkit::train
