// Legend labels: runs are named by the fields that differ between them, in a fixed order of
// importance and a short form, falling back on file names; and the JSON configuration they
// are read from.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mbkit/plot/config.hpp"
#include "mbkit/plot/labels.hpp"
#include "test_helpers.hpp"

namespace mbkit::plot {
namespace {

RunDescription run(const std::string& file, FlatConfig fields) {
  return {file, std::move(fields)};
}

FlatConfig base() {
  return {{"tool", "mb-train-fmb"},
          {"batch_size", "64"},
          {"workers", "4"},
          {"world_size", "5"},
          {"comm", "ps"},
          {"async", "false"},
          {"induce", ""},
          {"lr", "0.1"},
          {"optimizer.name", "sgd"},
          {"seed", "1"},
          {"data", "fmnist.h5"},
          {"global_batch_size", "256"}};
}

TEST(Labels, NameRunsByWhatDiffers) {
  auto a = base();
  auto b = base();
  b["batch_size"] = "128";
  b["global_batch_size"] = "512";
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b)}),
            (std::vector<std::string>{"batch 64", "batch 128"}));
}

TEST(Labels, ACpuQuotaNamesItsRunBesideOneWithout) {
  // The emulation of a cgroup's quota (--cpu-quota, recorded where given) beside the same run
  // unthrottled, which keeps its file's name.
  auto free = base();
  auto throttled = base();
  throttled["cpu_quota"] = "1=0.05/0.1";
  EXPECT_EQ(derive_labels({run("free.h5", free), run("quota.h5", throttled)}),
            (std::vector<std::string>{"free", "CPU quota 1=0.05/0.1"}));
  // Its two models side by side: the kernel's tick (--cpu-quota-tick) names the one with it.
  auto ticked = throttled;
  ticked["cpu_quota_tick"] = "0.004";
  EXPECT_EQ(derive_labels({run("quota.h5", throttled), run("tick.h5", ticked)}),
            (std::vector<std::string>{"quota", "quota checked at a tick of 0.004 s"}));
}

TEST(Labels, AnAmbBatchIsTheMostAWorkerComputes) {
  auto fmb = base();
  auto amb = base();
  amb["tool"] = "mb-train-amb";
  amb["batch_size"] = "128";
  amb["partitions"] = "16";
  EXPECT_EQ(derive_labels({run("fmb.h5", fmb), run("amb.h5", amb)}),
            (std::vector<std::string>{"FMB, batch 64", "AMB, batch up to 128"}));
}

TEST(Labels, AStragglerMethodNamesItsRunsWhereOthersHaveNone) {
  // Each method's field is in its own run only: its presence is what differs.
  auto fmb = base();
  auto backup = base();
  backup["backup_workers"] = "2";
  auto k_sync = base();
  k_sync["k_sync"] = "3";
  auto coded = base();
  coded["gradient_coding"] = "1";
  auto k_batch = base();
  k_batch["k_batch_sync"] = "4";
  auto local = base();
  local["local_steps"] = "8";
  auto adacomm = base();
  adacomm["local_steps"] = "adacomm";
  EXPECT_EQ(derive_labels({run("fmb.h5", fmb), run("backup.h5", backup), run("ksync.h5", k_sync),
                           run("coded.h5", coded), run("kbsync.h5", k_batch),
                           run("local.h5", local), run("adacomm.h5", adacomm)}),
            (std::vector<std::string>{"fmb", "2 backup workers", "K-sync 3", "gradient coding s=1",
                                      "K-batch-sync 4", "local SGD tau=8", "local SGD, AdaComm"}));
}

TEST(Labels, TheAsynchronousMethodsNameTheirRuns) {
  auto plain = base();
  plain["async"] = "true";
  auto k_async = plain;
  k_async["k_async"] = "8";
  auto ssp = plain;
  ssp["staleness_bound"] = "2";
  EXPECT_EQ(derive_labels({run("async.h5", plain), run("kasync.h5", k_async), run("ssp.h5", ssp)}),
            (std::vector<std::string>{"async", "K-async 8", "SSP s=2"}));
}

