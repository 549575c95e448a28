// The asynchronous server's methods' options (--k-async, --k-batch-async, --staleness-bound;
// mbkit/train/async_rule.hpp), checked by validate() (options.cpp).
#include <string>

#include "mbkit/train/options.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

int async_gradients_per_update(const TrainOptions& o) {
  return o.k_async > 0 ? o.k_async : o.async_min_grads;
}

// The asynchronous server's methods (mbkit/train/async_rule.hpp): each names the count rule's
// variant it is, so a second rule for the same decision is refused naming both flags.
void validate_async_methods(const TrainOptions& o) {
  if (o.k_async < 0) usage_error(cat("--k-async ", o.k_async, " must be at least 1"));
  if (o.k_batch_async < 0) {
    usage_error(cat("--k-batch-async ", o.k_batch_async, " must be at least 1"));
  }
  if (o.staleness_bound < -1) {
    usage_error(cat("--staleness-bound ", o.staleness_bound, " must not be negative"));
  }
  const std::string flag = o.k_async > 0            ? cat("--k-async ", o.k_async)
                           : o.k_batch_async > 0    ? cat("--k-batch-async ", o.k_batch_async)
                           : o.staleness_bound >= 0 ? cat("--staleness-bound ", o.staleness_bound)
                                                    : std::string();
  if (flag.empty()) return;
  if (o.comm != CommMode::kPs) {
    usage_error(cat(flag, " and --comm ", to_string(o.comm), ": it needs --comm ps"));
  }
  if (!o.async) usage_error(cat(flag, " needs --async"));
  const std::string transport = o.compression.enabled() ? cat("--compress ", o.given.compress)
                                : o.dbsl.enabled        ? std::string("mb-train-dbsl")
                                : o.allreduce == AllreduceVia::kSharedMemory
                                    ? std::string("--allreduce shm")
                                    : std::string();
  if (!transport.empty()) {
    usage_error(cat(flag, " and ", transport,
                    ": the asynchronous server takes full-precision gradients from its "
                    "workers"));
  }
  if (o.k_async > 0 && o.k_batch_async > 0) {
    usage_error(cat(flag, " and --k-batch-async ", o.k_batch_async,
                    " are two rules for an update's gradients: give one"));
  }
  if (o.async_master_time_limit > 0) {
    usage_error(cat(flag, " and --async-master-time-limit: ",
                    o.staleness_bound >= 0 && o.k_async == 0 && o.k_batch_async == 0
                        ? "the staleness bound goes with the count rule of one gradient per "
                          "update"
                        : "two rules for when the master updates: give one"));
  }
  if (o.k_async > 0 && o.async_min_grads != 1) {
    usage_error(cat(flag, " and --async-min-grads ", o.async_min_grads,
                    ": two counts of gradients per update: give one"));
  }
  if (o.staleness_bound >= 0) {
    // The go a blocked worker waits for carries the update of the slowest worker's gradient:
    // one gradient per update makes every received gradient applied when the go is decided.
    const std::string other = o.k_async > 0 ? cat("--k-async ", o.k_async)
                              : o.async_min_grads != 1
                                  ? cat("--async-min-grads ", o.async_min_grads)
                              : o.amb.enabled ? std::string("mb-train-amb")
                                              : std::string();
    if (!other.empty()) {
      usage_error(cat("--staleness-bound ", o.staleness_bound, " and ", other,
                      o.amb.enabled && other == "mb-train-amb"
                          ? ": an anytime worker takes newer parameters between micro-batches, "
                            "not at the master's go (mb-train-fmb)"
                          : ": the bound goes with one gradient per update (the count rule's "
                            "default), so that a worker's go carries every gradient received"));
    }
  }
}

}  // namespace mbkit::train
