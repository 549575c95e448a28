// The HDF5 layer: round trips, attributes of every kind, extendible columns, storage options,
// and clear errors for missing objects, non-HDF5 inputs and damaged chunks.
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

#include "mbkit/io/hdf5.hpp"
#include "test_helpers.hpp"

namespace mbkit::io {
namespace {

TEST(Hdf5, DatasetRoundTripWithRowsAndStorageOptions) {
  test::TempDir dir;
  const std::string path = dir.file("data.h5");
  std::vector<std::uint8_t> pixels(10 * 2 * 3 * 4);
  std::iota(pixels.begin(), pixels.end(), 0);
  {
    File file = File::create(path);
    Group group = file.create_group("train");
    StorageOptions storage;
    storage.chunk = {4, 2, 3, 4};
    storage.deflate_level = 4;
    storage.fletcher32 = true;
    Dataset images = group.create_dataset<std::uint8_t>("images", {10, 2, 3, 4}, storage);
    images.write_rows(0, 6, pixels.data());
    images.write_rows(6, 4, pixels.data() + 6 * 24);
    group.create_dataset<double>("weights", {3})
        .write(std::span<const double>(std::vector<double>{0.5, -1, 2}));
    file.close();
  }
  const File file = File::open(path);
  EXPECT_TRUE(file.has("train/images"));
  EXPECT_FALSE(file.has("train/missing/deeper"));
  const Dataset images = file.open_dataset("train/images");
  EXPECT_EQ(images.dims(), (std::vector<hsize_t>{10, 2, 3, 4}));
  EXPECT_EQ(images.chunk_dims(), (std::vector<hsize_t>{4, 2, 3, 4}));
  EXPECT_EQ(images.row_size(), 24u);
  const auto filters = images.filters();
  EXPECT_NE(std::find(filters.begin(), filters.end(), H5Z_FILTER_DEFLATE), filters.end());
  EXPECT_NE(std::find(filters.begin(), filters.end(), H5Z_FILTER_FLETCHER32), filters.end());
  EXPECT_EQ(images.read<std::uint8_t>(), pixels);
  std::vector<std::uint8_t> rows(3 * 24);
  images.read_rows(5, 3, rows.data());
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), pixels.begin() + 5 * 24));
  EXPECT_EQ(file.open_dataset("train/weights").read<double>(), (std::vector<double>{0.5, -1, 2}));
  EXPECT_MBKIT_ERROR(images.read_rows(8, 3, rows.data()), ExitCode::kBadData, "rows [8, 11)");
  EXPECT_EQ(file.member_names(), std::vector<std::string>{"train"});
}

