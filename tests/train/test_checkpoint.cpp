// Checkpoints: every field round trips bit for bit, array order is kept, a file is replaced
// atomically (a failed write leaves the old one), and damaged, foreign or newer files are data
// errors naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/metrics/metric_log.hpp"
#include "mbkit/train/checkpoint.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::train {
namespace {

std::vector<float> ramp(std::size_t count, float scale) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = scale * std::sin(static_cast<float>(i));
  return values;
}

Checkpoint sample_checkpoint() {
  Checkpoint checkpoint;
  checkpoint.model = "resnet20";
  checkpoint.model_config = {{"width", "16"}, {"activation", "relu"}, {"note", "a=b, c"}};
  checkpoint.input_shape = {3, 32, 32};
  checkpoint.num_classes = 10;
  // Deliberately not in name order; values that only survive bit-exact storage.
  checkpoint.params = {
      {"conv1.weight", {16, 3, 3, 3}, ramp(16 * 27, 0.1f)},
      {"bn1.weight", {16}, std::vector<float>(16, 1.0f)},
      {"layer1.0.conv1.weight", {16, 16, 3, 3}, ramp(16 * 16 * 9, 1e-3f)},
      {"fc.bias",
       {10},
       {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1.0f / 3,
        -1e-30f, 7.5f, 1e30f}},
  };
  checkpoint.state = {{"bn1.running_mean", {16}, ramp(16, 0.01f)},
                      {"bn1.running_var", {16}, ramp(16, 2.0f)},
                      {"bn1.num_batches", {}, {123.0f}}};
  checkpoint.optimizer = "sgd";
  checkpoint.optimizer_config = {{"lr", "0.1"}, {"momentum", "0.9"}, {"nesterov", "true"}};
  checkpoint.optimizer_steps = 1234567;
  checkpoint.optimizer_state = {{"momentum", {16 * 27 + 16 + 16 * 16 * 9 + 10}, ramp(2762, 3.0f)}};
  checkpoint.step = 1234567;
  checkpoint.epoch = 42;
  checkpoint.batch_in_epoch = 17;
  checkpoint.seed = std::numeric_limits<std::uint64_t>::max() - 1;
  checkpoint.elapsed = 0.1 + 0.2;
  checkpoint.epoch_progress = 7.0 / 3.0;
  checkpoint.workers = 4;
  checkpoint.comm = "ps-async";
  checkpoint.dataset = "cifar10";
  checkpoint.mean = {0.4914, 0.4822, 0.4465};
  checkpoint.std = {0.2470, 0.2435, 0.2616};
  checkpoint.config_json = R"({"model": "resnet20", "batch_size": 128, "lr": 0.1})";
  checkpoint.created_by = "mb-train-fmb (mbkit) 0.1.0";
  return checkpoint;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp of an empty vector's null data() is undefined (UBSan's nonnull check), even for 0 bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same_arrays(const std::vector<NamedArray>& read, const std::vector<NamedArray>& written,
                        const char* what) {
  ASSERT_EQ(read.size(), written.size()) << what;
  for (std::size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].name, written[i].name) << what << " " << i;
    EXPECT_EQ(read[i].shape, written[i].shape) << written[i].name;
    EXPECT_TRUE(same_bits(read[i].values, written[i].values)) << written[i].name;
  }
}

void expect_same(const Checkpoint& read, const Checkpoint& written) {
  EXPECT_EQ(read.model, written.model);
  EXPECT_EQ(read.model_config, written.model_config);
  EXPECT_EQ(read.input_shape, written.input_shape);
  EXPECT_EQ(read.num_classes, written.num_classes);
  expect_same_arrays(read.params, written.params, "params");
  expect_same_arrays(read.state, written.state, "state");
  EXPECT_EQ(read.optimizer, written.optimizer);
  EXPECT_EQ(read.optimizer_config, written.optimizer_config);
  EXPECT_EQ(read.optimizer_steps, written.optimizer_steps);
  expect_same_arrays(read.optimizer_state, written.optimizer_state, "optimizer");
  EXPECT_EQ(read.step, written.step);
  EXPECT_EQ(read.epoch, written.epoch);
  EXPECT_EQ(read.batch_in_epoch, written.batch_in_epoch);
  EXPECT_EQ(read.seed, written.seed);
  EXPECT_EQ(std::memcmp(&read.elapsed, &written.elapsed, sizeof(double)), 0);
  EXPECT_EQ(read.epoch_progress, written.epoch_progress);
  EXPECT_EQ(read.workers, written.workers);
  EXPECT_EQ(read.comm, written.comm);
  EXPECT_EQ(read.dataset, written.dataset);
  EXPECT_EQ(read.mean, written.mean);
  EXPECT_EQ(read.std, written.std);
  EXPECT_EQ(read.config_json, written.config_json);
  EXPECT_EQ(read.created_by, written.created_by);
  expect_same_arrays(read.delayed_parameters, written.delayed_parameters, "delayed_parameters");
  EXPECT_EQ(read.delayed_timeline, written.delayed_timeline);
}

