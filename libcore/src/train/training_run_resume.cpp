// A training run resumed from a checkpoint (training_run.hpp): rank 0 reads it and hands the
// state to every rank (several servers: each its shard of the optimizer state).
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "mbkit/backend/factory.hpp"
#include "mbkit/config.hpp"
#include "mbkit/emulation/delay_trace.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/models/zoo.hpp"
#include "mbkit/plot/config.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/train/comm_model.hpp"
#include "mbkit/train/describe.hpp"
#include "mbkit/train/drop_compute.hpp"
#include "mbkit/train/resume_check.hpp"
#include "mbkit/train/training_run.hpp"
#include "mbkit/util/error.hpp"
#include "mbkit/util/fs.hpp"
#include "mbkit/util/log.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

// Several servers resuming: each takes its shard of the optimizer state, which rank 0 read
// whole from the checkpoint, and the update count.
void TrainingRun::resume_server_shards() {
  std::int64_t arrays = static_cast<std::int64_t>(resumed_optimizer_state_.size());
  world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&arrays), sizeof arrays),
                   0);
  std::vector<float> values(net_->parameter_count());
  for (std::int64_t i = 0; i < arrays; ++i) {
    if (world_.rank() == 0) values = resumed_optimizer_state_[static_cast<std::size_t>(i)];
    world_.broadcast(values, 0);
    if (role_.server && world_.rank() > 0) {
      nn::Buffer& mine = *optimizer_->state().at(static_cast<std::size_t>(i)).second;
      net_->backend().copy_from_host(
          std::span<const float>(values).subspan(shard_.first, mine.size()), mine, 0);
    }
  }
  if (role_.server) optimizer_->set_steps(static_cast<std::int64_t>(resume_.optimizer_steps));
  resumed_optimizer_state_.clear();
}

bool TrainingRun::emulated_async_servers() const {
  return role_.emulated > 0 && options_.async && role_.servers > 1;
}

void TrainingRun::resume_emulated_servers() {
  for (std::size_t i = 0; i < resumed_optimizer_state_.size(); ++i) {
    for (int server = 1; server < role_.servers; ++server) {
      optim::Optimizer& optimizer = *server_optimizers_[static_cast<std::size_t>(server - 1)];
      nn::Buffer& mine = *optimizer.state().at(i).second;
      const std::size_t first = server_shard(net_->parameter_count(), server, role_.servers).first;
      net_->backend().copy_from_host(
          std::span<const float>(resumed_optimizer_state_[i]).subspan(first, mine.size()), mine, 0);
    }
  }
  for (auto& optimizer : server_optimizers_) {
    optimizer->set_steps(static_cast<std::int64_t>(resume_.optimizer_steps));
  }
  resumed_optimizer_state_.clear();
}

std::vector<std::vector<float>> TrainingRun::emulated_servers_optimizer_state() const {
  std::vector<std::vector<float>> whole;
  const std::size_t n = net_->parameter_count();
  const auto states = optimizer_->state();
  for (std::size_t i = 0; i < states.size(); ++i) {
    whole.emplace_back(n);
    for (int server = 0; server < role_.servers; ++server) {
      optim::Optimizer& optimizer =
          server == 0 ? *optimizer_ : *server_optimizers_[static_cast<std::size_t>(server - 1)];
      const nn::Buffer& values = *optimizer.state().at(i).second;
      const std::size_t first = server_shard(n, server, role_.servers).first;
      net_->backend().copy_to_host(values, 0,
                                   std::span<float>(whole.back()).subspan(first, values.size()));
    }
  }
  return whole;
}