TEST(Hdf5, AttributesOfEveryKind) {
  test::TempDir dir;
  const std::string path = dir.file("attrs.h5");
  {
    File file = File::create(path);
    file.set_attribute("text", "héllo");
    file.set_attribute("count", 7);
    file.set_attribute("rate", 0.25);
    file.set_attribute("ints", std::vector<std::int64_t>{1, -2, 3});
    file.set_attribute("doubles", std::vector<double>{0.1, 0.2});
    file.set_attribute("names", std::vector<std::string>{"a", "", "long name"});
    file.set_attribute("count", 8);  // overwrite
    file.close();
  }
  const File file = File::open(path);
  EXPECT_EQ(file.string_attribute("text"), "héllo");
  EXPECT_EQ(file.int_attribute("count"), 8);
  EXPECT_DOUBLE_EQ(file.double_attribute("rate"), 0.25);
  EXPECT_DOUBLE_EQ(file.double_attribute("count"), 8.0);  // integers read as numbers too
  EXPECT_EQ(file.int_array_attribute("ints"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(file.double_array_attribute("doubles"), (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(file.string_array_attribute("names"), (std::vector<std::string>{"a", "", "long name"}));
  EXPECT_EQ(file.attribute_names(),
            (std::vector<std::string>{"count", "doubles", "ints", "names", "rate", "text"}));
  EXPECT_MBKIT_ERROR(file.int_attribute("absent"), ExitCode::kBadData,
                     "missing attribute 'absent'");
  EXPECT_MBKIT_ERROR(file.int_attribute("text"), ExitCode::kBadData, "is not an integer");
  EXPECT_MBKIT_ERROR(file.string_attribute("names"), ExitCode::kBadData, "expected one");
}

TEST(Hdf5, FixedLengthStringsWrittenByOtherToolsAreRead) {
  test::TempDir dir;
  const std::string path = dir.file("fixed.h5");
  {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 8);
    const hsize_t count = 2;
    const hid_t space = H5Screate_simple(1, &count, nullptr);
    const hid_t attribute = H5Acreate2(file, "labels", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char data[16] = {'c', 'a', 't', 0, 0, 0, 0, 0, 'e', 'i', 'g', 'h', 't', 'c', 'h', 'r'};
    H5Awrite(attribute, type, data);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
  }
  EXPECT_EQ(File::open(path).string_array_attribute("labels"),
            (std::vector<std::string>{"cat", "eightchr"}));
}

TEST(Hdf5, ExtendibleColumnAppendsAcrossReopen) {
  test::TempDir dir;
  const std::string path = dir.file("log.h5");
  {
    File file = File::create(path);
    Group steps = file.create_group("steps");
    auto loss = Column<float>::create(steps, "loss", 4);
    for (int i = 0; i < 10; ++i) loss.append(static_cast<float>(i));
    EXPECT_EQ(loss.size(), 10u);
    loss.flush();
    loss.append(std::vector<float>{10, 11});
    loss.flush();
    file.close();
  }
  {
    File file = File::open(path, File::Mode::kReadWrite);
    Group steps = file.open_group("steps");
    auto loss = Column<float>::open(steps, "loss");
    EXPECT_EQ(loss.size(), 12u);
    loss.append(12.0f);
    loss.flush();
    file.close();
  }
  const auto values = File::open(path).open_dataset("steps/loss").read<float>();
  ASSERT_EQ(values.size(), 13u);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], static_cast<float>(i));
  EXPECT_EQ(File::open(path).open_dataset("steps/loss").max_dims()[0], H5S_UNLIMITED);
}

TEST(Hdf5, StringDatasets) {
  test::TempDir dir;
  const std::string path = dir.file("names.h5");
  {
    File file = File::create(path);
    file.create_string_dataset("class_names", {"T-shirt/top", "Ankle boot"});
    file.close();
  }
  EXPECT_EQ(File::open(path).open_dataset("class_names").read_strings(),
            (std::vector<std::string>{"T-shirt/top", "Ankle boot"}));
}

TEST(Hdf5, OpeningWhatIsNotHdf5) {
  test::TempDir dir;
  test::write_text(dir.file("notes.txt"), "not hdf5 at all");
  EXPECT_MBKIT_ERROR(File::open(dir.file("notes.txt")), ExitCode::kBadData, "not an HDF5 file");
  EXPECT_MBKIT_ERROR(File::open(dir.file("absent.h5")), ExitCode::kBadData, "no such file");
  EXPECT_MBKIT_ERROR(File::open(dir.path()), ExitCode::kBadData, "is a directory");
  EXPECT_MBKIT_ERROR(File::create(dir.file("no/such/dir.h5")), ExitCode::kFailure, "cannot create");
}

TEST(Hdf5, MissingObjectsAreNamed) {
  test::TempDir dir;
  const std::string path = dir.file("empty.h5");
  File::create(path).close();
  const File file = File::open(path);
  EXPECT_MBKIT_ERROR(file.open_dataset("train/images"), ExitCode::kBadData,
                     "missing dataset 'train/images'");
  EXPECT_MBKIT_ERROR(file.open_group("test"), ExitCode::kBadData, "missing group 'test'");
}

TEST(Hdf5, DamagedChunkIsDetectedByItsChecksum) {
  test::TempDir dir;
  const std::string path = dir.file("damaged.h5");
  std::vector<std::uint8_t> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint8_t>(i * 7);
  haddr_t address = 0;
  {
    File file = File::create(path);
    StorageOptions storage;
    storage.chunk = {1024};
    storage.fletcher32 = true;  // no compression: a flipped byte changes only the checksum
    Dataset data = file.create_dataset<std::uint8_t>("values", {4096}, storage);
    data.write(std::span<const std::uint8_t>(values));
    file.flush();
    hsize_t offset = 0, size = 0;
    unsigned mask = 0;
    const hid_t space = H5Dget_space(data.id());
    ASSERT_GE(H5Dget_chunk_info(data.id(), space, 1, &offset, &mask, &address, &size), 0);
    H5Sclose(space);
    file.close();
  }
  {
    std::fstream raw(path, std::ios::in | std::ios::out | std::ios::binary);
    raw.seekg(static_cast<std::streamoff>(address + 100));
    char byte = 0;
    raw.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0xff);
    raw.seekp(static_cast<std::streamoff>(address + 100));
    raw.write(&byte, 1);
  }
  const File file = File::open(path);
  EXPECT_MBKIT_ERROR(file.open_dataset("values").read<std::uint8_t>(), ExitCode::kBadData,
                     "values: cannot read rows [0, 4096)");
}

}  // namespace
}  // namespace mbkit::io
