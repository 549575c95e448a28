// Dataset files: writer/reader round trips, exact statistics, and verify() finding each kind
// of problem a damaged or hand-made file can have.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/synth.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

struct SmallDataset {
  ImageShape shape{2, 3, 3};
  std::vector<std::uint8_t> train_images, test_images;
  std::vector<std::int32_t> train_labels{0, 1, 2, 1, 0}, test_labels{2, 2};
  SmallDataset() {
    train_images.resize(train_labels.size() * shape.pixels());
    for (std::size_t i = 0; i < train_images.size(); ++i) {
      train_images[i] = static_cast<std::uint8_t>((i * 37) % 256);
    }
    test_images.assign(test_labels.size() * shape.pixels(), 200);
  }
};

std::string write_small(const test::TempDir& dir, const SmallDataset& data,
                        const std::string& name = "small.h5") {
  DatasetHeader header;
  header.name = "small";
  header.num_classes = 3;
  header.class_names = {"zero", "one", "two"};
  header.source = "unit test";
  header.source_files = {{"a.bin", std::string(64, 'a')}};
  DatasetWriter writer(dir.file(name), header, 4);
  writer.begin_split(kTrain, data.train_labels.size(), data.shape);
  // Two appends to exercise streaming.
  writer.append(std::span(data.train_images).first(2 * data.shape.pixels()),
                std::span(data.train_labels).first(2));
  writer.append(std::span(data.train_images).subspan(2 * data.shape.pixels()),
                std::span(data.train_labels).subspan(2));
  writer.write_split(kTest, data.shape, data.test_images, data.test_labels);
  writer.finish();
  return dir.file(name);
}

TEST(DatasetFile, RoundTrip) {
  test::TempDir dir;
  const SmallDataset data;
  const auto file = DatasetFile::open(write_small(dir, data));
  const auto& info = file.info();
  EXPECT_EQ(info.name, "small");
  EXPECT_EQ(info.num_classes, 3);
  EXPECT_EQ(info.class_names, (std::vector<std::string>{"zero", "one", "two"}));
  EXPECT_EQ(info.shape(), data.shape);
  EXPECT_EQ(info.split(kTrain).count, 5u);
  EXPECT_EQ(info.split(kTest).count, 2u);
  EXPECT_EQ(info.source_files.size(), 1u);
  EXPECT_FALSE(info.shard.has_value());
  EXPECT_EQ(file.read_labels(kTrain), data.train_labels);
  std::vector<std::uint8_t> images(5 * data.shape.pixels());
  file.read_images(kTrain, 0, 5, images.data());
  EXPECT_EQ(images, data.train_images);
  std::vector<std::uint8_t> one(data.shape.pixels());
  file.read_images(kTest, 1, 1, one.data());
  EXPECT_EQ(one, std::vector<std::uint8_t>(data.shape.pixels(), 200));
}

TEST(DatasetFile, MeanAndStdAreThoseOfTheTrainingPixels) {
  test::TempDir dir;
  const SmallDataset data;
  const auto info = DatasetFile::open(write_small(dir, data)).info();
  const std::size_t plane = 9;
  for (std::size_t c = 0; c < 2; ++c) {
    double sum = 0, square = 0, n = 0;
    for (std::size_t image = 0; image < 5; ++image) {
      for (std::size_t i = 0; i < plane; ++i) {
        const double v = data.train_images[image * 18 + c * plane + i] / 255.0;
        sum += v;
        square += v * v;
        ++n;
      }
    }
    const double mean = sum / n;
    EXPECT_NEAR(info.mean[c], mean, 1e-12);
    EXPECT_NEAR(info.std[c], std::sqrt(square / n - mean * mean), 1e-12);
  }
}

TEST(DatasetWriter, RejectsLabelsOutOfRangeAndIncompleteSplits) {
  test::TempDir dir;
  DatasetHeader header;
  header.name = "bad";
  header.num_classes = 2;
  {
    DatasetWriter writer(dir.file("a.h5"), header);
    writer.begin_split(kTrain, 2, {1, 1, 1});
    const std::vector<std::uint8_t> pixels{1, 2};
    EXPECT_MBKIT_ERROR(writer.append(pixels, std::vector<std::int32_t>{0, 2}), ExitCode::kBadData,
                       "train label 2 at index 1 is outside [0, 2)");
  }
  {
    DatasetWriter writer(dir.file("b.h5"), header);
    writer.begin_split(kTrain, 2, {1, 1, 1});
    writer.append(std::vector<std::uint8_t>{1}, std::vector<std::int32_t>{0});
    EXPECT_MBKIT_ERROR(writer.finish(), ExitCode::kFailure, "split train has 1 of 2 rows");
  }
  header.class_names = {"only one"};
  EXPECT_MBKIT_ERROR(DatasetWriter(dir.file("c.h5"), header), ExitCode::kBadData,
                     "1 class names for 2 classes");
}

