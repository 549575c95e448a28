// Dataset::check_complete (hdf5_storage.cpp): what HDF5 would read as other values without a
// word (a chunk missing from its index, a skipped filter, a type, layout or filter that mbkit
// does not write) is a data error naming the file and the dataset, before any value is read.
#include <gtest/gtest.h>

#include <algorithm>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::io {
namespace {

// A 1-D dataset of `count` int32 values made with `creation` (a dataset creation list that the
// test sets up) and the HDF5 file type `type`, holding 0, 1, 2, ...
void write_raw_dataset(const std::string& path, hid_t type, hid_t creation, hsize_t count) {
  File file = File::create(path);
  const hid_t space = H5Screate_simple(1, &count, nullptr);
  const hid_t dataset =
      H5Dcreate2(file.id(), "values", type, space, H5P_DEFAULT, creation, H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  std::vector<std::int32_t> values(count);
  for (hsize_t i = 0; i < count; ++i) values[i] = static_cast<std::int32_t>(i);
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(dataset);
  H5Sclose(space);
  file.close();
}

hid_t chunked_creation(hsize_t chunk) {
  const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(creation, 1, &chunk);
  return creation;
}

std::string read_error(const std::string& path) {
  try {
    (void)File::open(path).open_dataset("values").read<std::int32_t>();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kBadData) << error.what();
    return error.what();
  }
  return "(read without an error)";
}

// HDF5 reads the raw bytes of a chunk whose filter mask says Fletcher-32 was skipped, and
// checks nothing (eval_silent_filter_mask_ckpt.h5 read a bias of -4.8e31 so).
TEST(Hdf5Storage, AChunkStoredWithAFilterSkippedIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("mask.h5");
  {
    File file = File::create(path);
    StorageOptions storage;
    storage.chunk = {4};
    Dataset data = file.create_dataset<std::int32_t>("values", {4}, storage);
    const hsize_t offset[1] = {0};
    const std::int32_t raw[4] = {1, 2, 3, 4};
    ASSERT_GE(H5Dwrite_chunk(data.id(), H5P_DEFAULT, /*filter mask*/ 1, offset, sizeof raw, raw),
              0);
    file.close();
  }
  EXPECT_MBKIT_ERROR(File::open(path).open_dataset("values").read<std::int32_t>(),
                     ExitCode::kBadData,
                     "mask.h5:/values: the chunk at [0] is marked as stored without some of its "
                     "filters (mask 1)");
}

// An extendible column (a metric log's) whose extent reaches a chunk that is not stored read
// that chunk's rows as zeros.
TEST(Hdf5Storage, AnExtendibleDatasetMissingAChunkIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("column.h5");
  {
    File file = File::create(path);
    auto column = Column<double>::create(file, "loss", 4);
    column.append(std::span<const double>(std::vector<double>{1, 2, 3, 4}));
    column.flush();
    file.open_dataset("loss").set_extent({8});  // a second chunk declared, never written
    file.close();
  }
  EXPECT_MBKIT_ERROR(File::open(path).open_dataset("loss").read<double>(), ExitCode::kBadData,
                     "column.h5:/loss: declares 2 chunks but stores 1");
}

TEST(Hdf5Storage, TypesMbkitDoesNotWriteAreRefused) {
  test::TempDir dir;
  // 8 significant bits of a 32-bit integer: HDF5 reads 300 as 44.
  const hid_t narrow = H5Tcopy(H5T_STD_I32LE);
  H5Tset_precision(narrow, 8);
  const hid_t creation = chunked_creation(4);
  H5Pset_fletcher32(creation);
  write_raw_dataset(dir.file("narrow.h5"), narrow, creation, 4);
  EXPECT_NE(read_error(dir.file("narrow.h5"))
                .find("narrow.h5:/values: its values are of a type mbkit does not write"),
            std::string::npos);
  H5Tclose(narrow);
  // Big-endian: not what mbkit writes, so not what a file of mbkit's holds undamaged.
  write_raw_dataset(dir.file("big.h5"), H5T_STD_I32BE, creation, 4);
  EXPECT_NE(read_error(dir.file("big.h5")).find("of a type mbkit does not write"),
            std::string::npos);
  H5Pclose(creation);
}

TEST(Hdf5Storage, LayoutsAndFiltersMbkitDoesNotWriteAreRefused) {
  test::TempDir dir;
  {
    const hid_t creation = chunked_creation(4);
    H5Pset_fletcher32(creation);
    H5Pset_scaleoffset(creation, H5Z_SO_INT, 2);  // lossy: keeps 2 bits
    write_raw_dataset(dir.file("lossy.h5"), H5T_STD_I32LE, creation, 8);
    H5Pclose(creation);
  }
  EXPECT_NE(read_error(dir.file("lossy.h5"))
                .find("lossy.h5:/values: filtered by HDF5 filter 6, which mbkit does not write"),
            std::string::npos);
  {
    // Shuffle before Fletcher-32: the checksum would no longer cover the values read.
    const hid_t creation = chunked_creation(4);
    H5Pset_shuffle(creation);
    H5Pset_fletcher32(creation);
    write_raw_dataset(dir.file("order.h5"), H5T_STD_I32LE, creation, 8);
    H5Pclose(creation);
  }
  EXPECT_NE(read_error(dir.file("order.h5")).find("its filter pipeline is not one mbkit writes"),
            std::string::npos);
  {
    const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(creation, H5D_COMPACT);
    write_raw_dataset(dir.file("compact.h5"), H5T_STD_I32LE, creation, 4);
    H5Pclose(creation);
  }
  EXPECT_NE(read_error(dir.file("compact.h5")).find("stored in a layout mbkit does not write"),
            std::string::npos);
  {
    const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(creation, dir.file("outside.bin").c_str(), 0, 16);
    write_raw_dataset(dir.file("external.h5"), H5T_STD_I32LE, creation, 4);
    H5Pclose(creation);
  }
  EXPECT_NE(read_error(dir.file("external.h5")).find("its values are in external files"),
            std::string::npos);
}

// Two chunk index entries exchanged whole: each chunk still passes its own Fletcher-32 check,
// so only a checksum over the index sees it. Files are written in HDF5 1.10's format, which
// has one (1.8's version 1 B-trees have none: the values read exchanged, silently).
TEST(Hdf5Storage, ChunkIndexEntriesExchangedAreRefused) {
  test::TempDir dir;
  const std::string path = dir.file("swap.h5");
  haddr_t addresses[2] = {};
  {
    File file = File::create(path);
    StorageOptions storage;
    storage.chunk = {4};
    Dataset data = file.create_dataset<std::int32_t>("values", {8}, storage);
    data.write(std::span<const std::int32_t>(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    for (hsize_t i = 0; i < 2; ++i) {
      const hsize_t offset[1] = {4 * i};
      unsigned mask = 0;
      hsize_t size = 0;
      ASSERT_GE(H5Dget_chunk_info_by_coord(data.id(), offset, &mask, &addresses[i], &size), 0);
    }
    file.close();
  }
  auto bytes = fs::read_file(path);
  std::vector<std::size_t> places;
  for (const haddr_t address : addresses) {
    std::uint8_t pattern[8];
    for (int b = 0; b < 8; ++b) pattern[b] = static_cast<std::uint8_t>(address >> (8 * b));
    const auto found = std::search(bytes.begin(), bytes.end(), pattern, pattern + 8);
    ASSERT_NE(found, bytes.end());
    places.push_back(static_cast<std::size_t>(found - bytes.begin()));
  }
  for (int b = 0; b < 8; ++b) std::swap(bytes[places[0] + b], bytes[places[1] + b]);
  test::write_file(path, bytes);
  EXPECT_MBKIT_ERROR(File::open(path).open_dataset("values").read<std::int32_t>(),
                     ExitCode::kBadData, "swap.h5: damaged file");
}

TEST(Hdf5Storage, WhatMbkitWritesReadsBack) {
  test::TempDir dir;
  const std::string path = dir.file("good.h5");
  const std::vector<std::int64_t> values = {5, -3, 7, 9, 11, 13, 17};
  {
    File file = File::create(path);
    StorageOptions storage;
    storage.chunk = {3};
    storage.deflate_level = 4;
    storage.shuffle = true;
    file.create_dataset<std::int64_t>("values", {7}, storage).write(std::span(values));
    auto column = Column<double>::create(file, "column", 2);
    column.append(std::span<const double>(std::vector<double>{1, 2, 3}));
    column.flush();
    file.create_string_dataset("names", {"a", "bc"});
    file.close();
  }
  const File file = File::open(path);
  EXPECT_EQ(file.open_dataset("values").read<std::int64_t>(), values);
  EXPECT_EQ(file.open_dataset("column").read<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(file.open_dataset("names").read_strings(), (std::vector<std::string>{"a", "bc"}));
}

}  // namespace
}  // namespace mbkit::io
