// IDX and CIFAR parsers, gzip and tar readers: good inputs and every kind of damage.
#include <gtest/gtest.h>

#include "mbkit/data/archive.hpp"
#include "mbkit/data/parsers.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::data {
namespace {

std::vector<std::uint8_t> iota_bytes(std::size_t count, int step = 1) {
  std::vector<std::uint8_t> bytes(count);
  for (std::size_t i = 0; i < count; ++i) bytes[i] = static_cast<std::uint8_t>(i * step);
  return bytes;
}

TEST(Idx, ParsesImagesAndLabels) {
  const auto pixels = iota_bytes(3 * 2 * 4);
  const auto images = parse_idx(test::make_idx({3, 2, 4}, pixels), "img");
  EXPECT_EQ(images.dims, (std::vector<std::uint32_t>{3, 2, 4}));
  EXPECT_EQ(images.data, pixels);
  const auto labels = parse_idx(test::make_idx({3}, {2, 0, 1}), "lbl");
  const auto split = combine_idx(images, "img", labels, "lbl", 3);
  EXPECT_EQ(split.shape, (ImageShape{1, 2, 4}));
  EXPECT_EQ(split.labels, (std::vector<std::int32_t>{2, 0, 1}));
  EXPECT_EQ(split.images, pixels);
}

TEST(Idx, FourDimensionalImagesKeepTheirChannels) {
  const auto images = parse_idx(test::make_idx({2, 3, 2, 2}, iota_bytes(24)), "img");
  const auto labels = parse_idx(test::make_idx({2}, {0, 1}), "lbl");
  EXPECT_EQ(combine_idx(images, "img", labels, "lbl", 2).shape, (ImageShape{3, 2, 2}));
}

TEST(Idx, WrongMagicNumber) {
  auto bytes = test::make_idx({2}, {0, 1});
  bytes[0] = 0x1f;
  EXPECT_MBKIT_ERROR(parse_idx(bytes, "train-labels"), ExitCode::kBadData,
                     "train-labels: wrong IDX magic number 0x1f000801");
}

TEST(Idx, AMagicNumberOfTheWrongRoleIsNamedWithTheExpectedOne) {
  // An image file given as labels once read as "truncated": its magic number is the fault.
  const auto images = test::make_idx({2, 2, 2}, iota_bytes(8));
  EXPECT_MBKIT_ERROR(parse_idx(images, "lbl", IdxRole::kLabels), ExitCode::kBadData,
                     "lbl: wrong IDX magic number 0x00000803 (3 dimensions; expected 0x00000801, a "
                     "label file)");
  const auto labels = test::make_idx({2}, {0, 1});
  EXPECT_MBKIT_ERROR(parse_idx(labels, "img", IdxRole::kImages), ExitCode::kBadData,
                     "img: wrong IDX magic number 0x00000801 (1 dimension; expected 0x00000803 or "
                     "0x00000804, an image file)");
  EXPECT_MBKIT_ERROR(parse_idx({}, "empty", IdxRole::kLabels), ExitCode::kBadData,
                     "empty: the file is empty, not an IDX file");
  EXPECT_EQ(parse_idx(labels, "lbl", IdxRole::kLabels).dims, (std::vector<std::uint32_t>{2}));
}

TEST(Idx, HeaderAloneGivesTheDeclaredSize) {
  const auto bytes = test::make_idx({3, 2, 4}, iota_bytes(24));
  const IdxHeader header =
      parse_idx_header(std::span(bytes).first(kLongestIdxHeader), "img", IdxRole::kImages);
  EXPECT_EQ(header.dims, (std::vector<std::uint32_t>{3, 2, 4}));
  EXPECT_EQ(header.file_bytes(), bytes.size());
  EXPECT_EQ(describe_idx(header, IdxRole::kImages), "3 images of 2x4");
}

TEST(Idx, UnsupportedElementType) {
  auto bytes = test::make_idx({2}, {0, 1});
  bytes[2] = 0x0d;  // float
  EXPECT_MBKIT_ERROR(parse_idx(bytes, "f"), ExitCode::kBadData,
                     "element type 0x0d is not supported");
}

TEST(Idx, TruncatedAndTrailingData) {
  auto bytes = test::make_idx({4, 2, 2}, iota_bytes(16));
  bytes.resize(bytes.size() - 3);
  EXPECT_MBKIT_ERROR(parse_idx(bytes, "img"), ExitCode::kBadData,
                     "truncated: the header announces 16 bytes of data but 13 are present");
  auto longer = test::make_idx({2}, {0, 1});
  longer.push_back(9);
  EXPECT_MBKIT_ERROR(parse_idx(longer, "lbl"), ExitCode::kBadData, "1 unexpected bytes");
  EXPECT_MBKIT_ERROR(parse_idx({0, 0}, "tiny"), ExitCode::kBadData, "too short");
}

TEST(Idx, DimensionsWhoseProductWrapsAroundAreRefused) {
  // 2^20 * 2^20 * 2^24 is 2^64: once it wrapped to 0 and matched an empty body (found by
  // fuzz_idx).
  EXPECT_MBKIT_ERROR(parse_idx(test::make_idx({1u << 20, 1u << 20, 1u << 24}, {}), "img"),
                     ExitCode::kBadData, "img: IDX dimensions are absurd");
}

TEST(Idx, ImageDimensionsOutsideAnIntAreRefused) {
  // No images, so no bytes, but a height that does not fit the shape's int.
  const auto images = parse_idx(test::make_idx({0, 0x80000001u, 1}, {}), "img");
  const auto labels = parse_idx(test::make_idx({0}, {}), "lbl");
  EXPECT_MBKIT_ERROR(combine_idx(images, "img", labels, "lbl", 10), ExitCode::kBadData,
                     "img: image dimension 1 is 2147483649 (expected 1 to 65536)");
  const auto flat = parse_idx(test::make_idx({1, 0, 4}, {}), "flat");
  EXPECT_MBKIT_ERROR(combine_idx(flat, "flat", parse_idx(test::make_idx({1}, {0}), "l"), "l", 10),
                     ExitCode::kBadData, "flat: image dimension 1 is 0");
}

TEST(Idx, ImageLabelCountMismatch) {
  const auto images = parse_idx(test::make_idx({3, 2, 2}, iota_bytes(12)), "images.idx");
  const auto labels = parse_idx(test::make_idx({2}, {0, 1}), "labels.idx");
  EXPECT_MBKIT_ERROR(combine_idx(images, "images.idx", labels, "labels.idx", 10),
                     ExitCode::kBadData, "images.idx has 3 images but labels.idx has 2 labels");
}

TEST(Idx, LabelOutOfRange) {
  const auto images = parse_idx(test::make_idx({2, 2, 2}, iota_bytes(8)), "img");
  const auto labels = parse_idx(test::make_idx({2}, {3, 12}), "lbl");
  EXPECT_MBKIT_ERROR(combine_idx(images, "img", labels, "lbl", 10), ExitCode::kBadData,
                     "lbl: label 12 at index 1 is outside [0, 10)");
}

std::vector<std::uint8_t> cifar_records(const std::vector<std::vector<std::uint8_t>>& labels) {
  std::vector<std::uint8_t> bytes;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    bytes.insert(bytes.end(), labels[i].begin(), labels[i].end());
    for (int p = 0; p < 3072; ++p) bytes.push_back(static_cast<std::uint8_t>(p + i));
  }
  return bytes;
}

