// Objects' names and attributes, and the helpers for spaces and strings that the rest of the
// HDF5 layer shares. Readers check an attribute's type class, rank, extent and sizes before
// reading it: a damaged file must give a data error, never a huge allocation or a crash.
#include <algorithm>
#include <cstring>

#include "hdf5_internal.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::io {
namespace internal {

Handle make_plist(hid_t plist_class) {
  return Handle(MBKIT_H5_CHECK(H5Pcreate(plist_class)), H5Pclose);
}

Handle make_simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& max_dims) {
  if (dims.empty()) return Handle(MBKIT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  return Handle(MBKIT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(),
                                                max_dims.empty() ? nullptr : max_dims.data())),
                H5Sclose);
}

Handle make_fixed_string_type(std::size_t size) {
  Handle type(MBKIT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  MBKIT_H5_CHECK(H5Tset_size(type.id(), std::max<std::size_t>(size, 1)));
  MBKIT_H5_CHECK(H5Tset_strpad(type.id(), H5T_STR_NULLPAD));
  MBKIT_H5_CHECK(H5Tset_cset(type.id(), H5T_CSET_UTF8));
  return type;
}

Handle make_variable_string_type() {
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

hsize_t checked_element_count(hid_t space, int max_rank, hsize_t max_elements,
                              const std::string& what) {
  const H5S_class_t space_class = H5Sget_simple_extent_type(space);
  if (space_class == H5S_NULL) return 0;
  if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE) {
    data_error(cat(what, " has an unknown kind of extent"));
  }
  const int rank = MBKIT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  if (rank > max_rank) data_error(cat(what, " has ", rank, " dimensions, expected ", max_rank));
  const hsize_t count = element_count(space);
  if (count > max_elements) data_error(cat(what, " declares ", count, " values, too many"));
  return count;
}

std::vector<std::string> read_string_values(hid_t object, hid_t stored_type, hsize_t count,
                                            const std::string& what,
                                            const std::function<void(hid_t, void*)>& read) {
  std::vector<std::string> values;
  if (count == 0) return values;  // HDF5 refuses a null buffer, even for no elements
  values.reserve(count);
  // HDF5 converts no string between character sets, so read in the stored one.
  const H5T_cset_t cset = H5Tget_cset(stored_type);
  if (cset != H5T_CSET_ASCII && cset != H5T_CSET_UTF8) {
    data_error(cat(what, " has strings of an unknown character set"));
  }
  const htri_t variable = MBKIT_H5_CHECK(H5Tis_variable_str(stored_type));
  if (variable > 0) {
    check_variable_strings(object, count, what, read);
    Handle memory_type = make_variable_string_type();
    MBKIT_H5_CHECK(H5Tset_cset(memory_type.id(), cset));
    std::vector<char*> raw(count, nullptr);
    const auto free_all = [&raw] {
      for (char*& text : raw) {
        H5free_memory(text);  // allocated by HDF5
        text = nullptr;
      }
    };
    try {
      read(memory_type.id(), raw.data());
      for (const char* text : raw) values.emplace_back(text != nullptr ? text : "");
    } catch (...) {
      free_all();
      throw;
    }
    free_all();
    return values;
  }
  const std::size_t size = MBKIT_H5_CHECK(H5Tget_size(stored_type));
  if (size == 0 || size > kMaxStringBytes || count > kMaxStringBytes / size) {
    data_error(cat(what, " declares ", count, " strings of ", size, " bytes, too large"));
  }
  Handle memory_type(MBKIT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  MBKIT_H5_CHECK(H5Tset_size(memory_type.id(), size));
  MBKIT_H5_CHECK(H5Tset_cset(memory_type.id(), cset));
  MBKIT_H5_CHECK(H5Tset_strpad(memory_type.id(), H5T_STR_NULLPAD));
  std::vector<char> raw(size * count + 1, '\0');
  read(memory_type.id(), raw.data());
  for (hsize_t i = 0; i < count; ++i) {
    const char* begin = raw.data() + i * size;
    values.emplace_back(begin, strnlen(begin, size));  // fixed strings may be NUL padded
  }
  return values;
}

// HDF5 1.10.8 lists compact attributes (messages in the object header) through a table that
// H5Aiterate, H5Aget_name_by_idx and H5Aopen_by_idx build by decoding every message. When one
// fails to decode, the clean-up of the half-built table closes entries that were never set
// (H5A__compact_build_table leaves the table's allocated length as its count): a crash in
// H5A__attr_release_table. H5Aexists_by_name decodes the messages one by one with no table
// and stops at the first that fails, or at the name; none has this one: a message stores its
// name's size, NUL included, in 2 bytes, so no name is 65535 bytes long. Dense storage (a
// fractal heap and a name index) is walked by H5Aiterate in native order of the name index
// straight off the B-tree, decoding each attribute with no table either; only other orders
// build one.
herr_t decode_attributes(hid_t location, const char* name, const H5O_info_t& info) {
  static const std::string no_attribute_name(65535, 'x');
  const htri_t found = H5Aexists_by_name(location, name, no_attribute_name.c_str(), H5P_DEFAULT);
  if (found != 0) return -1;  // found is impossible: the walk stopped short of the end
  // H5Oget_info's heap size is that of the attributes' fractal heap: non-zero when dense.
  if (info.meta_size.attr.heap_size == 0) return 0;
  const auto touch = [](hid_t, const char*, const H5A_info_t*, void*) -> herr_t { return 0; };
  return H5Aiterate_by_name(location, name, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, touch, nullptr,
                            H5P_DEFAULT);
}

}  // namespace internal

using internal::checked_element_count;
using internal::make_fixed_string_type;

namespace {

// Attributes are small: names, settings, a configuration; more values than this is damage.
constexpr hsize_t kMaxAttributeValues = hsize_t{1} << 24;

// An open attribute with its type and the element count checked (rank at most 1).
struct CheckedAttribute {
  Handle attribute, type;
  H5T_class_t type_class = H5T_NO_CLASS;
  hsize_t count = 0;
};

void write_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                     const std::vector<hsize_t>& dims, const void* data) {
  quiet_hdf5_errors();
  if (MBKIT_H5_CHECK(H5Aexists(object, name.c_str())) > 0) {
    MBKIT_H5_CHECK(H5Adelete(object, name.c_str()));
  }
  Handle space = internal::make_simple_space(dims, {});
  Handle attribute(MBKIT_H5_CHECK(H5Acreate2(object, name.c_str(), file_type, space.id(),
                                             H5P_DEFAULT, H5P_DEFAULT)),
                   H5Aclose);
  // An empty array has nothing to write, and HDF5 refuses the null data() of an empty vector.
  if (data != nullptr) MBKIT_H5_CHECK(H5Awrite(attribute.id(), memory_type, data));
  attribute.close();
}

// Fixed-length strings as wide as the longest, NUL padded, packed one after another.
void write_string_attribute(hid_t object, const std::string& name,
                            const std::vector<std::string>& values, bool scalar) {
  std::size_t width = 1;
  for (const auto& value : values) width = std::max(width, value.size());
  std::vector<char> packed(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::memcpy(packed.data() + i * width, values[i].data(), values[i].size());
  }
  Handle type = make_fixed_string_type(width);
  const std::vector<hsize_t> dims =
      scalar ? std::vector<hsize_t>{} : std::vector<hsize_t>{values.size()};
  write_attribute(object, name, type.id(), type.id(), dims,
                  values.empty() ? nullptr : packed.data());
}

}  // namespace

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
  H5O_info_t info{};
  MBKIT_H5_CHECK(H5Oget_info2(id(), &info, H5O_INFO_NUM_ATTRS | H5O_INFO_META_SIZE));
  // Every attribute decoded first: only then may HDF5 build its table of them (see
  // decode_attributes), which the listing below does for compact storage.
  if (internal::decode_attributes(id(), ".", info) < 0) {
    try {
      detail::h5_failed("H5Aexists_by_name", MBKIT_HERE);
    } catch (const Error& error) {
      data_error(cat(describe(), ": damaged attribute: ", error.what()));
    }
  }
  std::vector<std::string> names;
  names.reserve(info.num_attrs);
  const auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    } catch (...) {  // nothing may unwind through HDF5's C frames
      return -1;
    }
    return 0;
  };
  // One walk in stored order, sorted here as HDF5's name index would be (bytes compared
  // unsigned, as strcmp does), instead of a table built anew for each H5Aget_name_by_idx.
  MBKIT_H5_CHECK(H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect, &names));
  std::sort(names.begin(), names.end());
  return names;
}

