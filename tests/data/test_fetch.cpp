// fetch_dataset in-process on small generated files (the download path is exercised for real,
// against a loopback HTTP server, by tests/e2e/test_fetch_http.py).
#include <gtest/gtest.h>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/data/fetch.hpp"
#include "mbkit/util/digest.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

// Writes a tiny MNIST-format dataset (gzip IDX files under their published names) and an
// md5sum list for it; returns the list's path.
std::string write_tiny_mnist(const test::TempDir& dir, int train = 12, int test = 4) {
  auto images = [](int count, int salt) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(count) * 28 * 28);
    for (std::size_t i = 0; i < pixels.size(); ++i)
      pixels[i] = static_cast<std::uint8_t>(i * 31 + salt);
    return test::make_idx({static_cast<std::uint32_t>(count), 28, 28}, pixels);
  };
  auto labels = [](int count) {
    std::vector<std::uint8_t> values(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i)
      values[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 10);
    return test::make_idx({static_cast<std::uint32_t>(count)}, values);
  };
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> files = {
      {"train-images-idx3-ubyte.gz", test::gzip(images(train, 1))},
      {"train-labels-idx1-ubyte.gz", test::gzip(labels(train))},
      {"t10k-images-idx3-ubyte.gz", test::gzip(images(test, 2))},
      {"t10k-labels-idx1-ubyte.gz", test::gzip(labels(test))}};
  fs::make_directories(dir.file("src"));
  std::string list;
  for (const auto& [name, bytes] : files) {
    test::write_file(dir.file("src/" + name), bytes);
    list += md5_hex(bytes) + "  " + name + "\n";
  }
  test::write_text(dir.file("sums.md5"), list);
  return dir.file("sums.md5");
}

TEST(ParseChecksumList, Md5AndSha256Lines) {
  const auto digests = parse_checksum_list(
      "# comment\n"
      "f68b3c2dcbeaaa9fbdd348bbdeb94873  train-images-idx3-ubyte.gz\n"
      "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855 *dir/empty.bin\n\n",
      "sums");
  EXPECT_EQ(digests.at("train-images-idx3-ubyte.gz"), "f68b3c2dcbeaaa9fbdd348bbdeb94873");
  EXPECT_EQ(digests.at("empty.bin"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_MBKIT_ERROR(parse_checksum_list("xyz file\n", "sums"), ExitCode::kBadData,
                     "sums: line 1 is not");
}

TEST(Fetch, FromLocalFilesWithAChecksumList) {
  test::TempDir dir;
  FetchOptions options;
  options.name = "mnist";
  options.from = dir.file("src");
  options.checksums_file = write_tiny_mnist(dir);
  options.output = dir.file("mnist.h5");
  const auto report = fetch_dataset(options);
  EXPECT_FALSE(report.kept_existing);
  EXPECT_EQ(report.info.name, "mnist");
  EXPECT_EQ(report.info.split(kTrain).count, 12u);
  EXPECT_EQ(report.info.split(kTest).count, 4u);
  EXPECT_EQ(report.info.class_names.size(), 10u);
  ASSERT_EQ(report.info.source_files.size(), 4u);
  EXPECT_EQ(report.info.source_files[0].sha256,
            digest_file(dir.file("src/train-images-idx3-ubyte.gz")).sha256);
  EXPECT_TRUE(verify(options.output).ok());

  // A second fetch keeps the valid output; --force rebuilds it.
  EXPECT_TRUE(fetch_dataset(options).kept_existing);
  options.force = true;
  EXPECT_FALSE(fetch_dataset(options).kept_existing);
  for (const auto& name : dir.entries()) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}

TEST(Fetch, PublishedChecksumsAreEnforced) {
  test::TempDir dir;
  write_tiny_mnist(dir);
  FetchOptions options;
  options.name = "mnist";
  options.from = dir.file("src");
  options.output = dir.file("mnist.h5");
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kBadData, "checksum mismatch: md5 ");
  EXPECT_FALSE(fs::exists(options.output));
  options.no_checksum = true;  // accepted, with a warning
  EXPECT_EQ(fetch_dataset(options).info.split(kTrain).count, 12u);
}

TEST(Fetch, ExistingUnrelatedOutputIsNotReplacedWithoutForce) {
  test::TempDir dir;
  FetchOptions options;
  options.name = "mnist";
  options.from = dir.file("src");
  options.checksums_file = write_tiny_mnist(dir);
  options.output = dir.file("precious.h5");
  test::write_text(options.output, "my thesis");
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kUsage,
                     "exists and is not a mnist dataset; use --force");
  EXPECT_EQ(fs::read_text_file(options.output), "my thesis");
}

TEST(Fetch, OptionErrors) {
  test::TempDir dir;
  FetchOptions options;
  options.name = "imagenet";
  options.output = dir.file("x.h5");
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kUsage,
                     "unknown dataset 'imagenet' (known: mnist, fashion-mnist, cifar10, cifar100)");
  options.name = "mnist";
  options.from = dir.path();
  options.mirror = "http://example.invalid/";
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kUsage, "cannot be used together");
  options.mirror.clear();
  options.from = dir.file("absent");
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kBadData, "no such file or directory");
  options.from = dir.path();
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kBadData,
                     "train-images-idx3-ubyte.gz not found");
  options.output = dir.file("missing-dir/x.h5");
  EXPECT_MBKIT_ERROR(fetch_dataset(options), ExitCode::kFailure, "does not exist");
}

}  // namespace
}  // namespace mbkit::data