TEST(Cifar, TenClassRecords) {
  const auto split = parse_cifar(cifar_records({{3}, {9}}), 1, 10, 0, "batch");
  EXPECT_EQ(split.shape, (ImageShape{3, 32, 32}));
  EXPECT_EQ(split.labels, (std::vector<std::int32_t>{3, 9}));
  EXPECT_TRUE(split.coarse_labels.empty());
  EXPECT_EQ(split.images[3072], 1);  // second record's first red pixel
  EXPECT_EQ(split.images[1024], 0);  // first record's first green pixel (p = 1024 wraps to 0)
}

TEST(Cifar, HundredClassRecordsCarryCoarseLabels) {
  const auto split = parse_cifar(cifar_records({{4, 77}, {19, 0}}), 2, 100, 20, "train.bin");
  EXPECT_EQ(split.labels, (std::vector<std::int32_t>{77, 0}));
  EXPECT_EQ(split.coarse_labels, (std::vector<std::int32_t>{4, 19}));
}

TEST(Cifar, DamagedRecords) {
  auto bytes = cifar_records({{1}, {2}});
  bytes.pop_back();
  EXPECT_MBKIT_ERROR(parse_cifar(bytes, 1, 10, 0, "data_batch_1.bin"), ExitCode::kBadData,
                     "is not a whole number of 3073-byte CIFAR records");
  EXPECT_MBKIT_ERROR(parse_cifar(cifar_records({{10}}), 1, 10, 0, "b"), ExitCode::kBadData,
                     "label 10 of record 0 is outside [0, 10)");
  EXPECT_MBKIT_ERROR(parse_cifar(cifar_records({{20, 1}}), 2, 100, 20, "b"), ExitCode::kBadData,
                     "coarse label 20");
}