Handle Object::open_attribute(const std::string& name) const {
  if (!has_attribute(name)) data_error(cat(describe(), ": missing attribute '", name, "'"));
  return Handle(MBKIT_H5_CHECK(H5Aopen(id(), name.c_str(), H5P_DEFAULT)), H5Aclose);
}

namespace {

CheckedAttribute check_attribute(Handle attribute, const std::string& what) {
  CheckedAttribute checked;
  checked.type = Handle(MBKIT_H5_CHECK(H5Aget_type(attribute.id())), H5Tclose);
  checked.type_class = H5Tget_class(checked.type.id());
  if (checked.type_class == H5T_NO_CLASS) data_error(cat(what, " has an unreadable type"));
  Handle space(MBKIT_H5_CHECK(H5Aget_space(attribute.id())), H5Sclose);
  checked.count = checked_element_count(space.id(), 1, kMaxAttributeValues, what);
  if (checked.type_class == H5T_INTEGER || checked.type_class == H5T_FLOAT) {
    const std::size_t size = H5Tget_size(checked.type.id());
    if (size == 0 || size > 8) data_error(cat(what, " has ", size, "-byte numbers"));
  }
  checked.attribute = std::move(attribute);
  return checked;
}

}  // namespace

void Object::set_attribute(const std::string& name, const std::string& value) {
  write_string_attribute(id(), name, {value}, true);
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
  write_string_attribute(id(), name, values, false);
}

