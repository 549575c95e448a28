// --resume refuses a run that changes what the checkpoint was trained with (resume_check.hpp).
#include <gtest/gtest.h>

#include <string>

#include "mbkit/train/resume_check.hpp"
#include "mbkit/util/strings.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

Checkpoint saved(const std::string& config) {
  Checkpoint checkpoint;
  checkpoint.dataset = "toy";
  checkpoint.mean = {0.5};
  checkpoint.std = {0.25};
  checkpoint.config_json = config;
  return checkpoint;
}

data::DatasetInfo dataset(double mean) {
  data::DatasetInfo info;
  info.name = "toy";
  info.mean = {mean};
  info.std = {0.25};
  return info;
}

const std::string kConfig =
    R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":1,"optimizer":{"momentum":0.9},)"
    R"("epochs":1})";

TEST(ResumeCheck, TheSameTrainingContinues) {
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", kConfig, dataset(0.5)), "");
  // What a resumed run may change: its length, and the file's path.
  const std::string longer =
      R"({"data":"moved.h5","batch_size":64,"lr":0.1,"seed":1,"optimizer":{"momentum":0.9},)"
      R"("epochs":5})";
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", longer, dataset(0.5)), "");
}

TEST(ResumeCheck, NamesTheOptionAndBothValues) {
  const std::string seed2 =
      R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":2,"optimizer":{"momentum":0.9}})";
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", seed2, dataset(0.5)),
            "--seed 2: c.h5 was trained with --seed 1");
  const std::string momentum =
      R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":1,"optimizer":{"momentum":0.5}})";
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", momentum, dataset(0.5)),
            "--momentum 0.5: c.h5 was trained with --momentum 0.9");
  // --global-batch-size against --batch-size.
  const std::string global =
      R"({"data":"a.h5","batch_size":32,"global_batch_size":64,"batch_sizes":[32,32],)"
      R"("lr":0.1,"seed":1,"optimizer":{"momentum":0.9}})";
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", global, dataset(0.5)),
            "--global-batch-size 64: c.h5 was trained with --batch-size 64");
  // Keys left out at their defaults: a run with --threads 2 against one with all cores.
  const std::string threads = R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":1,"threads":2,)"
                              R"("optimizer":{"momentum":0.9}})";
  EXPECT_EQ(changed_training(saved(kConfig), "c.h5", threads, dataset(0.5)),
            "--threads 2: c.h5 was trained with --threads 0");
}

// --emulate's bits are the same for every --threads: an emulated run may resume with another.
TEST(ResumeCheck, AnEmulatedRunMayChangeItsThreads) {
  const auto config = [](int threads, int emulate) {
    return cat(R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":1,"threads":)", threads,
               emulate > 0 ? cat(R"(,"emulate":)", emulate) : std::string(), "}");
  };
  EXPECT_EQ(changed_training(saved(config(1, 8)), "c.h5", config(3, 8), dataset(0.5)), "");
  EXPECT_EQ(changed_training(saved(config(1, 8)), "c.h5", config(3, 4), dataset(0.5)), "");
  // A rank's threads change its sums: not when either run had a process per worker.
  EXPECT_EQ(changed_training(saved(config(1, 0)), "c.h5", config(3, 8), dataset(0.5)),
            "--threads 3: c.h5 was trained with --threads 1");
  EXPECT_EQ(changed_training(saved(config(1, 8)), "c.h5", config(3, 0), dataset(0.5)),
            "--threads 3: c.h5 was trained with --threads 1");
}

TEST(ResumeCheck, AnotherDatasetOfTheSameNameIsRefusedUnlessAnyway) {
  const std::string change = changed_training(saved(kConfig), "c.h5", kConfig, dataset(0.4));
  EXPECT_NE(change.find("--data a.h5: not the dataset c.h5 was trained on (a.h5)"),
            std::string::npos)
      << change;
  EXPECT_NE(change.find("0.4"), std::string::npos) << change;
  EXPECT_MBKIT_ERROR(require_same_training(saved(kConfig), "c.h5", kConfig, dataset(0.4), false),
                     ExitCode::kUsage, "--resume-anyway");
  require_same_training(saved(kConfig), "c.h5", kConfig, dataset(0.4), true);  // a warning
}

TEST(ResumeCheck, TheMessageModelIsComparedByItsValues) {
  const auto with_model = [](const std::string& given, const std::string& values) {
    return R"({"data":"a.h5","batch_size":64,"lr":0.1,"seed":1,"comm_model":")" + given +
           (values.empty() ? "" : R"(","comm_model_values":")" + values) + R"("})";
  };
  const std::string inline_model = with_model("1e-3,2e-9", "");
  // A file of the same values, and the same numbers spelt otherwise, continue.
  EXPECT_EQ(changed_training(saved(inline_model), "c.h5",
                             with_model("m.h5", "0.001,2.0000000000000001e-09"), dataset(0.5)),
            "");
  EXPECT_EQ(
      changed_training(saved(inline_model), "c.h5", with_model("0.001,2e-9", ""), dataset(0.5)),
      "");
  // Other values are refused, naming both.
  EXPECT_EQ(changed_training(saved(inline_model), "c.h5", with_model("m.h5", "0.002,1e-09"),
                             dataset(0.5)),
            "--comm-model m.h5 (0.002,1e-09): c.h5 was trained with --comm-model 1e-3,2e-9");
  // Measured at start (none given) is not compared.
  EXPECT_EQ(changed_training(saved(inline_model), "c.h5", with_model("", ""), dataset(0.5)), "");
}

}  // namespace
}  // namespace mbkit::train
