// Files that protect themselves: checksummed metadata, a Fletcher-32 checksum on every
// dataset, fixed-length strings; readers that check types, ranks and extents before reading,
// refuse links and FIFOs, and give a data error (not a hang) on a damaged file.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::io {
namespace {

bool has_fletcher32(const Dataset& dataset) {
  const auto filters = dataset.filters();
  return std::find(filters.begin(), filters.end(), H5Z_FILTER_FLETCHER32) != filters.end();
}

TEST(Hdf5Integrity, WrittenFilesChecksumMetadataAndEveryDataset) {
  test::TempDir dir;
  const std::string path = dir.file("sums.h5");
  {
    File file = File::create(path);
    file.create_dataset<double>("plain", {5, 3});  // no storage options given
    file.create_string_dataset("names", {"a", "bcd"});
    Group group = file.create_group("g");
    Column<double>::create(group, "column").flush();
    file.set_attribute("text", "value");
    file.close();
  }
  const File file = File::open(path);
  H5F_info2_t info{};
  ASSERT_GE(H5Fget_info2(file.id(), &info), 0);
  // Superblock version 2 and later carry checksums (HDF5 1.8 format and later); version 3 is
  // 1.10's, which Debian 12's HDF5 still reads.
  EXPECT_GE(info.super.version, 2u);
  EXPECT_LE(info.super.version, 3u);
  EXPECT_TRUE(has_fletcher32(file.open_dataset("plain")));
  EXPECT_TRUE(has_fletcher32(file.open_dataset("names")));
  EXPECT_TRUE(has_fletcher32(file.open_dataset("g/column")));

  // Strings are fixed-length: no global heap, whose damaged records crashed HDF5's reader.
  const hid_t attribute = H5Aopen(file.id(), "text", H5P_DEFAULT);
  const hid_t type = H5Aget_type(attribute);
  EXPECT_EQ(H5Tis_variable_str(type), 0);
  H5Tclose(type);
  H5Aclose(attribute);
  EXPECT_EQ(file.string_attribute("text"), "value");
  EXPECT_EQ(file.open_dataset("names").read_strings(), (std::vector<std::string>{"a", "bcd"}));
}

TEST(Hdf5Integrity, VariableLengthStringsOfOlderFilesStillRead) {
  test::TempDir dir;
  const std::string path = dir.file("old.h5");
  {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attribute = H5Acreate2(file, "format", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = "mbkit-dataset";
    H5Awrite(attribute, type, &text);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
  }
  EXPECT_EQ(File::open(path).string_attribute("format"), "mbkit-dataset");
}

TEST(Hdf5Integrity, AttributesOfTheWrongShapeOrTypeAreRefusedBeforeReading) {
  test::TempDir dir;
  const std::string path = dir.file("shapes.h5");
  {
    File file = File::create(path);
    file.set_attribute("number", 3.5);
    file.set_attribute("text", "x");
    const hsize_t dims[2] = {2, 2};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t attribute =
        H5Acreate2(file.id(), "matrix", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    const std::int64_t values[4] = {1, 2, 3, 4};
    H5Awrite(attribute, H5T_NATIVE_INT64, values);
    H5Aclose(attribute);
    H5Sclose(space);
    file.close();
  }
  const File file = File::open(path);
  EXPECT_MBKIT_ERROR(file.int_array_attribute("matrix"), ExitCode::kBadData,
                     "attribute 'matrix' has 2 dimensions");
  EXPECT_MBKIT_ERROR(file.int_attribute("number"), ExitCode::kBadData,
                     "attribute 'number' is not an integer");
  EXPECT_MBKIT_ERROR(file.string_attribute("number"), ExitCode::kBadData, "is not a string");
  EXPECT_MBKIT_ERROR(file.double_attribute("text"), ExitCode::kBadData, "is not a number");
  EXPECT_MBKIT_ERROR(file.open_dataset("number"), ExitCode::kBadData, "missing dataset");
}

TEST(Hdf5Integrity, DatasetsThatDoNotStoreWhatTheyDeclareAreRefused) {
  test::TempDir dir;
  const std::string path = dir.file("partial.h5");
  {
    File file = File::create(path);
    StorageOptions storage;
    storage.chunk = {4};
    Dataset data = file.create_dataset<std::int32_t>("labels", {16}, storage);
    const std::vector<std::int32_t> first(4, 7);
    data.write_rows(0, 4, first.data());  // 1 chunk of 4 stored
    file.create_dataset<double>("floats", {3})
        .write(std::span<const double>(std::vector<double>{1, 2, 3}));
    file.close();
  }
  const File file = File::open(path);
  EXPECT_MBKIT_ERROR(file.open_dataset("labels").read<std::int32_t>(), ExitCode::kBadData,
                     "labels: declares 4 chunks but stores 1");
  EXPECT_MBKIT_ERROR(file.open_dataset("floats").read<std::int32_t>(), ExitCode::kBadData,
                     "holds floating-point values where integers are expected");
  EXPECT_EQ(file.open_dataset("floats").read<double>(), (std::vector<double>{1, 2, 3}));
}

// An unfiltered chunk is stored whole: HDF5 1.10 copied a whole chunk out of a buffer the size
// the chunk index records, overrunning it when that is smaller (found by fuzz_dataset_file: a
// file whose filter pipeline message was damaged away from compressed chunks). The file is in
// the HDF5 1.8 format, as older mbkit wrote: its chunk index records each chunk's size.
TEST(Hdf5Integrity, AnUnfilteredChunkStoredShortIsRefusedBeforeHdf5ReadsIt) {
  test::TempDir dir;
  const std::string path = dir.file("short.h5");
  {
    const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(access, H5F_LIBVER_V18, H5F_LIBVER_V18);
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access);
    const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk = 4, extent = 8;
    H5Pset_chunk(creation, 1, &chunk);
    const hid_t space = H5Screate_simple(1, &extent, nullptr);
    const hid_t data =
        H5Dcreate2(file, "labels", H5T_STD_I32LE, space, H5P_DEFAULT, creation, H5P_DEFAULT);
    // The first chunk whole, the second as its raw bytes, 8 of the 16 it holds.
    const std::int32_t whole[4] = {1, 2, 3, 4}, half[2] = {5, 6};
    const hsize_t first[1] = {0}, second[1] = {4};
    ASSERT_GE(H5Dwrite_chunk(data, H5P_DEFAULT, 0, first, sizeof whole, whole), 0);
    ASSERT_GE(H5Dwrite_chunk(data, H5P_DEFAULT, 0, second, sizeof half, half), 0);
    H5Dclose(data);
    H5Sclose(space);
    H5Pclose(creation);
    H5Fclose(file);
    H5Pclose(access);
  }
  const File file = File::open(path);
  EXPECT_MBKIT_ERROR(file.open_dataset("labels").read<std::int32_t>(), ExitCode::kBadData,
                     "labels: a chunk of 16 bytes is stored in 8 bytes without a filter");
}

TEST(Hdf5Integrity, SoftAndExternalLinksAreRefusedAtOpen) {
  test::TempDir dir;
  const std::string soft = dir.file("soft.h5");
  const std::string external = dir.file("external.h5");
  {
    File file = File::create(soft);
    file.create_group("real").create_group("inner");
    ASSERT_GE(H5Lcreate_soft("/real", file.id(), "real/inner/loop", H5P_DEFAULT, H5P_DEFAULT), 0);
    file.close();
    File other = File::create(external);
    ASSERT_GE(
        H5Lcreate_external("soft.h5", "/real", other.id(), "outside", H5P_DEFAULT, H5P_DEFAULT), 0);
    other.close();
  }
  EXPECT_MBKIT_ERROR(File::open(soft), ExitCode::kBadData,
                     "soft.h5: 'real/inner/loop' is a soft link; mbkit files hold none");
  EXPECT_MBKIT_ERROR(File::open(external, File::Mode::kSwmrRead), ExitCode::kBadData,
                     "external.h5: 'outside' is an external link");
}

TEST(Hdf5Integrity, AFifoIsRefusedInsteadOfBlocking) {
  test::TempDir dir;
  const std::string path = dir.file("pipe.h5");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_MBKIT_ERROR(File::open(path), ExitCode::kBadData, "pipe.h5: not a regular file");
  EXPECT_MBKIT_ERROR(File::open(path, File::Mode::kSwmrRead), ExitCode::kBadData,
                     "not a regular file");
}

// Flips every byte of the file's first 2 KiB in turn (superblock, object headers): each open and
// read must end, in an error or in the original values.
TEST(Hdf5Integrity, DamagedMetadataIsAnErrorAtOnceEvenUnderSwmr) {
  test::TempDir dir;
  const std::string path = dir.file("log.h5");
  const std::vector<double> values = {1, 2, 3, 4, 5};
  {
    File file = File::create(path, File::Format::kLatest);
    auto column = Column<double>::create(file, "loss", 4);
    column.append(std::span<const double>(values));
    column.flush();
    file.close();
  }
  const std::vector<std::uint8_t> original = fs::read_file(path);
  const std::size_t limit = std::min<std::size_t>(original.size(), 2048);
  const auto start = std::chrono::steady_clock::now();
  int refused = 0;
  for (std::size_t i = 0; i < limit; i += 7) {
    std::vector<std::uint8_t> damaged = original;
    damaged[i] ^= 0x5a;
    test::write_file(path, damaged);
    try {
      const File file = File::open(path, File::Mode::kSwmrRead);
      EXPECT_EQ(file.open_dataset("loss").read<double>(), values) << "byte " << i;
    } catch (const Error&) {  // tools report it as damage (rethrow_as_damaged_file)
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  // HDF5's default SWMR retries (100, doubling sleeps) never ended on one such file.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace
}  // namespace mbkit::io