TEST(ClassNames, BlankLinesIgnored) {
  EXPECT_EQ(parse_class_name_lines(test::bytes_of("airplane\nautomobile\n\n  bird \n\n")),
            (std::vector<std::string>{"airplane", "automobile", "bird"}));
}

TEST(Gzip, RoundTripAndConcatenatedMembers) {
  const auto data = iota_bytes(100000, 7);
  EXPECT_EQ(gunzip(test::gzip(data), "x.gz"), data);
  auto two = test::gzip({1, 2, 3});
  const auto second = test::gzip({4, 5});
  two.insert(two.end(), second.begin(), second.end());
  EXPECT_EQ(gunzip(two, "two.gz"), (std::vector<std::uint8_t>{1, 2, 3, 4, 5}));
}

TEST(Gzip, TruncatedCorruptAndNotGzip) {
  auto compressed = test::gzip(iota_bytes(50000, 3));
  auto truncated = compressed;
  truncated.resize(truncated.size() / 2);
  EXPECT_MBKIT_ERROR(gunzip(truncated, "t.gz"), ExitCode::kBadData, "t.gz: truncated gzip data");
  auto corrupt = compressed;
  corrupt[corrupt.size() - 6] ^= 0xff;  // inside the CRC-32 trailer
  EXPECT_MBKIT_ERROR(gunzip(corrupt, "c.gz"), ExitCode::kBadData, "c.gz: corrupt gzip data");
  EXPECT_MBKIT_ERROR(gunzip(test::bytes_of("plain text"), "p"), ExitCode::kBadData,
                     "p: not in gzip format");
  auto garbage = test::gzip({1});
  garbage.push_back(0);
  EXPECT_MBKIT_ERROR(gunzip(garbage, "g.gz"), ExitCode::kBadData, "garbage after the gzip data");
}

TEST(Gzip, PrefixInflatesOnlyTheStart) {
  const auto data = iota_bytes(100000, 7);
  auto compressed = test::gzip(data);
  compressed.resize(compressed.size() / 2);  // the rest is never reached
  EXPECT_EQ(gunzip_prefix(compressed, 20, "x.gz"),
            std::vector<std::uint8_t>(data.begin(), data.begin() + 20));
  EXPECT_EQ(gunzip_prefix(test::gzip({1, 2}), 20, "short.gz"), (std::vector<std::uint8_t>{1, 2}));
}

TEST(Gzip, ExactSizeRefusesMoreAndReturnsLess) {
  const auto data = iota_bytes(5000, 3);
  EXPECT_EQ(gunzip_exact(test::gzip(data), data.size(), "x.gz", "it"), data);
  EXPECT_MBKIT_ERROR(gunzip_exact(test::gzip(data), data.size() - 1, "x.gz", "its data"),
                     ExitCode::kBadData,
                     "x.gz: the gzip data hold more than the 4999 bytes of its data");
  EXPECT_EQ(gunzip_exact(test::gzip(data), data.size() + 10, "x.gz", "it").size(), data.size());
}

TEST(Tar, ReadsWantedMembersByBaseName) {
  test::TempDir dir;
  const std::string path = dir.file("archive.tar.gz");
  test::write_tar_gz(
      path, {{"top/a.bin", {1, 2}}, {"top/b.txt", test::bytes_of("hi")}, {"top/skip.bin", {9}}});
  const auto members = read_tar_members(path, {"a.bin", "b.txt", "absent"});
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members.at("a.bin"), (std::vector<std::uint8_t>{1, 2}));
  EXPECT_EQ(members.at("b.txt"), test::bytes_of("hi"));
}

TEST(Tar, TruncatedArchive) {
  test::TempDir dir;
  const std::string path = dir.file("archive.tar.gz");
  std::vector<std::uint8_t> big(200000);
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
  test::write_tar_gz(path, {{"data.bin", big}});
  auto bytes = fs::read_file(path);
  bytes.resize(bytes.size() / 2);
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(read_tar_members(path, {"data.bin"}), ExitCode::kBadData, "archive.tar.gz");
}

}  // namespace
}  // namespace mbkit::data
