#include "mbkit/io/hdf5.hpp"

#include <algorithm>
#include <cstring>

#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::io {

void quiet_hdf5_errors() {
  thread_local bool quiet = false;
  if (!quiet) {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // error stacks are per thread
    quiet = true;
  }
}

void rethrow_as_damaged_file(const std::string& path) {
  try {
    throw;
  } catch (const Error& error) {
    if (error.code() != ExitCode::kFailure) throw;
    data_error(cat(path, ": damaged file: ", error.what()));
  }
}

namespace {

Handle make_plist(hid_t plist_class) {
  return Handle(MBKIT_H5_CHECK(H5Pcreate(plist_class)), H5Pclose);
}

Handle make_simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& max_dims) {
  if (dims.empty()) return Handle(MBKIT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  return Handle(MBKIT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(),
                                                max_dims.empty() ? nullptr : max_dims.data())),
                H5Sclose);
}

// Variable-length UTF-8 string type (what h5py writes for str, and reads back as str).
Handle make_string_type() {
  Handle type(MBKIT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  MBKIT_H5_CHECK(H5Tset_size(type.id(), H5T_VARIABLE));
  MBKIT_H5_CHECK(H5Tset_cset(type.id(), H5T_CSET_UTF8));
  return type;
}

std::vector<hsize_t> space_dims(hid_t space) {
  const int rank = MBKIT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) MBKIT_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

hsize_t element_count(hid_t space) {
  const hssize_t count = MBKIT_H5_CHECK(H5Sget_simple_extent_npoints(space));
  return static_cast<hsize_t>(count);
}

// Reads the strings of an attribute or dataset whose type may be variable- or fixed-length.
template <class ReadFn>
std::vector<std::string> read_string_values(hid_t stored_type, hsize_t count, ReadFn read) {
  std::vector<std::string> values;
  if (count == 0) return values;  // HDF5 refuses a null buffer, even for no elements
  values.reserve(count);
  const htri_t variable = MBKIT_H5_CHECK(H5Tis_variable_str(stored_type));
  if (variable > 0) {
    Handle memory_type = make_string_type();
    std::vector<char*> raw(count, nullptr);
    read(memory_type.id(), raw.data());
    for (char* text : raw) values.emplace_back(text != nullptr ? text : "");
    // Free what the library allocated for the variable-length strings.
    Handle space(MBKIT_H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    if (count > 0) H5Dvlen_reclaim(memory_type.id(), space.id(), H5P_DEFAULT, raw.data());
  } else {
    const std::size_t size = MBKIT_H5_CHECK(H5Tget_size(stored_type));
    Handle memory_type(MBKIT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    MBKIT_H5_CHECK(H5Tset_size(memory_type.id(), size));
    std::vector<char> raw(size * count + 1, '\0');
    read(memory_type.id(), raw.data());
    for (hsize_t i = 0; i < count; ++i) {
      const char* begin = raw.data() + i * size;
      values.emplace_back(begin, strnlen(begin, size));  // fixed strings may be NUL padded
    }
  }
  return values;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handle

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

void Handle::reset() noexcept {
  if (id_ >= 0 && closer_ != nullptr) closer_(id_);
  id_ = -1;
}

void Handle::close() {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = -1;
  MBKIT_H5_CHECK(closer_(id));
}

// ---------------------------------------------------------------------------------------------
// Object: names and attributes

std::string Object::file_name() const {
  const ssize_t size = H5Fget_name(id(), nullptr, 0);
  if (size <= 0) return "?";
  std::string name(static_cast<std::size_t>(size), '\0');
  H5Fget_name(id(), name.data(), name.size() + 1);
  return name;
}

std::string Object::describe() const {
  const ssize_t size = H5Iget_name(id(), nullptr, 0);
  std::string object = "/";
  if (size > 0) {
    object.assign(static_cast<std::size_t>(size), '\0');
    H5Iget_name(id(), object.data(), object.size() + 1);
  }
  return file_name() + ":" + object;
}

bool Object::has_attribute(const std::string& name) const {
  quiet_hdf5_errors();
  return MBKIT_H5_CHECK(H5Aexists(id(), name.c_str())) > 0;
}

std::vector<std::string> Object::attribute_names() const {
  quiet_hdf5_errors();
  std::vector<std::string> names;
  H5O_info_t info{};
  MBKIT_H5_CHECK(H5Oget_info(id(), &info));  // 1.10 API: fills num_attrs
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const ssize_t size = MBKIT_H5_CHECK(
        H5Aget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<std::size_t>(size), '\0');
    MBKIT_H5_CHECK(H5Aget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                                      name.size() + 1, H5P_DEFAULT));
    names.push_back(std::move(name));
  }
  return names;
}

Handle Object::open_attribute(const std::string& name) const {
  if (!has_attribute(name)) data_error(cat(describe(), ": missing attribute '", name, "'"));
  return Handle(MBKIT_H5_CHECK(H5Aopen(id(), name.c_str(), H5P_DEFAULT)), H5Aclose);
}

namespace {

void write_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                     const std::vector<hsize_t>& dims, const void* data) {
  quiet_hdf5_errors();
  if (MBKIT_H5_CHECK(H5Aexists(object, name.c_str())) > 0) {
    MBKIT_H5_CHECK(H5Adelete(object, name.c_str()));
  }
  Handle space = make_simple_space(dims, {});
  Handle attribute(MBKIT_H5_CHECK(H5Acreate2(object, name.c_str(), file_type, space.id(),
                                             H5P_DEFAULT, H5P_DEFAULT)),
                   H5Aclose);
  // An empty array has nothing to write, and HDF5 refuses the null data() of an empty vector.
  if (data != nullptr) MBKIT_H5_CHECK(H5Awrite(attribute.id(), memory_type, data));
  attribute.close();
}

}  // namespace

void Object::set_attribute(const std::string& name, const std::string& value) {
  Handle type = make_string_type();
  const char* text = value.c_str();
  write_attribute(id(), name, type.id(), type.id(), {}, &text);
}

void Object::set_attribute(const std::string& name, std::int64_t value) {
  write_attribute(id(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
}

void Object::set_attribute(const std::string& name, std::uint64_t value) {
  write_attribute(id(), name, H5T_STD_U64LE, H5T_NATIVE_UINT64, {}, &value);
}

void Object::set_attribute(const std::string& name, double value) {
  write_attribute(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &value);
}

void Object::set_attribute(const std::string& name, const std::vector<std::int64_t>& values) {
  write_attribute(id(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, {values.size()}, values.data());
}

void Object::set_attribute(const std::string& name, const std::vector<double>& values) {
  write_attribute(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {values.size()}, values.data());
}

void Object::set_attribute(const std::string& name, const std::vector<std::string>& values) {
  Handle type = make_string_type();
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& value : values) pointers.push_back(value.c_str());
  write_attribute(id(), name, type.id(), type.id(), {values.size()}, pointers.data());
}

hsize_t Object::attribute_size(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  return element_count(space.id());
}

H5T_class_t Object::attribute_class(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  return H5Tget_class(type.id());
}

std::vector<std::string> Object::string_array_attribute(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING) {
    data_error(cat(describe(), ": attribute '", name, "' is not a string"));
  }
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  const hsize_t count = element_count(space.id());
  return read_string_values(type.id(), count, [&](hid_t memory_type, void* buffer) {
    MBKIT_H5_CHECK(H5Aread(attribute.id(), memory_type, buffer));
  });
}

std::string Object::string_attribute(const std::string& name) const {
  auto values = string_array_attribute(name);
  if (values.size() != 1) {
    data_error(cat(describe(), ": attribute '", name, "' holds ", values.size(),
                   " strings, expected one"));
  }
  return values.front();
}

std::vector<std::int64_t> Object::int_array_attribute(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_INTEGER) {
    data_error(cat(describe(), ": attribute '", name, "' is not an integer"));
  }
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  std::vector<std::int64_t> values(element_count(space.id()));
  if (!values.empty()) MBKIT_H5_CHECK(H5Aread(attribute.id(), H5T_NATIVE_INT64, values.data()));
  return values;
}

std::vector<double> Object::double_array_attribute(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.id());
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) {
    data_error(cat(describe(), ": attribute '", name, "' is not a number"));
  }
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  std::vector<double> values(element_count(space.id()));
  if (!values.empty()) MBKIT_H5_CHECK(H5Aread(attribute.id(), H5T_NATIVE_DOUBLE, values.data()));
  return values;
}

