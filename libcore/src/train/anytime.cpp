#include "mbkit/train/anytime.hpp"

#include <algorithm>

#include "mbkit/util/check.hpp"

namespace mbkit::train {

MicroBatches split_batch(int batch, int micro_size) {
  MBKIT_CHECK(batch > 0 && micro_size > 0, "split_batch(", batch, ", ", micro_size, ")");
  MicroBatches plan;
  plan.size = std::min(micro_size, batch);
  plan.available = batch / plan.size;
  return plan;
}

AnytimeRound run_anytime_round(const MicroBatches& plan, double time_limit,
                               const std::function<double()>& elapsed,
                               const std::function<void(int)>& run,
                               const std::function<void()>& between,
                               const std::function<bool()>& cut) {
  AnytimeRound round;
  for (; round.done < plan.available; ++round.done) {
    if (round.done > 0) {
      if (elapsed() >= time_limit) return round;
      if (between) between();
      if (cut && cut()) {
        round.cut = true;
        return round;
      }
    }
    run(round.done);
  }
  round.finished_early = elapsed() < time_limit;
  return round;
}

}  // namespace mbkit::train
