#include "mbkit/train/describe.hpp"

#include <sstream>

#include "mbkit/emulation/straggler.hpp"
#include "mbkit/metrics/worker_table.hpp"
#include "mbkit/train/virtual_clock.hpp"
#include "mbkit/util/json.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::train {

std::map<std::string, std::string> optimizer_map(const optim::OptimizerConfig& c) {
  return {{"name", c.name},
          {"weight_decay", cat(c.weight_decay)},
          {"momentum", cat(c.momentum)},
          {"nesterov", c.nesterov ? "true" : "false"},
          {"rmsprop_decay", cat(c.rmsprop_decay)},
          {"rmsprop_momentum", cat(c.rmsprop_momentum)},
          {"rmsprop_epsilon", cat(c.rmsprop_epsilon)},
          {"adam_beta1", cat(c.adam_beta1)},
          {"adam_beta2", cat(c.adam_beta2)},
          {"adam_epsilon", cat(c.adam_epsilon)}};
}

std::string config_json(const TrainOptions& o, const nn::Graph& graph, const RunFacts& facts,
                        bool pretty) {
  const int workers = facts.workers;
  const DbslPlan* dbsl = facts.dbsl;
  std::ostringstream out;
  {
    JsonWriter json(out, pretty);
    json.begin_object();
    json.key("data").value(o.data);
    json.key("test_data").value(o.test_data.empty() ? o.data : o.test_data);
    // With --global-batch-size: the smallest worker's share (batch_sizes has them all).
    json.key("batch_size").value(worker_batch_size(o, workers, workers - 1));
    json.key("augment").value(o.augment.enabled());
    // The list only when set, so that default runs record what they always did.
    if (o.augment.enabled()) json.key("augment_list").value(o.augment.text());
    json.key("drop_last").value(o.drop_last);
    json.key("model").value(o.model.name);
    json.key("model_config").begin_object();
    for (const auto& [key, value] : o.model.to_map()) json.key(key).value(value);
    json.end_object();
    json.key("parameters").value(static_cast<std::uint64_t>(graph.parameter_count()));
    json.key("optimizer").begin_object();
    for (const auto& [key, value] : optimizer_map(o.optimizer)) json.key(key).value(value);
    json.end_object();
    // Written only when not the default, so that default runs record what they always did.
    if (o.weight_decay_on != "mean") json.key("weight_decay_on").value(o.weight_decay_on);
    json.key("lr").value(o.schedule.lr);
    json.key("lr_schedule").value(o.schedule.kind);
    json.key("decay_steps").value(o.schedule.decay_steps);
    json.key("decay_rate").value(o.schedule.decay_rate);
    json.key("staircase").value(o.schedule.staircase);
    json.key("milestones").array(o.schedule.milestones);
    json.key("gamma").value(o.schedule.gamma);
    json.key("end_lr").value(o.schedule.end_lr);
    if (o.schedule.kind == "epochs") {  // only then, so that other runs record what they did
      json.key("lr_every").value(o.schedule.every_epochs);
      json.key("lr_frac").value(o.schedule.frac);
    }
    json.key("warmup_epochs").value(o.warmup_epochs);
    json.key("epochs").value(o.epochs);
    json.key("steps").value(o.steps);
    json.key("planned_steps")
        .value(facts.planned_steps == kUnlimitedSteps ? std::int64_t{-1} : facts.planned_steps);
    json.key("time_budget").value(o.time_budget);
    json.key("eval_every").value(o.eval_every);
    if (o.eval_every_epoch) json.key("eval_every_epoch").value(true);
    json.key("test_size").value(o.test_size);
    if (o.test_sample != "fixed") json.key("test_sample").value(o.test_sample);
    if (o.train_loss != "workers") json.key("train_loss").value(o.train_loss);
    json.key("seed").value(o.seed);
    // The thread count changes the sums' order (a resumed run compares it, but between emulated
    // runs); all cores: left out.
    if (o.threads > 0) json.key("threads").value(o.threads);
    json.key("device").value(o.device);
    if (o.precision != "fp32") json.key("precision").value(o.precision);
    if (facts.step_graphs) json.key("cuda_graphs").value(*facts.step_graphs ? "on" : "off");
    json.key("nan_policy").value(o.nan_policy);
    json.key("comm").value(to_string(o.comm));
    json.key("async").value(o.async);
    json.key("async_min_grads").value(o.async_min_grads);
    if (o.async_master_time_limit > 0) {
      json.key("async_master_time_limit").value(o.async_master_time_limit);
    }
    if (o.async_delay_std > 0) json.key("async_delay_std").value(o.async_delay_std);
    if (o.k_async > 0) json.key("k_async").value(o.k_async);
    if (o.staleness_bound >= 0) json.key("staleness_bound").value(o.staleness_bound);
    json.key("allreduce").value(facts.allreduce);
    if (!facts.allreduce_library.empty()) {
      json.key("allreduce_library").value(facts.allreduce_library);
    }
    if (const auto& trial =
            facts
                .trial) {  // what --allreduce auto measured (seconds per sum) to choose `allreduce`
      json.key("allreduce_trial").begin_object();
      json.key("shm_seconds").value(trial->shared_memory_seconds);
      json.key("mpi_seconds").value(trial->mpi_seconds);
      json.end_object();
    }
    json.key("bucket_mb").value(o.bucket_mb);
    json.key("induce").value(o.given.induce);
    json.key("induce_spec").value(o.induce ? o.induce->spec() : std::string());
    // A replayed trace: its file and the digest of its values (a resume compares it).
    if (const auto& trace = o.induce_trace) {
      json.key("induce_trace").begin_object();
      json.key("file").value(trace->path);
      json.key("sha256").value(trace->digest());
      json.key("workers").value(trace->workers);
      json.key("steps").value(trace->steps);
      json.key("source").value(trace->source);
      json.end_object();
      json.key("trace_scale").value(o.trace_scale);
    }
    json.key("slowdown").value(o.given.slowdown);
    if (!o.given.cpu_quota.empty()) json.key("cpu_quota").value(o.given.cpu_quota);
    if (o.cpu_quota_tick > 0) json.key("cpu_quota_tick").value(o.cpu_quota_tick);
    json.key("comm_timeout").value(o.comm_timeout);
    json.key("clock").value(to_string(o.clock));
    json.key("comm_model").value(o.given.comm_model);
    // A --comm-model file's values: a resumed run compares the model, not the file's name.
    if (o.comm_model && !o.comm_model->file.empty()) {
      json.key("comm_model_values")
          .value(facts.comm_model_values.empty() ? o.comm_model->spec() : facts.comm_model_values);
    }
    json.key("compute_model").value(o.compute_model.spec());
    json.key("world_size").value(facts.world_size);
    json.key("workers").value(workers);
    json.key("worker_table").value(metrics::resolve_worker_table(o.worker_table, workers).text());
    json.key("global_batch_size").value(global_batch_size(o, workers));
    // Keys of options left at their defaults are left out, so that the recorded
    // configurations of runs without them stay as they were.
    if (o.global_batch_size > 0) {
      std::vector<std::int64_t> sizes;
      for (int w = 0; w < workers; ++w) sizes.push_back(worker_batch_size(o, workers, w));
      json.key("batch_sizes").array(sizes);
    }
    if (o.servers > 1) json.key("servers").value(o.servers);
    // An emulated run's workers ran inside one process (the bits are a process per worker's).
    if (o.emulate > 0) json.key("emulate").value(o.emulate);
    if (o.backup_workers > 0) json.key("backup_workers").value(o.backup_workers);
    if (o.k_sync > 0) json.key("k_sync").value(o.k_sync);
    if (o.gradient_coding > 0) json.key("gradient_coding").value(o.gradient_coding);
    if (o.adacomm) {
      json.key("local_steps").value(std::string("adacomm"));
      json.key("adacomm_tau0").value(o.adacomm_tau0);
      json.key("adacomm_interval").value(o.adacomm_interval);
    } else if (o.local_steps > 1) {
      json.key("local_steps").value(o.local_steps);
    }
    if (o.k_batch_sync > 0) json.key("k_batch_sync").value(o.k_batch_sync);
    if (o.compression.enabled()) {
      // Bytes of gradient a worker sends per step, as encoded and as floats.
      const std::uint64_t n = graph.parameter_count();
      json.key("compress").value(o.given.compress);
      json.key("gradient_bytes_sent")
          .value(static_cast<std::uint64_t>(o.compression.encoded_bytes(n)));
      json.key("gradient_bytes").value(n * sizeof(float));
    }
    if (o.lr_scaling != "none") {
      json.key("lr_scaling").value(o.lr_scaling);
      json.key("lr_base_batch").value(o.lr_base_batch > 0 ? o.lr_base_batch : o.batch_size);
      json.key("lr_factor").value(lr_scale_factor(o, workers));
    }
    if (o.amb.enabled) {
      json.key("time_limit").value(facts.time_limit);
      json.key("time_limit_option").value(o.given.time_limit);
      // How --time-limit auto chose the limit (absent for a limit given in seconds).
      if (!facts.time_limit_rule.empty()) {
        json.key("time_limit_rule").value(facts.time_limit_rule);
      }
      json.key("partitions").value(o.amb.partitions);
      json.key("micro_batch_size").value(o.batch_size / o.amb.partitions);
      json.key("decay_per_micro_batch").value(o.amb.decay_per_micro_batch);
      if (o.delayed_gradients.enabled) {
        json.key("delayed_gradients").value(facts.delay_rounds);
        json.key("delayed_gradients_option").value(o.given.delayed_gradients);
      }
    }
    if (o.drop_compute.enabled) {
      json.key("drop_compute").value(o.given.drop_compute);
      json.key("micro_batches").value(o.drop_compute.micro_batches);
      json.key("time_limit").value(facts.time_limit);
      if (!facts.time_limit_rule.empty()) {
        json.key("time_limit_rule").value(facts.time_limit_rule);
      }
    }
    if (dbsl != nullptr) {
      json.key("dbsl").begin_object();
      json.key("base_batch").value(o.dbsl.base_batch);
      json.key("extra_time").value(o.dbsl.extra_time);
      json.key("small_workers").value(o.dbsl.small_workers);
      json.key("update_factor").value(o.dbsl.update_factor);
      json.key("sync").value(o.dbsl.sync);
      json.key("keep_optimizer_state").value(o.dbsl.keep_optimizer_state);
      json.key("base_time").value(dbsl->base_time);
      json.key("target_time").value(dbsl->target_time);
      // Per worker (rank w + 1), as flat arrays (mb-report reads no objects inside arrays).
      std::vector<bool> small;
      std::vector<std::int64_t> batch, samples;
      std::vector<double> predicted;
      for (const auto& p : dbsl->workers) {
        small.push_back(p.small);
        batch.push_back(p.batch);
        samples.push_back(p.samples);
        predicted.push_back(p.predicted_time);
      }
      json.key("small").begin_array();
      for (const bool s : small) json.value(s);
      json.end_array();
      json.key("batch").array(batch);
      json.key("samples").array(samples);
      json.key("factor").array(facts.dbsl_factors);
      json.key("predicted_round_time").array(predicted);
      if (!dbsl->calibrated.empty()) {
        std::vector<double> a, b;
        for (const auto& m : dbsl->calibrated) {
          a.push_back(m.a);
          b.push_back(m.b);
        }
        json.key("calibrated_a").array(a);
        json.key("calibrated_b").array(b);
        json.key("calibrated_r_squared").array(dbsl->r_squared);
      }
      json.end_object();
    }
    json.end_object();
  }
  return out.str();
}