TEST(Verify, ValidFileHasNoProblemsAndCountsClasses) {
  test::TempDir dir;
  const auto report = verify(write_small(dir, SmallDataset{}));
  EXPECT_TRUE(report.ok()) << report.problems.front();
  ASSERT_EQ(report.class_counts.size(), 2u);
  EXPECT_EQ(report.class_counts[0], (std::vector<std::uint64_t>{2, 2, 1}));
  EXPECT_EQ(report.class_counts[1], (std::vector<std::uint64_t>{0, 0, 2}));
}

// Opens a valid small file for raw edits, then verifies it and expects `text` in a problem.
void expect_problem_after(const std::function<void(io::File&)>& edit, const std::string& text) {
  test::TempDir dir;
  const std::string path = write_small(dir, SmallDataset{});
  {
    io::File file = io::File::open(path, io::File::Mode::kReadWrite);
    edit(file);
    file.close();
  }
  const auto report = verify(path);
  ASSERT_FALSE(report.ok()) << "expected a problem containing: " << text;
  bool found = false;
  for (const auto& problem : report.problems)
    found = found || problem.find(text) != std::string::npos;
  EXPECT_TRUE(found) << "problems: " << report.problems.front();
}

TEST(Verify, FindsEachKindOfProblem) {
  expect_problem_after([](io::File& f) { f.set_attribute("format", "something-else"); },
                       "not an mbkit dataset (format is 'something-else')");
  expect_problem_after([](io::File& f) { f.set_attribute("format_version", 2); },
                       "format version 2 is newer than this mbkit reads");
  expect_problem_after([](io::File& f) { f.remove("test"); }, "missing group /test");
  expect_problem_after(
      [](io::File& f) {
        f.set_attribute("num_classes", 2);
        f.remove("class_names");
      },
      "/train/labels[2] = 2 is outside [0, 2)");
  expect_problem_after(
      [](io::File& f) {
        f.set_attribute("mean", std::vector<double>{0.5, 0.5});
      },
      "differ from the pixels");
  expect_problem_after([](io::File& f) { f.set_attribute("std", std::vector<double>{0.5}); },
                       "mean/std have 2/1 entries for 2 channels");
  expect_problem_after(
      [](io::File& f) {
        f.open_group("test").remove("labels");
        f.open_group("test").create_dataset<std::int32_t>("labels", {3});
      },
      "2 images but 3 labels");
  expect_problem_after(
      [](io::File& f) {
        f.open_group("train").remove("images");
        f.open_group("train").create_dataset<float>("images", {5, 2, 3, 3});
      },
      "/train/images is not uint8");
  expect_problem_after([](io::File& f) { f.set_attribute("shard_index", 0); },
                       "missing attribute 'shard_count'");
}

TEST(Verify, NonDatasetInputs) {
  test::TempDir dir;
  test::write_text(dir.file("text.h5"), "hello");
  EXPECT_NE(verify(dir.file("text.h5")).problems.at(0).find("not an HDF5 file"), std::string::npos);
  io::File::create(dir.file("other.h5")).close();
  EXPECT_NE(verify(dir.file("other.h5")).problems.at(0).find("not an mbkit dataset"),
            std::string::npos);
  EXPECT_FALSE(looks_like_dataset(dir.file("other.h5")));
  EXPECT_FALSE(looks_like_dataset(dir.file("text.h5")));
  EXPECT_FALSE(looks_like_dataset(dir.file("absent.h5")));
}

// Damage to the chunk index (which the HDF5 1.8 format does not checksum) that moved a split's
// only chunk away from its coordinates: HDF5 read the missing chunk as zeros, and verify said OK.
TEST(Verify, AChunkMovedOutOfItsPlaceInTheIndexIsAProblem) {
  const std::string corpus = std::string(MBKIT_TEST_DATA_DIR) + "/fuzz/corpus/dataset_file/";
  const auto labels = verify(corpus + "regress_verify_silent_zero_labels.h5");
  ASSERT_EQ(labels.problems.size(), 1u);
  EXPECT_NE(labels.problems[0].find("regress_verify_silent_zero_labels.h5:/train/labels: the "
                                    "chunk at [0] is missing from its chunk index"),
            std::string::npos)
      << labels.problems[0];
  const auto images = verify(corpus + "regress_verify_silent_zero_test_images.h5");
  ASSERT_EQ(images.problems.size(), 1u);
  EXPECT_NE(images.problems[0].find("regress_verify_silent_zero_test_images.h5:/test/images: the "
                                    "chunk at [0, 0, 0, 0] is missing from its chunk index"),
            std::string::npos)
      << images.problems[0];
}