std::int64_t Object::int_attribute(const std::string& name) const {
  const auto values = int_array_attribute(name);
  if (values.size() != 1) {
    data_error(
        cat(describe(), ": attribute '", name, "' holds ", values.size(), " values, expected one"));
  }
  return values.front();
}

std::uint64_t Object::uint_attribute(const std::string& name) const {
  Handle attribute = open_attribute(name);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  if (H5Tget_class(type.id()) != H5T_INTEGER || element_count(space.id()) != 1) {
    data_error(cat(describe(), ": attribute '", name, "' is not an integer"));
  }
  if (H5Tget_sign(type.id()) == H5T_SGN_2) {
    // Read signed values as such: converting a negative one to unsigned would clamp it to 0.
    std::int64_t value = 0;
    MBKIT_H5_CHECK(H5Aread(attribute.id(), H5T_NATIVE_INT64, &value));
    if (value < 0) data_error(cat(describe(), ": attribute '", name, "' is negative"));
    return static_cast<std::uint64_t>(value);
  }
  std::uint64_t value = 0;
  MBKIT_H5_CHECK(H5Aread(attribute.id(), H5T_NATIVE_UINT64, &value));
  return value;
}

double Object::double_attribute(const std::string& name) const {
  const auto values = double_array_attribute(name);
  if (values.size() != 1) {
    data_error(
        cat(describe(), ": attribute '", name, "' holds ", values.size(), " values, expected one"));
  }
  return values.front();
}

