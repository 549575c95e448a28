// The parsers of option values: the first byte picks the option, the rest is its text.
// --induce, --compute-model (entries separated by spaces, as several flags), --comm-model,
// --slowdown, --cpu-quota, --time-model-ab, integer lists (--batch-sizes, --partitions), sizes
// (--min-bytes), durations (--xmax), whole and real numbers, checksum lists, run configurations
// (JSON, as the logs store them).
#include <cmath>
#include <cstdlib>

#include "fuzz_input.hpp"
#include "mbkit/bench/bandwidth.hpp"
#include "mbkit/bench/partitions.hpp"
#include "mbkit/data/fetch.hpp"
#include "mbkit/emulation/straggler.hpp"
#include "mbkit/plot/config.hpp"
#include "mbkit/plot/series.hpp"
#include "mbkit/train/dbsl_plan.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/strings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string text = mbkit::fuzz::text_of({data + 1, size - 1});
  mbkit::fuzz::expect_errors_only([&] {
    switch (data[0] % 13) {
      case 0: {
        const auto profile = mbkit::emulation::parse_straggler_profile(text);
        if (profile) {
          (void)profile->describe();
          // What spec() writes must read back to the same components (logs store it; a named
          // profile reads back as "custom").
          if (mbkit::emulation::parse_straggler_profile(profile->spec())->components !=
              profile->components)
            std::abort();
          mbkit::emulation::StragglerSampler sampler(*profile, 1, 0);
          const double delay = sampler.next();
          if (!(delay >= 0 && delay <= profile->cap())) std::abort();
        }
        break;
      }
      case 1: {
        const auto models = mbkit::train::parse_compute_models(mbkit::split(text, ' '));
        (void)models.describe();
        models.check_ranks(8, 1);
        (void)models.for_rank(3);
        break;
      }
      case 2: {
        const auto model = mbkit::train::parse_comm_model(text);
        if (model) {
          (void)model->describe();
          (void)model->allreduce(1 << 20, 4);
        }
        break;
      }
      case 3: {
        const auto slowdown = mbkit::emulation::parse_slowdown(text);
        slowdown.check_ranks(8);
        (void)slowdown.extra_delay(2, 0.5);
        break;
      }
      case 4:
        (void)mbkit::train::parse_time_model_ab(text, "--time-model-ab");
        break;
      case 5:
        (void)mbkit::bench::parse_int_list(text, "--batch-sizes");
        break;
      case 6:
        (void)mbkit::bench::parse_bytes(text, "--min-bytes");
        break;
      case 7:
        (void)mbkit::plot::parse_duration(text, "--xmax");
        break;
      case 8:
        (void)mbkit::parse_int(text, "--steps");
        break;
      case 9:
        (void)mbkit::parse_double(text, "--lr");
        break;
      case 10:
        (void)mbkit::data::parse_checksum_list(text, "SHA256SUMS");
        break;
      case 11: {
        const auto quota = mbkit::emulation::parse_cpu_quota(text);
        quota.check_ranks(8);
        (void)quota.describe();
        for (const auto& [rank, window] : quota.windows) {
          // Runnable at the returned time, no earlier than asked; compute takes at least its
          // own seconds, and no more than whole periods at the quota's rate and one more.
          const double start = window.runnable_from(0.37 * window.period);
          const double phase = std::fmod(start, window.period);
          if (!(start >= 0.37 * window.period) || !(phase <= window.quota + 1e-9 * window.period))
            std::abort();
          const double seconds = 2.5 * window.quota;
          const double end = window.compute_end(start, seconds);
          if (!(end >= start + seconds * (1 - 1e-12)) ||
              !(end <= start + (seconds / window.quota + 2) * window.period))
            std::abort();
          // The budget: the same bounds, sleeping, yielding or spinning in its waits, from a
          // part-spent period.
          for (const double busy_wait : {0.0, 0.2 * window.period, mbkit::emulation::kWaitsOnCpu}) {
            mbkit::emulation::QuotaBudget budget{window, busy_wait};
            budget.run(0.3 * window.quota);
            const double from = budget.wait(0.37 * window.period);
            const double done = budget.run(seconds);
            if (!(done >= from + seconds * (1 - 1e-12)) ||
                !(done <= from + (seconds / window.quota + 2) * window.period) ||
                !(budget.spent <= window.quota))
              std::abort();
          }
          // CPU beside the worker past the quota (the loader's thread): a debt of whole
          // periods, then the compute; within the same bounds plus the debt's periods.
          mbkit::emulation::QuotaBudget owing{window, 0.0};
          owing.beside(1.5 * window.quota);
          const double done = owing.run(seconds);
          if (!(done >= seconds * (1 - 1e-12)) ||
              !(done <= (seconds / window.quota + 1.5 + 3) * window.period) ||
              !(owing.spent <= window.quota))
            std::abort();
        }
        break;
      }
      default:
        (void)mbkit::plot::flatten_json_object(text, "config");
    }
  });
  return 0;
}