std::string describe_model(const models::ModelConfig& model) {
  if (model.name != "mlp") return model.name;
  std::vector<std::string> sizes;
  for (int size : model.hidden) sizes.push_back(cat(size));
  return cat("mlp (hidden ", sizes.empty() ? "none" : join(sizes, ","), ", ", model.activation,
             ")");
}

std::string describe_optimizer(const optim::OptimizerConfig& c) {
  std::string text = c.name;
  if (c.name == "momentum") text += cat(" ", c.momentum, c.nesterov ? " (nesterov)" : "");
  if (c.name == "rmsprop")
    text += cat(" (decay ", c.rmsprop_decay, ", momentum ", c.rmsprop_momentum, ")");
  if (c.name == "adam") text += cat(" (beta1 ", c.adam_beta1, ", beta2 ", c.adam_beta2, ")");
  return text + cat(", weight decay ", c.weight_decay);
}

std::string describe_schedule(const optim::ScheduleConfig& s) {
  std::string text = cat("lr ", s.lr, " ", s.kind);
  if (s.kind == "exponential") {
    text += cat(" (x", s.decay_rate, " every ", s.decay_steps, " steps",
                s.staircase ? ", staircase" : "", ")");
  } else if (s.kind == "multistep") {
    std::vector<std::string> epochs;
    for (double m : s.milestones) epochs.push_back(cat(m));
    text += cat(" (x", s.gamma, " at epochs ", join(epochs, ","), ")");
  } else if (s.kind == "linear") {
    text += cat(" (to ", s.end_lr, " at step ", s.total_steps, ")");
  } else if (s.kind == "epochs") {
    text += cat(" (x", s.frac, " every ", s.every_epochs, " epochs)");
  }
  if (s.warmup_steps > 0) text += cat(", warm-up ", s.warmup_steps, " steps");
  if (s.warmup_steps > 0 && s.warmup_from > 0) text += cat(" from lr ", s.lr * s.warmup_from);
  return text;
}

}  // namespace mbkit::train
