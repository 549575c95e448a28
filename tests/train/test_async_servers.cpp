// --servers S --async: what needs the whole model of one step during the run is refused, naming
// the flag (each server updates its shard on its own); with one server it is not. The end's
// checkpoint and resuming from it are not refused.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mbkit/train/options.hpp"
#include "mbkit/util/error.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

TrainOptions async_options(int servers) {
  TrainOptions o;
  o.data = "x.h5";
  o.steps = 1;
  o.comm = CommMode::kPs;
  o.async = true;
  o.servers = servers;
  return o;
}

TEST(AsyncServers, SeveralServeAnAsynchronousRunSavedAtItsEnd) {
  EXPECT_NO_THROW(validate(async_options(2)));
  TrainOptions saved = async_options(5);
  saved.checkpoint = "c.h5";
  saved.resume = "auto";
  EXPECT_NO_THROW(validate(saved));
}

TEST(AsyncServers, WhatNeedsTheWholeModelDuringTheRunIsRefused) {
  const std::vector<std::pair<std::string, std::function<void(TrainOptions&)>>> uses = {
      {"--checkpoint-every",
       [](TrainOptions& o) { o.checkpoint = "c.h5", o.checkpoint_every = 5; }},
      {"--checkpoint-every-epoch",
       [](TrainOptions& o) { o.checkpoint = "c.h5", o.checkpoint_every_epoch = true; }},
      {"--eval-every", [](TrainOptions& o) { o.eval_every = 10; }},
      {"--eval-every-epoch", [](TrainOptions& o) { o.eval_every_epoch = true; }},
      {"--train-loss master", [](TrainOptions& o) { o.train_loss = "master"; }},
  };
  for (const auto& [flag, use] : uses) {
    TrainOptions several = async_options(2);
    use(several);
    EXPECT_MBKIT_ERROR(validate(several), ExitCode::kUsage,
                       flag + ": with --servers 2 --async each server updates its shard");
    TrainOptions one = async_options(1);
    use(one);
    EXPECT_NO_THROW(validate(one)) << flag;
  }
}

TEST(AsyncServers, CompressionAndAllreduceStayRefused) {
  TrainOptions compressed = async_options(2);
  compressed.compression = comm::parse_compression("fp16");
  EXPECT_MBKIT_ERROR(validate(compressed), ExitCode::kUsage, "--compress: the asynchronous");
  TrainOptions allreduce = async_options(2);
  allreduce.async = false;
  allreduce.comm = CommMode::kAllreduce;
  EXPECT_MBKIT_ERROR(validate(allreduce), ExitCode::kUsage, "--comm allreduce has none");
}

}  // namespace
}  // namespace mbkit::train
