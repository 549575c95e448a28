#include "mbkit/backend/device.hpp"

#include <charconv>
#include <cstdlib>

#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::backend {
namespace {

constexpr const char* kDeviceForms = "cpu, cuda (the local rank's GPU) or cuda:N";

// A whole number without sign, spaces or trailing text; nullopt otherwise.
std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc{} || stop != end || value < 0) return std::nullopt;
  return value;
}

std::string visible_note(const char* visible_devices) {
  if (visible_devices == nullptr) return "";
  return cat(" (CUDA_VISIBLE_DEVICES=", visible_devices, ")");
}

}  // namespace

std::string Device::text() const {
  if (kind == Kind::kCpu) return "cpu";
  return index < 0 ? "cuda" : cat("cuda:", index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {Device::Kind::kCuda, -1};
  if (text.starts_with("cuda:")) {
    if (const auto index = whole_number(text.substr(5))) return {Device::Kind::kCuda, *index};
    usage_error(cat("--device ", text, ": the GPU index after 'cuda:' must be a whole number"));
  }
  usage_error(cat("--device: unknown device '", text, "' (known: ", kDeviceForms, ")"));
}

std::optional<LocalRank> local_rank_from_environment(const EnvironmentLookup& lookup) {
  for (const char* variable : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                               "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK"}) {
    const char* value = lookup(variable);
    if (value == nullptr) continue;
    const auto rank = whole_number(value);
    if (!rank) {
      usage_error(cat("the launcher's ", variable, "='", value, "' is not a local rank"));
    }
    return LocalRank{*rank, variable};
  }
  return std::nullopt;
}

std::optional<LocalRank> local_rank_from_environment() {
  return local_rank_from_environment([](const char* name) { return std::getenv(name); });
}

int choose_gpu(const Device& device, const std::optional<LocalRank>& local_rank, int gpus,
               const char* visible_devices) {
  MBKIT_CHECK(device.kind == Device::Kind::kCuda, "choose_gpu for --device ", device.text());
  if (gpus <= 0) {
    usage_error(cat("--device ", device.text(), ": no CUDA GPU is visible to this process",
                    visible_note(visible_devices)));
  }
  if (device.index >= 0) {
    if (device.index < gpus) return device.index;
    usage_error(cat("--device ", device.text(), ": this node has ", gpus, " GPU",
                    gpus == 1 ? "" : "s", " (cuda:0 to cuda:", gpus - 1, ")",
                    visible_note(visible_devices)));
  }
  const int rank = local_rank ? local_rank->rank : 0;
  if (rank < gpus) return rank;
  usage_error(cat("--device cuda: local rank ", rank, " (", local_rank->variable,
                  ") has no GPU of its own: this node has ", gpus, visible_note(visible_devices),
                  "; start at most ", gpus, " rank", gpus == 1 ? "" : "s",
                  " per node, or name a GPU with cuda:N to share one"));
}

}  // namespace mbkit::backend