// L's finding: --train 1000000000000 ran for hours towards a full disk. It is refused at once,
// naming the sizes, and no file is left.
TEST(Synth, ADatasetLargerThanTheDiskIsRefusedBeforeWriting) {
  test::TempDir dir;
  ToySynthOptions toy;
  toy.train = 1'000'000'000'000;
  EXPECT_MBKIT_ERROR(write_synth_toy(dir.file("toy.h5"), toy, 1), ExitCode::kUsage,
                     "--train 1000000000000 --test");
  ImagesSynthOptions images;
  images.train = 1'000'000'000;
  images.shape = {3, 224, 224};
  EXPECT_MBKIT_ERROR(write_synth_images(dir.file("images.h5"), images, 1), ExitCode::kUsage,
                     "GB free");
  EXPECT_FALSE(fs::exists(dir.file("toy.h5")));
  EXPECT_FALSE(fs::exists(dir.file("images.h5")));
}

TEST(Synth, SameSeedSameDataDifferentSeedDifferentData) {
  test::TempDir dir;
  ToySynthOptions options;
  options.train = 300;
  options.test = 50;
  write_synth_toy(dir.file("a.h5"), options, 1);
  write_synth_toy(dir.file("b.h5"), options, 1);
  options.seed = 2;
  write_synth_toy(dir.file("c.h5"), options, 1);
  auto read = [&](const std::string& name) {
    const auto file = DatasetFile::open(dir.file(name));
    std::vector<std::uint8_t> images(300 * 100);
    file.read_images(kTrain, 0, 300, images.data());
    return std::pair(images, file.read_labels(kTrain));
  };
  EXPECT_EQ(read("a.h5"), read("b.h5"));
  EXPECT_NE(read("a.h5").first, read("c.h5").first);
  const auto info = DatasetFile::open(dir.file("a.h5")).info();
  EXPECT_EQ(info.shape(), (ImageShape{1, 10, 10}));
  EXPECT_NEAR(info.mean[0], 128.0 / 255.0, 0.01);
  EXPECT_NEAR(info.std[0], 32.0 / 255.0, 0.01);
}

// Nearest class mean (estimated on train) classifies test samples: the learnable toy must be
// learnable and the random-label toy must not be.
double nearest_mean_accuracy(const std::string& path) {
  const auto file = DatasetFile::open(path);
  const auto& info = file.info();
  const std::size_t features = info.shape().pixels();
  const auto classes = static_cast<std::size_t>(info.num_classes);
  auto load = [&](std::string_view split) {
    const auto count = info.split(split).count;
    std::vector<std::uint8_t> images(count * features);
    file.read_images(split, 0, count, images.data());
    return std::pair(images, file.read_labels(split));
  };
  const auto [train_images, train_labels] = load(kTrain);
  std::vector<double> means(classes * features, 0.0);
  std::vector<double> counts(classes, 0.0);
  for (std::size_t i = 0; i < train_labels.size(); ++i) {
    const auto c = static_cast<std::size_t>(train_labels[i]);
    counts[c] += 1;
    for (std::size_t f = 0; f < features; ++f)
      means[c * features + f] += train_images[i * features + f];
  }
  for (std::size_t c = 0; c < classes; ++c) {
    for (std::size_t f = 0; f < features; ++f) means[c * features + f] /= std::max(1.0, counts[c]);
  }
  const auto [test_images, test_labels] = load(kTest);
  int correct = 0;
  for (std::size_t i = 0; i < test_labels.size(); ++i) {
    std::size_t best = 0;
    double best_distance = 1e300;
    for (std::size_t c = 0; c < classes; ++c) {
      double distance = 0;
      for (std::size_t f = 0; f < features; ++f) {
        const double d = test_images[i * features + f] - means[c * features + f];
        distance += d * d;
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    correct += static_cast<int>(best) == test_labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test_labels.size());
}

TEST(Synth, LearnableToyIsLearnableRandomToyIsNot) {
  test::TempDir dir;
  ToySynthOptions options;
  options.train = 2000;
  options.test = 500;
  write_synth_toy(dir.file("random.h5"), options, 1);
  options.learnable = true;
  write_synth_toy(dir.file("learnable.h5"), options, 1);
  EXPECT_GT(nearest_mean_accuracy(dir.file("learnable.h5")), 0.9);
  EXPECT_LT(nearest_mean_accuracy(dir.file("random.h5")), 0.2);
}

TEST(Synth, RandomImagesHaveTheRequestedShapeAndClasses) {
  test::TempDir dir;
  ImagesSynthOptions options;
  options.shape = {3, 8, 5};
  options.classes = 7;
  options.train = 40;
  options.test = 0;
  write_synth_images(dir.file("img.h5"), options, 1);
  const auto report = verify(dir.file("img.h5"));
  ASSERT_TRUE(report.ok()) << report.problems.front();
  EXPECT_EQ(report.info.shape(), (ImageShape{3, 8, 5}));
  EXPECT_EQ(report.info.num_classes, 7);
  EXPECT_EQ(report.info.split(kTest).count, 0u);
  EXPECT_NEAR(report.info.mean[1], 0.5, 0.05);
}

}  // namespace
}  // namespace mbkit::data