bool has_temporaries(const test::TempDir& dir) {
  const auto names = dir.entries();
  return std::any_of(names.begin(), names.end(), [](const std::string& name) {
    return name.find(".tmp-") != std::string::npos;
  });
}

// Edits a written checkpoint in place, to make damaged ones.
template <class Edit>
void edit(const std::string& path, Edit edit_file) {
  io::File file = io::File::open(path, io::File::Mode::kReadWrite);
  edit_file(file);
  file.close();
}

TEST(Checkpoint, EveryFieldRoundTripsBitForBit) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  const Checkpoint written = sample_checkpoint();
  write_checkpoint(path, written);
  expect_same(read_checkpoint(path), written);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.h5"});
}

TEST(Checkpoint, AmbDgVersionsAndTimelineRoundTripAndAreAbsentWithout) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Checkpoint written = sample_checkpoint();
  write_checkpoint(path, written);
  {
    const io::File file = io::File::open(path);
    EXPECT_FALSE(file.has("delayed_parameters"));
    EXPECT_FALSE(file.has_attribute("delayed_timeline"));
  }
  // mb-train-amb --delayed-gradients 2 at step 7: versions 5 and 6, and the timeline (version
  // 5 held from the start: -infinity).
  written.delayed_parameters = {{"version_5", {3}, {1.5f, -2.0f, 0.25f}},
                                {"version_6", {3}, {1.0f, -1.0f, 0.5f}}};
  written.delayed_timeline = {2, -0.25, -0.5, 2, 5, -std::numeric_limits<double>::infinity(),
                              6, -0.125};
  write_checkpoint(path, written);
  expect_same(read_checkpoint(path), written);
}