// ---------------------------------------------------------------------------------------------
// Location

bool Location::has(const std::string& path) const {
  quiet_hdf5_errors();
  // H5Lexists fails on a missing intermediate group, so test each prefix in turn.
  std::string prefix;
  for (const auto& part : split(path, '/')) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (MBKIT_H5_CHECK(H5Lexists(id(), prefix.c_str(), H5P_DEFAULT)) <= 0) return false;
  }
  return !prefix.empty();
}

std::vector<std::string> Location::member_names() const {
  quiet_hdf5_errors();
  H5G_info_t info{};
  MBKIT_H5_CHECK(H5Gget_info(id(), &info));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = MBKIT_H5_CHECK(
        H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<std::size_t>(size), '\0');
    MBKIT_H5_CHECK(H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                                      name.size() + 1, H5P_DEFAULT));
    names.push_back(std::move(name));
  }
  return names;
}

Group Location::create_group(const std::string& name) {
  quiet_hdf5_errors();
  Handle creation = make_plist(H5P_GROUP_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));
  return Group(Handle(
      MBKIT_H5_CHECK(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, creation.id(), H5P_DEFAULT)),
      H5Gclose));
}

Group Location::open_group(const std::string& name) const {
  quiet_hdf5_errors();
  if (!has(name)) data_error(cat(describe(), ": missing group '", name, "'"));
  return Group(Handle(MBKIT_H5_CHECK(H5Gopen2(id(), name.c_str(), H5P_DEFAULT)), H5Gclose));
}

Group Location::require_group(const std::string& name) {
  return has(name) ? open_group(name) : create_group(name);
}

Dataset Location::create_dataset_of_type(const std::string& name, hid_t file_type,
                                         const std::vector<hsize_t>& dims,
                                         const StorageOptions& storage) {
  quiet_hdf5_errors();
  Handle space = make_simple_space(dims, storage.max_dims);
  Handle creation = make_plist(H5P_DATASET_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));
  if (!storage.chunk.empty()) {
    MBKIT_CHECK(storage.chunk.size() == dims.size(), "chunk rank differs from dataset rank for ",
                name);
    std::vector<hsize_t> chunk = storage.chunk;
    for (auto& extent : chunk) extent = std::max<hsize_t>(extent, 1);
    MBKIT_H5_CHECK(H5Pset_chunk(creation.id(), static_cast<int>(chunk.size()), chunk.data()));
    // Checksum first so that it covers the stored (compressed) bytes as read from disk.
    if (storage.fletcher32) MBKIT_H5_CHECK(H5Pset_fletcher32(creation.id()));
    if (storage.shuffle) MBKIT_H5_CHECK(H5Pset_shuffle(creation.id()));
    if (storage.deflate_level >= 0) {
      MBKIT_H5_CHECK(H5Pset_deflate(creation.id(), static_cast<unsigned>(storage.deflate_level)));
    }
  }
  // Do not write fill values for chunks we will overwrite anyway.
  MBKIT_H5_CHECK(H5Pset_fill_time(creation.id(), H5D_FILL_TIME_NEVER));
  return Dataset(Handle(MBKIT_H5_CHECK(H5Dcreate2(id(), name.c_str(), file_type, space.id(),
                                                  H5P_DEFAULT, creation.id(), H5P_DEFAULT)),
                        H5Dclose));
}

