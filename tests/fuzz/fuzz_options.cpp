// The parsers of option values: the first byte picks the option, the rest is its text.
// --induce, --compute-model (entries separated by spaces, as several flags), --comm-model,
// --slowdown, --time-model-ab, integer lists (--batch-sizes, --partitions), sizes
// (--min-bytes), durations (--xmax), whole and real numbers, checksum lists, run configurations
// (JSON, as the logs store them).
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
    switch (data[0] % 12) {
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
      default:
        (void)mbkit::plot::flatten_json_object(text, "config");
    }
  });
  return 0;
}