// Resume: rank 0 reads the checkpoint and hands the state to every rank.
void TrainingRun::resume() {
  const std::string resume_path = options_.resume == "auto"
                                      ? (fs::exists(options_.checkpoint) ? options_.checkpoint : "")
                                      : options_.resume;
  // A finished run's checkpoint is its result: replacing it takes a decision.
  if (logs_ && !options_.checkpoint.empty() && fs::exists(options_.checkpoint) && !options_.force &&
      resume_path != options_.checkpoint) {
    usage_error(cat(options_.checkpoint,
                    " exists; use --resume auto to continue from it or --force to replace it"));
  }
  if (logs_ && !resume_path.empty()) {
    const Checkpoint checkpoint = read_checkpoint(resume_path);
    const std::vector<std::int64_t> input = {shape_.channels, shape_.height, shape_.width};
    if (checkpoint.model != options_.model.name ||
        checkpoint.model_config != options_.model.to_map() || checkpoint.input_shape != input ||
        checkpoint.num_classes != info_.num_classes) {
      const auto saved = models::ModelConfig::from_map(checkpoint.model, checkpoint.model_config);
      usage_error(cat(resume_path, " holds ", describe_model(saved), " for ",
                      checkpoint.input_shape.size() == 3
                          ? cat(checkpoint.input_shape[0], "x", checkpoint.input_shape[1], "x",
                                checkpoint.input_shape[2])
                          : "?",
                      " inputs and ", checkpoint.num_classes, " classes; this run is ",
                      describe_model(options_.model), " for ", shape_.text(), " and ",
                      info_.num_classes));
    }
    if (checkpoint.optimizer != options_.optimizer.name) {
      usage_error(cat(resume_path, " was trained with --optimizer ", checkpoint.optimizer,
                      "; this run asks for ", options_.optimizer.name));
    }
    require_same_training(checkpoint, resume_path,
                          config_json(options_, net_->graph(), run_facts()), info_,
                          options_.resume_anyway);
    // With several servers rank 0 keeps shard 0 of the whole optimizer state the checkpoint
    // holds; the servers get theirs in resume_server_shards().
    restore_model(checkpoint, *net_, *optimizer_, resume_path, shard_.first);
    restore_delayed(checkpoint, resume_path);
    resumed_quota_budgets_ = checkpoint.cpu_quota_budgets;
    resumed_quota_state_size_ = checkpoint.cpu_quota_state_size;
    if (role_.servers > 1 && (role_.emulated == 0 || emulated_async_servers())) {
      for (const auto& saved : checkpoint.optimizer_state) {
        resumed_optimizer_state_.push_back(saved.values);
      }
    }
    resume_.resumed = 1;
    resume_.step = static_cast<double>(checkpoint.step);
    resume_.elapsed = checkpoint.elapsed;
    resume_.wall_elapsed = checkpoint.wall_elapsed;
    resume_.epoch_progress = checkpoint.epoch_progress;
    resume_.workers = static_cast<double>(checkpoint.workers);
    resume_.same_comm = checkpoint.comm == role_.comm ? 1 : 0;
    resume_.optimizer_steps = static_cast<double>(checkpoint.optimizer_steps);
    resume_.samples_seen = checkpoint.epoch_progress * static_cast<double>(total_rows_);
    log::info(cat("resuming from ", resume_path, " at step ", checkpoint.step,
                  checkpoint.workers != role_.workers
                      ? cat(" (saved by ", checkpoint.workers, " workers, now ", role_.workers,
                            ": the data order differs from an uninterrupted run)")
                      : ""));
  }
  // Every rank starts from rank 0's model (and, when all of them update, its optimizer).
  if (role_.distributed) {
    world_.rendezvous("start-up");
    world_.broadcast(
        std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&resume_), sizeof resume_), 0);
    const auto broadcast = [&](nn::HostView view) {
      world_.broadcast(view.values(), 0);
      view.write_back();
    };
    broadcast(net_->host_parameters());
    broadcast(net_->host_state());
    if (!role_.parameter_server || local_sgd(options_) || role_.shares) {
      for (auto& [name, values] : optimizer_->state()) {
        broadcast(nn::HostView(net_->backend(), *values, 0, values->size()));
      }
      optimizer_->set_steps(static_cast<std::int64_t>(resume_.optimizer_steps));
    }
    if (role_.servers > 1 && role_.emulated == 0 && resume_.resumed != 0) {
      resume_server_shards();
    }
    if (emulated_async_servers() && resume_.resumed != 0) {
      resume_emulated_servers();
      // Rank 0 read the other servers' optimizer shards; every rank hosting a share plays them.
      for (auto& optimizer : server_optimizers_) {
        for (auto& [name, values] : optimizer->state()) {
          broadcast(nn::HostView(net_->backend(), *values, 0, values->size()));
        }
      }
    }
    if (role_.shares && !options_.cpu_quota.empty()) {
      std::int64_t size = static_cast<std::int64_t>(resumed_quota_budgets_.size());
      world_.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&size), sizeof size),
                       0);
      resumed_quota_budgets_.resize(static_cast<std::size_t>(size));
      world_.broadcast(
          std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&resumed_quota_state_size_),
                                  sizeof resumed_quota_state_size_),
          0);
      world_.broadcast(
          std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(resumed_quota_budgets_.data()),
                                  resumed_quota_budgets_.size() * sizeof(double)),
          0);
    }
  }
  share_delayed_versions();
  step_ = static_cast<std::int64_t>(resume_.step);
  step_base_ = step_;
  epoch_base_ = resume_.epoch_progress;
  clock_.resume_at(resume_.elapsed, resume_.wall_elapsed);
  samples_seen_ = resume_.samples_seen;
}

