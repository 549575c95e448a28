// Damaged attribute messages: HDF5 1.10.8 crashes releasing the half-built table of an object's
// attributes when one fails to decode (H5A__attr_release_table), so the readers decode each
// without that table (io::internal::decode_attributes); a damaged one is a data error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::io {
namespace {

// The byte of attribute `name`'s datatype message that holds its version (high nibble) and
// class (low nibble), in a file whose attribute messages are version 1 (the earliest format):
// version, reserved, name size, datatype size, dataspace size, then the name NUL padded to 8
// bytes and the datatype.
std::size_t datatype_byte(const std::vector<std::uint8_t>& bytes, const std::string& name) {
  const std::string stored = name + '\0';
  const auto found = std::search(bytes.begin(), bytes.end(), stored.begin(), stored.end());
  EXPECT_NE(found, bytes.end()) << name;
  const auto at = static_cast<std::size_t>(found - bytes.begin());
  EXPECT_GE(at, 8u);
  EXPECT_EQ(bytes[at - 8], 1) << "attribute message version";
  return at + (stored.size() + 7) / 8 * 8;
}

// A file as older mbkit and h5py write them (no checksums to catch the damage first) whose root
// holds attributes a0..a6, then a5's datatype given version 0, which no HDF5 wrote: "bad version
// number for datatype message". Decoding fails at the sixth attribute message, when HDF5's
// table (grown 1, 2, 4, 8) holds 5 and counts 8: the ASan build crashed releasing the 3 never
// set (ASan fills new memory with 0xbe).
std::string damaged_compact_file(const test::TempDir& dir) {
  const std::string path = dir.file("compact.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = H5Screate(H5S_SCALAR);
  for (int i = 0; i < 7; ++i) {
    const std::string name = "a" + std::to_string(i);
    const hid_t attribute =
        H5Acreate2(file, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    const std::int64_t value = i;
    H5Awrite(attribute, H5T_NATIVE_INT64, &value);
    H5Aclose(attribute);
  }
  H5Sclose(space);
  H5Fclose(file);
  std::vector<std::uint8_t> bytes = fs::read_file(path);
  const std::size_t at = datatype_byte(bytes, "a5");
  EXPECT_EQ(bytes[at], 0x10) << "version 1, class integer";
  bytes[at] = 0x00;
  test::write_file(path, bytes);
  return path;
}

TEST(Hdf5DamagedAttributes, ADamagedCompactAttributeIsADataErrorAtOpen) {
  test::TempDir dir;
  const std::string path = damaged_compact_file(dir);
  EXPECT_MBKIT_ERROR(File::open(path), ExitCode::kBadData,
                     "compact.h5: damaged file: H5Lvisit failed");
  EXPECT_MBKIT_ERROR(File::open(path, File::Mode::kSwmrRead), ExitCode::kBadData,
                     "bad version number for datatype message");
}

// The dataset file fuzz_dataset_file found (an attribute "mean" whose datatype is damaged).
TEST(Hdf5DamagedAttributes, TheFuzzFindingIsADataErrorAtOpen) {
  const std::string path =
      std::string(MBKIT_TEST_DATA_DIR) + "/fuzz/corpus/dataset_file/regress_h5aiterate_segv.h5";
  EXPECT_MBKIT_ERROR(File::open(path), ExitCode::kBadData,
                     "regress_h5aiterate_segv.h5: damaged file: H5Lvisit failed");
}

TEST(Hdf5DamagedAttributes, AFileOpenedForWritingIsCheckedAtOpenToo) {
  test::TempDir dir;
  const std::string path = damaged_compact_file(dir);
  EXPECT_MBKIT_ERROR(File::open(path, File::Mode::kReadWrite), ExitCode::kBadData,
                     "compact.h5: damaged file: H5Lvisit failed");
  EXPECT_MBKIT_ERROR(File::open(path, File::Mode::kSwmrWrite), ExitCode::kBadData, "compact.h5: ");
}

// Beyond 8 attributes (HDF5's default), the 1.8 format stores them densely: a fractal heap and
// an index of their names, whose every record open reads too.
TEST(Hdf5DamagedAttributes, DenseAttributesAreListedAndEachIsReadAtOpen) {
  test::TempDir dir;
  const std::string path = dir.file("dense.h5");
  std::vector<std::string> names;
  {
    File file = File::create(path);
    for (int i = 11; i >= 0; --i) {
      names.push_back("attribute_" + std::to_string(i));
      file.set_attribute(names.back(), static_cast<std::int64_t>(i));
    }
    file.close();
  }
  std::sort(names.begin(), names.end());
  {
    const File file = File::open(path);
    H5O_info_t info{};
    ASSERT_GE(H5Oget_info2(file.id(), &info, H5O_INFO_META_SIZE), 0);
    ASSERT_GT(info.meta_size.attr.heap_size, 0u) << "stored densely";
    EXPECT_EQ(file.attribute_names(), names);
    EXPECT_EQ(file.int_attribute("attribute_7"), 7);
  }
  // The heap's blocks carry checksums in this format: a flipped byte of an attribute's
  // name fails at open although no lookup of another name would read its block.
  std::vector<std::uint8_t> bytes = fs::read_file(path);
  const std::string name = "attribute_5";
  const auto found = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(found, bytes.end());
  found[name.size() - 1] ^= 0x01;
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(File::open(path), ExitCode::kBadData, "dense.h5: damaged file");
}

}  // namespace
}  // namespace mbkit::io
