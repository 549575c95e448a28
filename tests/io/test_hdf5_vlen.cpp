// Variable-length strings of older files: read when the global heap holding them is intact,
// refused with a data error (before HDF5 copies anything) when it is damaged. HDF5 1.10 trusts
// the heap's sizes, which no checksum protects: fuzzed files overran its buffers (H5HG_read).
#include <gtest/gtest.h>

#include <cstring>

#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/fs.hpp"
#include "test_helpers.hpp"

namespace mbkit::io {
namespace {

hid_t variable_string_type() {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return type;
}

// A file as older mbkit (and h5py) wrote them: default HDF5 format, variable-length strings.
void write_old_file(const std::string& path) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t type = variable_string_type();
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t format = H5Acreate2(file, "format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
  const char* text = "mbkit-checkpoint";
  H5Awrite(format, type, &text);
  H5Aclose(format);
  const hsize_t three = 3;
  const hid_t row = H5Screate_simple(1, &three, nullptr);
  const char* names[3] = {"conv1.weight", "", "fc.bias"};
  const hid_t array = H5Acreate2(file, "names", type, row, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(array, type, names);
  H5Aclose(array);
  const hid_t dataset =
      H5Dcreate2(file, "labels", type, row, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const char* labels[3] = {"cat", "dog", "a longer label"};
  H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
  H5Dclose(dataset);
  H5Sclose(row);
  H5Sclose(scalar);
  H5Tclose(type);
  H5Fclose(file);
}

// The offset of the global heap object holding `text` (its 16-byte header: index, reference
// count, reserved, size), found by walking the file's one heap collection.
std::size_t heap_object(const std::vector<std::uint8_t>& bytes, const std::string& text) {
  const std::string image(bytes.begin(), bytes.end());
  const std::size_t collection = image.find("GCOL");
  EXPECT_NE(collection, std::string::npos);
  std::uint64_t size = 0;
  std::memcpy(&size, image.data() + collection + 8, 8);
  for (std::size_t at = collection + 16; at + 16 <= collection + size;) {
    std::uint16_t index = 0;
    std::uint64_t length = 0;
    std::memcpy(&index, image.data() + at, 2);
    std::memcpy(&length, image.data() + at + 8, 8);
    if (index == 0) break;
    if (image.compare(at + 16, length, text) == 0 && length == text.size()) return at;
    at += 16 + (length + 7) / 8 * 8;
  }
  ADD_FAILURE() << "no heap object holds '" << text << "'";
  return 0;
}

TEST(Hdf5VariableStrings, OlderFilesStringsRead) {
  test::TempDir dir;
  const std::string path = dir.file("old.h5");
  write_old_file(path);
  const File file = File::open(path);
  EXPECT_EQ(file.string_attribute("format"), "mbkit-checkpoint");
  EXPECT_EQ(file.string_array_attribute("names"),
            (std::vector<std::string>{"conv1.weight", "", "fc.bias"}));
  EXPECT_EQ(file.open_dataset("labels").read_strings(),
            (std::vector<std::string>{"cat", "dog", "a longer label"}));
}

TEST(Hdf5VariableStrings, ADamagedGlobalHeapIsRefusedBeforeHdf5ReadsIt) {
  test::TempDir dir;
  const std::string path = dir.file("old.h5");
  write_old_file(path);
  const std::vector<std::uint8_t> original = fs::read_file(path);
  const std::size_t format = heap_object(original, "mbkit-checkpoint");
  const std::size_t label = heap_object(original, "a longer label");
  const auto damage = [&](std::size_t at, std::size_t field, std::uint64_t value,
                          std::size_t width) {
    std::vector<std::uint8_t> bytes = original;
    std::memcpy(bytes.data() + at + field, &value, width);
    test::write_file(path, bytes);
  };
  // A size far past the collection: what the fuzzed checkpoints held (HDF5 copied 60 GB).
  damage(format, 8, 0x0f00000010, 8);
  EXPECT_MBKIT_ERROR(File::open(path).string_attribute("format"), ExitCode::kBadData,
                     "attribute 'format': a global heap object overruns its collection");
  // A size that is not the string's, the object still in its place.
  damage(format, 8, 15, 8);
  EXPECT_MBKIT_ERROR(File::open(path).string_attribute("format"), ExitCode::kBadData,
                     "a string of 16 bytes is stored as 15 bytes in the global heap");
  // An index the collection does not hold: HDF5 would read past its table of objects.
  damage(format, 0, 999, 2);
  EXPECT_MBKIT_ERROR(File::open(path).string_attribute("format"), ExitCode::kBadData,
                     "refers to object 1 missing from its global heap");
  // The collection's own size.
  const std::size_t collection = std::string(original.begin(), original.end()).find("GCOL");
  damage(collection, 8, 1u << 20, 8);
  EXPECT_MBKIT_ERROR(File::open(path).string_array_attribute("names"), ExitCode::kBadData,
                     "its global heap declares 1048576 bytes");
  // Datasets are checked the same way; the rest of the heap stays readable.
  damage(label, 8, 13, 8);
  const File file = File::open(path);
  EXPECT_EQ(file.string_attribute("format"), "mbkit-checkpoint");
  EXPECT_MBKIT_ERROR(file.open_dataset("labels").read_strings(), ExitCode::kBadData,
                     "labels: a string of 14 bytes is stored as 13 bytes");
}

TEST(Hdf5VariableStrings, AreRefusedInFilesWrittenWithFixedLengthOnes) {
  test::TempDir dir;
  const std::string path = dir.file("new.h5");
  {
    File file = File::create(path);
    file.set_attribute("format", "mbkit-dataset");  // fixed-length, as every string we write
    const hid_t type = variable_string_type();
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t name = H5Acreate2(file.id(), "name", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = "fmnist";
    H5Awrite(name, type, &text);
    H5Aclose(name);
    H5Sclose(scalar);
    H5Tclose(type);
    file.close();
  }
  const File file = File::open(path);
  EXPECT_EQ(file.string_attribute("format"), "mbkit-dataset");
  EXPECT_MBKIT_ERROR(file.string_attribute("name"), ExitCode::kBadData,
                     "attribute 'name': a variable-length string in a file written with "
                     "fixed-length ones");
}

}  // namespace
}  // namespace mbkit::io