std::vector<double> TrainingRun::quota_budgets() {
  std::vector<double> mine;
  const auto add = [&](const WorkerRound& round, int rank) {
    if (const auto& budget = round.quota_budget()) {
      mine.push_back(rank);
      for (const double value : budget->saved()) mine.push_back(value);
    }
  };
  if (round_) add(*round_, world_.rank());
  if (emulated_) {
    for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
      add(emulated_->round(w), emulated_->rank_of(w));
    }
  }
  if (!role_.shares) return mine;
  // Each rank hosts a run of consecutive workers: rank order is worker order.
  const std::string bytes(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double));
  std::vector<double> every;
  for (const std::string& part : world_.all_gather(bytes)) {
    const std::size_t at = every.size();
    every.resize(at + part.size() / sizeof(double));
    std::memcpy(every.data() + at, part.data(), part.size());
  }
  return every;
}

std::string TrainingRun::quota_totals() const {
  std::string line;
  const auto add = [&](const WorkerRound& round, int rank) {
    if (const auto& budget = round.quota_budget()) {
      line += cat(line.empty() ? "" : "; ", "rank ", rank, ": ",
                  strprintf("%.3f s of CPU charged, stopped %.3f s (%.0f times)", budget->charged,
                            budget->stopped, budget->stops));
    }
  };
  if (round_) add(*round_, world_.rank());
  if (emulated_) {
    for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
      add(emulated_->round(w), emulated_->rank_of(w));
    }
  }
  return line;
}

void TrainingRun::restore_quota_budgets() {
  if (resume_.resumed == 0 || options_.cpu_quota.empty()) return;
  std::map<int, std::vector<double>> saved;
  const auto state = static_cast<std::size_t>(resumed_quota_state_size_);
  for (std::size_t i = 0; i + state + 1 <= resumed_quota_budgets_.size(); i += state + 1) {
    const auto values = resumed_quota_budgets_.begin() + static_cast<std::ptrdiff_t>(i);
    saved[static_cast<int>(*values)] = {values + 1,
                                        values + 1 + static_cast<std::ptrdiff_t>(state)};
  }
  const auto restore = [&](WorkerRound& round, int rank) {
    if (!round.quota_budget()) return;
    const auto found = saved.find(rank);
    if (found == saved.end()) {
      log::warn(cat("the checkpoint holds no --cpu-quota budget of rank ", rank,
                    ": its budget starts unspent at the resumed step"));
      return;
    }
    round.restore_quota_budget(found->second, cat("the checkpoint's budget of rank ", rank));
  };
  if (round_) restore(*round_, world_.rank());
  if (emulated_) {
    for (int w = emulated_->first(); w < emulated_->first() + emulated_->hosted(); ++w) {
      restore(emulated_->round(w), emulated_->rank_of(w));
    }
  }
  resumed_quota_budgets_.clear();
}

}  // namespace mbkit::train