hsize_t Object::attribute_size(const std::string& name) const {
  const std::string what = cat(describe(), ": attribute '", name, "'");
  return check_attribute(open_attribute(name), what).count;
}

H5T_class_t Object::attribute_class(const std::string& name) const {
  const std::string what = cat(describe(), ": attribute '", name, "'");
  return check_attribute(open_attribute(name), what).type_class;
}

std::vector<std::string> Object::string_array_attribute(const std::string& name) const {
  const std::string what = cat(describe(), ": attribute '", name, "'");
  const CheckedAttribute checked = check_attribute(open_attribute(name), what);
  if (checked.type_class != H5T_STRING) data_error(cat(what, " is not a string"));
  return internal::read_string_values(
      id(), checked.type.id(), checked.count, what, [&](hid_t memory_type, void* buffer) {
        MBKIT_H5_CHECK(H5Aread(checked.attribute.id(), memory_type, buffer));
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
  const std::string what = cat(describe(), ": attribute '", name, "'");
  const CheckedAttribute checked = check_attribute(open_attribute(name), what);
  if (checked.type_class != H5T_INTEGER) data_error(cat(what, " is not an integer"));
  std::vector<std::int64_t> values(checked.count);
  if (!values.empty()) {
    MBKIT_H5_CHECK(H5Aread(checked.attribute.id(), H5T_NATIVE_INT64, values.data()));
  }
  return values;
}

std::vector<double> Object::double_array_attribute(const std::string& name) const {
  const std::string what = cat(describe(), ": attribute '", name, "'");
  const CheckedAttribute checked = check_attribute(open_attribute(name), what);
  if (checked.type_class != H5T_FLOAT && checked.type_class != H5T_INTEGER) {
    data_error(cat(what, " is not a number"));
  }
  std::vector<double> values(checked.count);
  if (!values.empty()) {
    MBKIT_H5_CHECK(H5Aread(checked.attribute.id(), H5T_NATIVE_DOUBLE, values.data()));
  }
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
  const std::string what = cat(describe(), ": attribute '", name, "'");
  const CheckedAttribute checked = check_attribute(open_attribute(name), what);
  if (checked.type_class != H5T_INTEGER || checked.count != 1) {
    data_error(cat(what, " is not an integer"));
  }
  if (H5Tget_sign(checked.type.id()) == H5T_SGN_2) {
    // Read signed values as such: converting a negative one to unsigned would clamp it to 0.
    std::int64_t value = 0;
    MBKIT_H5_CHECK(H5Aread(checked.attribute.id(), H5T_NATIVE_INT64, &value));
    if (value < 0) data_error(cat(what, " is negative"));
    return static_cast<std::uint64_t>(value);
  }
  std::uint64_t value = 0;
  MBKIT_H5_CHECK(H5Aread(checked.attribute.id(), H5T_NATIVE_UINT64, &value));
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

}  // namespace mbkit::io