Dataset Location::create_string_dataset(const std::string& name,
                                        const std::vector<std::string>& values) {
  quiet_hdf5_errors();
  Handle type = make_string_type();
  Handle space = make_simple_space({values.size()}, {});
  Handle creation = make_plist(H5P_DATASET_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));
  Dataset dataset(Handle(MBKIT_H5_CHECK(H5Dcreate2(id(), name.c_str(), type.id(), space.id(),
                                                   H5P_DEFAULT, creation.id(), H5P_DEFAULT)),
                         H5Dclose));
  std::vector<const char*> pointers;
  for (const auto& value : values) pointers.push_back(value.c_str());
  if (!values.empty()) {
    MBKIT_H5_CHECK(
        H5Dwrite(dataset.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()));
  }
  return dataset;
}

Dataset Location::open_dataset(const std::string& name) const {
  quiet_hdf5_errors();
  if (!has(name)) data_error(cat(describe(), ": missing dataset '", name, "'"));
  H5O_info_t info{};
  MBKIT_H5_CHECK(H5Oget_info_by_name(id(), name.c_str(), &info, H5P_DEFAULT));
  if (info.type != H5O_TYPE_DATASET) {
    data_error(cat(describe(), ": '", name, "' is not a dataset"));
  }
  return Dataset(Handle(MBKIT_H5_CHECK(H5Dopen2(id(), name.c_str(), H5P_DEFAULT)), H5Dclose));
}

void Location::remove(const std::string& name) {
  quiet_hdf5_errors();
  MBKIT_H5_CHECK(H5Ldelete(id(), name.c_str(), H5P_DEFAULT));
}

// ---------------------------------------------------------------------------------------------
// File

File File::open(const std::string& path, Mode mode) {
  quiet_hdf5_errors();
  if (!fs::exists(path)) data_error(cat(path, ": no such file"));
  if (fs::is_directory(path)) data_error(cat(path, ": is a directory"));
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) {
    H5Eclear2(H5E_DEFAULT);
    data_error(cat(path, ": cannot read the file (permissions?)"));
  }
  if (is_hdf5 == 0) data_error(cat(path, ": not an HDF5 file"));
  unsigned flags = H5F_ACC_RDONLY;
  Handle access = make_plist(H5P_FILE_ACCESS);
  switch (mode) {
    case Mode::kRead:
      break;
    case Mode::kReadWrite:
      flags = H5F_ACC_RDWR;
      break;
    case Mode::kSwmrRead:
      flags = H5F_ACC_RDONLY | H5F_ACC_SWMR_READ;
      break;
    case Mode::kSwmrWrite:
      flags = H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE;
      MBKIT_H5_CHECK(H5Pset_libver_bounds(access.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
      break;
  }
  const hid_t id = H5Fopen(path.c_str(), flags, access.id());
  if (id < 0) {
    try {
      detail::h5_failed("H5Fopen", MBKIT_HERE);
    } catch (const Error& error) {
      data_error(cat(path, ": cannot open: ", error.what()));
    }
  }
  return File(Handle(id, H5Fclose), path);
}

File File::create(const std::string& path, Format format) {
  quiet_hdf5_errors();
  Handle creation = make_plist(H5P_FILE_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));  // root group too
  Handle access = make_plist(H5P_FILE_ACCESS);
  if (format == Format::kLatest) {
    MBKIT_H5_CHECK(H5Pset_libver_bounds(access.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
  }
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, creation.id(), access.id());
  if (id < 0) {
    try {
      detail::h5_failed("H5Fcreate", MBKIT_HERE);
    } catch (const Error& error) {
      fail(cat("cannot create ", path, ": ", error.what()));
    }
  }
  return File(Handle(id, H5Fclose), path);
}

void File::flush() {
  MBKIT_H5_CHECK(H5Fflush(id(), H5F_SCOPE_LOCAL));
}

void File::close() {
  try {
    handle_.close();
  } catch (const Error& error) {
    fail(cat("cannot write ", path_, ": ", error.what()));
  }
}

// ---------------------------------------------------------------------------------------------
// Dataset

std::vector<hsize_t> Dataset::dims() const {
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  return space_dims(space.id());
}

std::vector<hsize_t> Dataset::max_dims() const {
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  const int rank = MBKIT_H5_CHECK(H5Sget_simple_extent_ndims(space.id()));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), max(static_cast<std::size_t>(rank));
  if (rank > 0) MBKIT_H5_CHECK(H5Sget_simple_extent_dims(space.id(), dims.data(), max.data()));
  return max;
}