TEST(Checkpoint, LayoutIsPlainHdf5WithArraysInTheirShapesAndOrder) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  write_checkpoint(path, sample_checkpoint());
  const io::File file = io::File::open(path);
  EXPECT_EQ(file.string_attribute("format"), "mbkit-checkpoint");
  EXPECT_EQ(file.int_attribute("format_version"), 1);
  EXPECT_EQ(file.string_array_attribute("model_config_keys"),
            (std::vector<std::string>{"activation", "note", "width"}));
  EXPECT_EQ(file.string_array_attribute("model_config_values"),
            (std::vector<std::string>{"relu", "a=b, c", "16"}));
  EXPECT_EQ(file.string_attribute("config"), sample_checkpoint().config_json);
  EXPECT_EQ(file.member_names(), (std::vector<std::string>{"optimizer", "params", "state"}));
  const io::Group params = file.open_group("params");
  EXPECT_EQ(
      params.string_array_attribute("names"),
      (std::vector<std::string>{"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "fc.bias"}));
  const io::Dataset conv = params.open_dataset("conv1.weight");
  EXPECT_EQ(conv.dims(), (std::vector<hsize_t>{16, 3, 3, 3}));
  EXPECT_EQ(conv.type_class(), H5T_FLOAT);
  EXPECT_EQ(conv.type_size(), 4u);
  const auto filters = conv.filters();
  EXPECT_NE(std::find(filters.begin(), filters.end(), H5Z_FILTER_FLETCHER32), filters.end());
  EXPECT_TRUE(file.open_dataset("state/bn1.num_batches").dims().empty());  // a scalar
}

TEST(Checkpoint, EmptyConfigurationsAndArraysRoundTrip) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Checkpoint written;
  written.model = "mlp";
  written.params = {{"empty", {0, 4}, {}}, {"w", {2, 2}, {1, 2, 3, 4}}};
  write_checkpoint(path, written);
  const Checkpoint read = read_checkpoint(path);
  expect_same(read, written);
  EXPECT_TRUE(read.model_config.empty() && read.optimizer_config.empty());
  EXPECT_TRUE(read.input_shape.empty() && read.mean.empty() && read.state.empty());
}

TEST(Checkpoint, WritingAgainReplacesTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Checkpoint first = sample_checkpoint();
  write_checkpoint(path, first);
  Checkpoint second = sample_checkpoint();
  second.step = 99;
  second.params.pop_back();
  write_checkpoint(path, second);
  expect_same(read_checkpoint(path), second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.h5"});
}

TEST(Checkpoint, FailedWriteLeavesTheOldFileAndNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  const Checkpoint good = sample_checkpoint();
  write_checkpoint(path, good);

  Checkpoint bad = sample_checkpoint();
  bad.state[1].values.pop_back();  // fails after the temporary was created and half written
  EXPECT_MBKIT_ERROR(write_checkpoint(path, bad), ExitCode::kFailure,
                     "/state/bn1.running_var: 15 values for shape (16)");
  Checkpoint duplicate = sample_checkpoint();
  duplicate.params[2].name = "conv1.weight";
  EXPECT_MBKIT_ERROR(write_checkpoint(path, duplicate), ExitCode::kFailure, "two arrays");
  Checkpoint slash = sample_checkpoint();
  slash.params[0].name = "conv1/weight";
  EXPECT_MBKIT_ERROR(write_checkpoint(path, slash), ExitCode::kFailure, "invalid array name");
  expect_same(read_checkpoint(path), good);
  EXPECT_FALSE(has_temporaries(dir));
}

TEST(Checkpoint, UnwritableDirectoryLeavesTheOldFile) {
  test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string locked = dir.file("locked"), path = locked + "/ckpt.h5";
  ASSERT_EQ(::mkdir(locked.c_str(), 0755), 0);
  const Checkpoint good = sample_checkpoint();
  write_checkpoint(path, good);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  ASSERT_EQ(::chmod(locked.c_str(), 0555), 0);
  // Root writes into read-only directories: the write runs in a child that has dropped to the
  // unprivileged "nobody" when the test runs as root (as in CI containers).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    try {
      write_checkpoint(path, Checkpoint{});
      ::_exit(1);  // wrote into a read-only directory
    } catch (const Error& error) {
      const std::string message = error.what();
      ::_exit(message.find(path) != std::string::npos &&
                      message.find("Permission denied") != std::string::npos
                  ? 0
                  : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: wrong message, 3: could not drop root";
  ASSERT_EQ(::chmod(locked.c_str(), 0755), 0);
  expect_same(read_checkpoint(path), good);
}

TEST(Checkpoint, MissingForeignAndNewerFilesAreDataErrors) {
  test::TempDir dir;
  EXPECT_MBKIT_ERROR(read_checkpoint(dir.file("absent.h5")), ExitCode::kBadData,
                     "absent.h5: no such file");
  test::write_text(dir.file("text.h5"), "not hdf5");
  EXPECT_MBKIT_ERROR(read_checkpoint(dir.file("text.h5")), ExitCode::kBadData,
                     "text.h5: not an HDF5 file");
  {
    io::File bare = io::File::create(dir.file("bare.h5"));
    bare.close();
  }
  EXPECT_MBKIT_ERROR(read_checkpoint(dir.file("bare.h5")), ExitCode::kBadData,
                     "bare.h5: not an mbkit checkpoint (no 'format' attribute");
  metrics::RunInfo info;
  info.world_size = 1;
  metrics::MetricLog::create(dir.file("log.h5"), info, false).close();
  EXPECT_MBKIT_ERROR(read_checkpoint(dir.file("log.h5")), ExitCode::kBadData,
                     "log.h5: not an mbkit checkpoint (format is 'mbkit-log')");

  const std::string newer = dir.file("newer.h5");
  write_checkpoint(newer, sample_checkpoint());
  edit(newer, [](io::File& file) { file.set_attribute("format_version", 2); });
  EXPECT_MBKIT_ERROR(read_checkpoint(newer), ExitCode::kBadData,
                     "newer.h5: checkpoint format version 2 is newer than this mbkit reads (1); "
                     "upgrade mbkit");
}

TEST(Checkpoint, IncompleteFilesAreDataErrorsNamingWhatIsMissing) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  const auto expect_error_after = [&](auto edit_file, const std::string& text) {
    write_checkpoint(path, sample_checkpoint());
    edit(path, edit_file);
    EXPECT_MBKIT_ERROR(read_checkpoint(path), ExitCode::kBadData, text);
  };
  expect_error_after([](io::File& file) { H5Adelete(file.id(), "step"); },
                     "ckpt.h5:/: missing attribute 'step'");
  expect_error_after([](io::File& file) { H5Adelete(file.id(), "optimizer_config_values"); },
                     "missing attribute 'optimizer_config_values'");
  expect_error_after(
      [](io::File& file) {
        file.set_attribute("model_config_values", std::vector<std::string>{"x"});
      },
      "ckpt.h5: model_config_keys has 3 entries but model_config_values has 1");
  expect_error_after([](io::File& file) { file.remove("state"); },
                     "ckpt.h5:/: missing group 'state'");
  expect_error_after([](io::File& file) { file.open_group("params").remove("fc.bias"); },
                     "ckpt.h5:/params: holds 3 arrays but its 'names' attribute lists 4");
  expect_error_after(
      [](io::File& file) {
        io::Group params = file.open_group("params");
        params.remove("fc.bias");
        params.create_dataset<float>("fc.biases", {10});
      },
      "ckpt.h5:/params: missing dataset 'fc.bias'");
  expect_error_after(
      [](io::File& file) {
        io::Group state = file.open_group("state");
        state.remove("bn1.running_var");
        state.create_dataset<std::int32_t>("bn1.running_var", {16});
      },
      "ckpt.h5:/state/bn1.running_var: not a floating-point array");
  expect_error_after([](io::File& file) { file.set_attribute("mean", std::vector<double>{0.5}); },
                     "ckpt.h5: mean has 1 values but std has 3");
}

TEST(Checkpoint, DamagedBytesAreDataErrors) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Checkpoint checkpoint = sample_checkpoint();
  // A run of distinctive values to find in the file and damage.
  checkpoint.params[2].values.assign(checkpoint.params[2].values.size(), 1234.5f);
  write_checkpoint(path, checkpoint);
  auto bytes = fs::read_file(path);
  const std::vector<std::uint8_t> pattern(
      reinterpret_cast<const std::uint8_t*>(checkpoint.params[2].values.data()),
      reinterpret_cast<const std::uint8_t*>(checkpoint.params[2].values.data() + 16));
  const auto found = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  ASSERT_NE(found, bytes.end());
  found[9] ^= 0x40;
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(read_checkpoint(path), ExitCode::kBadData,
                     "ckpt.h5:/params/layer1.0.conv1.weight: cannot read");

  // Damaged metadata: an attribute name, checksummed with the header that holds it.
  write_checkpoint(path, checkpoint);
  bytes = fs::read_file(path);
  const std::string name = "batch_in_epoch";
  const auto name_at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(name_at, bytes.end());
  name_at[3] ^= 0x01;
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(read_checkpoint(path), ExitCode::kBadData, "ckpt.h5: damaged file: ");

  // A truncated file.
  write_checkpoint(path, checkpoint);
  bytes = fs::read_file(path);
  bytes.resize(bytes.size() / 2);
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(read_checkpoint(path), ExitCode::kBadData, "ckpt.h5");
}

// Damage to the chunk index set the filter mask of params/fc2.bias's chunk: HDF5 skipped its
// Fletcher-32 check and read damaged bytes as a bias of -4.8e31; mb-eval reported an accuracy.
TEST(Checkpoint, AChunkIndexDamagedToSkipTheChecksumIsADataError) {
  EXPECT_MBKIT_ERROR(read_checkpoint(std::string(MBKIT_TEST_DATA_DIR) +
                                     "/fuzz/corpus/checkpoint/regress_eval_silent_filter_mask.h5"),
                     ExitCode::kBadData,
                     "regress_eval_silent_filter_mask.h5:/params/fc2.bias: the chunk at [0] ");
}

TEST(Checkpoint, RequireFiniteNamesTheArrayAndTheNegativeStepIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  std::vector<NamedArray> arrays = {{"w", {2}, {1, 2}}, {"b", {2}, {0, std::nanf("")}}};
  EXPECT_MBKIT_ERROR(require_finite(arrays, path), ExitCode::kBadData,
                     "ckpt.h5: array b holds nan at index 1");
  arrays.pop_back();
  require_finite(arrays, path);
  Checkpoint written = sample_checkpoint();
  written.step = -5;
  write_checkpoint(path, written);
  EXPECT_MBKIT_ERROR(read_checkpoint(path), ExitCode::kBadData, "ckpt.h5: step is -5, negative");
}

}  // namespace
}  // namespace mbkit::train