TEST(Labels, AChosenTimeLimitShowsThreeDigits) {
  auto amb = base();
  amb["tool"] = "mb-train-amb";
  amb["time_limit"] = "6.1";
  auto dropped = base();
  dropped["drop_compute"] = "auto";
  dropped["time_limit"] = "5.438316589469002";
  EXPECT_EQ(derive_labels({run("amb.h5", amb), run("drop.h5", dropped)}),
            (std::vector<std::string>{"AMB, T=6.1 s", "FMB, DropCompute auto, T=5.44 s"}));
}

TEST(Labels, AmbDgIsNamedByItsDelay) {
  auto amb = base();
  amb["tool"] = "mb-train-amb";
  amb["time_limit"] = "6.1";
  auto delayed = amb;
  delayed["delayed_gradients"] = "1";
  delayed["delayed_gradients_option"] = "auto";
  EXPECT_EQ(derive_labels({run("amb.h5", amb), run("ambdg.h5", delayed)}),
            (std::vector<std::string>{"amb", "AMB-DG tau=1"}));
}

TEST(Labels, ShowFieldsInOrderOfImportance) {
  auto a = base();
  auto b = base();
  a["time_limit"] = "1";
  b["tool"] = "mb-train-amb";
  b["time_limit"] = "2.5";
  b["workers"] = "8";
  b["world_size"] = "9";  // follows from workers: not shown
  b["lr"] = "0.05";
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b)}),
            (std::vector<std::string>{"FMB, T=1 s, 4 workers, lr=0.1",
                                      "AMB, T=2.5 s, 8 workers, lr=0.05"}));
}

TEST(Labels, ShortFormsOfKnownFields) {
  EXPECT_EQ(describe_field("tool", "mb-train-dbsl"), "DBSL");
  EXPECT_EQ(describe_field("async", "true"), "async");
  EXPECT_EQ(describe_field("async", "false"), "sync");
  EXPECT_EQ(describe_field("comm", "allreduce"), "allreduce");
  EXPECT_EQ(describe_field("workers", "1"), "1 worker");
  EXPECT_EQ(describe_field("workers", "10"), "10 workers");
  EXPECT_EQ(describe_field("induce", ""), "no stragglers");
  EXPECT_EQ(describe_field("induce", "cedar"), "cedar");
  EXPECT_EQ(describe_field("batch_size", "32"), "batch 32");
  EXPECT_EQ(describe_field("model_config.hidden", "16"), "hidden=16");
  EXPECT_EQ(describe_field("clock", "virtual"), "virtual clock");
}

TEST(Labels, OtherFieldsOnlyWhileLabelsCollide) {
  auto a = base();
  auto b = base();
  a["eval_every"] = "100";
  b["eval_every"] = "200";
  // Nothing known differs: the unknown field is needed.
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b)}),
            (std::vector<std::string>{"eval_every=100", "eval_every=200"}));
  // A known field already tells them apart: the unknown one is left out.
  b["seed"] = "2";
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b)}),
            (std::vector<std::string>{"seed 1", "seed 2"}));
}

TEST(Labels, FileNamesWhenNothingDiffers) {
  EXPECT_EQ(derive_labels({run("out/first.h5", base()), run("second.h5", base())}),
            (std::vector<std::string>{"first", "second"}));
  // Same base names in different directories: the paths.
  EXPECT_EQ(derive_labels({run("a/run.h5", base()), run("b/run.h5", base())}),
            (std::vector<std::string>{"a/run.h5", "b/run.h5"}));
  // A single run: its file.
  EXPECT_EQ(derive_labels({run("dir/solo.h5", base())}), (std::vector<std::string>{"solo"}));
}