std::vector<hsize_t> Dataset::chunk_dims() const {
  Handle creation(MBKIT_H5_CHECK(H5Dget_create_plist(id())), H5Pclose);
  if (H5Pget_layout(creation.id()) != H5D_CHUNKED) return {};
  const auto rank = dims().size();
  std::vector<hsize_t> chunk(rank);
  MBKIT_H5_CHECK(H5Pget_chunk(creation.id(), static_cast<int>(rank), chunk.data()));
  return chunk;
}

H5T_class_t Dataset::type_class() const {
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  return H5Tget_class(type.id());
}

std::size_t Dataset::type_size() const {
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  return H5Tget_size(type.id());
}

bool Dataset::type_is_signed() const {
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  return H5Tget_class(type.id()) == H5T_INTEGER && H5Tget_sign(type.id()) == H5T_SGN_2;
}

std::vector<int> Dataset::filters() const {
  Handle creation(MBKIT_H5_CHECK(H5Dget_create_plist(id())), H5Pclose);
  const int count = MBKIT_H5_CHECK(H5Pget_nfilters(creation.id()));
  std::vector<int> ids;
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t elements = 0;
    ids.push_back(static_cast<int>(
        MBKIT_H5_CHECK(H5Pget_filter2(creation.id(), static_cast<unsigned>(i), &flags, &elements,
                                      nullptr, 0, nullptr, &config))));
  }
  return ids;
}

hsize_t Dataset::row_size() const {
  const auto shape = dims();
  hsize_t size = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) size *= shape[i];
  return size;
}

void Dataset::set_extent(const std::vector<hsize_t>& new_dims) {
  MBKIT_H5_CHECK(H5Dset_extent(id(), new_dims.data()));
}

void Dataset::refresh() {
  MBKIT_H5_CHECK(H5Drefresh(id()));
}

void Dataset::check_element_count(std::size_t count) const {
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  const hsize_t expected = element_count(space.id());
  MBKIT_CHECK(count == expected, describe(), ": ", count, " values given for ", expected,
              " elements");
}

namespace {

// Selects rows [first, first + count) of `file_space` (all of every other dimension) and
// returns the matching memory space.
Handle select_rows(hid_t file_space, const std::vector<hsize_t>& shape, hsize_t first,
                   hsize_t count) {
  std::vector<hsize_t> start(shape.size(), 0), extent = shape;
  start[0] = first;
  extent[0] = count;
  MBKIT_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr,
                                     extent.data(), nullptr));
  return make_simple_space(extent, {});
}

}  // namespace

void Dataset::write_raw(hid_t memory_type, hsize_t first, hsize_t count, const void* values) {
  Handle file_space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  auto shape = space_dims(file_space.id());
  if (shape.empty()) {  // scalar
    MBKIT_H5_CHECK(H5Dwrite(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values));
    return;
  }
  MBKIT_CHECK(first + count <= shape[0], describe(), ": rows [", first, ", ", first + count,
              ") outside ", shape[0], " rows");
  if (count == 0) return;
  Handle memory_space = select_rows(file_space.id(), shape, first, count);
  MBKIT_H5_CHECK(
      H5Dwrite(id(), memory_type, memory_space.id(), file_space.id(), H5P_DEFAULT, values));
}

void Dataset::read_raw(hid_t memory_type, hsize_t first, hsize_t count, void* out) const {
  Handle file_space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  auto shape = space_dims(file_space.id());
  if (shape.empty()) {
    MBKIT_H5_CHECK(H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out));
    return;
  }
  if (first + count > shape[0]) {
    data_error(cat(describe(), ": rows [", first, ", ", first + count, ") requested from ",
                   shape[0], " rows"));
  }
  if (count == 0) return;
  Handle memory_space = select_rows(file_space.id(), shape, first, count);
  if (H5Dread(id(), memory_type, memory_space.id(), file_space.id(), H5P_DEFAULT, out) < 0) {
    // A failed read of a file that opened fine means damaged data (a checksum or
    // decompression failure); report it as bad data, naming the object.
    try {
      detail::h5_failed("H5Dread", MBKIT_HERE);
    } catch (const Error& error) {
      data_error(
          cat(describe(), ": cannot read rows [", first, ", ", first + count, "): ", error.what()));
    }
  }
}

std::vector<std::string> Dataset::read_strings() const {
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING) data_error(cat(describe(), ": not a string dataset"));
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  const hsize_t count = element_count(space.id());
  return read_string_values(type.id(), count, [&](hid_t memory_type, void* buffer) {
    if (count > 0) {
      MBKIT_H5_CHECK(H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer));
    }
  });
}

}  // namespace mbkit::io