TEST(Labels, FileNamesSettleCollisions) {
  auto a = base();
  auto b = base();
  auto c = base();
  c["batch_size"] = "128";
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b), run("c.h5", c)}),
            (std::vector<std::string>{"batch 64 (a)", "batch 64 (b)", "batch 128 (c)"}));
}

TEST(Labels, IgnoredFieldsAreNotShown) {
  auto a = base();
  auto b = base();
  b["workers"] = "8";
  b["comm"] = "allreduce";
  EXPECT_EQ(derive_labels({run("a.h5", a), run("b.h5", b)}, {"workers", "world_size"}),
            (std::vector<std::string>{"ps", "allreduce"}));
}

TEST(Labels, FieldsOnlySomeRunsHaveDifferOnlyAmongThem) {
  auto fmb = base();
  auto amb1 = base();
  auto amb2 = base();
  for (auto* amb : {&amb1, &amb2}) {
    (*amb)["tool"] = "mb-train-amb";
    (*amb)["partitions"] = "16";
  }
  amb1["time_limit"] = "1";
  amb2["time_limit"] = "2";
  // partitions: the same wherever it exists, so not shown; time_limit: shown where it exists.
  EXPECT_EQ(derive_labels({run("f.h5", fmb), run("a1.h5", amb1), run("a2.h5", amb2)}),
            (std::vector<std::string>{"FMB", "AMB, T=1 s", "AMB, T=2 s"}));
  // Only one run has the field: the runs are told apart by their files.
  auto other = base();
  other["partitions"] = "16";
  EXPECT_EQ(derive_labels({run("a.h5", base()), run("b.h5", other)}),
            (std::vector<std::string>{"a", "b"}));
}

TEST(Labels, GroupsIgnoreTheGivenFields) {
  auto ps2 = base();
  auto ps4 = base();
  auto ar2 = base();
  ps4["workers"] = "4";
  ar2["comm"] = "allreduce";
  ar2["seed"] = "7";
  const std::vector<RunDescription> runs = {run("a.h5", ps2), run("b.h5", ps4), run("c.h5", ar2)};
  EXPECT_EQ(group_labels(runs, {"workers", "world_size", "seed"}),
            (std::vector<std::string>{"ps", "ps", "allreduce"}));
  EXPECT_EQ(group_labels({run("a.h5", ps2), run("b.h5", ps4)}, {"workers"}),
            (std::vector<std::string>{"", ""}));
}

TEST(Config, FlattensNestedObjects) {
  const auto flat = flatten_json_object(
      R"({"batch_size":64,"lr":1e-08,"async":false,"name":"a \"b\"\n\u00e9",)"
      R"("optimizer":{"name":"sgd","inner":{"x":null}},"milestones":[80,120],"names":["a","b"],)"
      R"("empty":{},"neg":-0.5})",
      "run.h5: config");
  EXPECT_EQ(flat.at("batch_size"), "64");
  EXPECT_EQ(flat.at("lr"), "1e-08");
  EXPECT_EQ(flat.at("async"), "false");
  EXPECT_EQ(flat.at("name"), "a \"b\"\n\xc3\xa9");
  EXPECT_EQ(flat.at("optimizer.name"), "sgd");
  EXPECT_EQ(flat.at("optimizer.inner.x"), "");
  EXPECT_EQ(flat.at("milestones"), "[80,120]");
  EXPECT_EQ(flat.at("names"), "[\"a\",\"b\"]");
  EXPECT_EQ(flat.at("neg"), "-0.5");
  EXPECT_EQ(flat.count("empty"), 0u);
}

TEST(Config, MalformedJsonIsADataErrorNamingTheSource) {
  for (const char* bad : {"", "[1,2]", "{", R"({"a":})", R"({"a":1,})", R"({"a":1} x)",
                          R"({"a":"unterminated})", R"({"a":tru})"}) {
    EXPECT_MBKIT_ERROR(flatten_json_object(bad, "run.h5: config"), ExitCode::kBadData,
                       "run.h5: config: ");
  }
}

}  // namespace
}  // namespace mbkit::plot
