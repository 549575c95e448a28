#include "mbkit/io/hdf5.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "hdf5_internal.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::io {

namespace {

std::atomic<bool> hdf5_state_damaged{false};

// HDF5 1.10 shuts itself down at exit, closing what is still open; after a file failed to close
// (a write error, a full disk) that crashed with SIGSEGV. So mbkit runs the shutdown itself,
// and skips it once a close has failed: the failed file is a discarded temporary anyway.
void take_over_hdf5_shutdown() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (H5dont_atexit() >= 0) {
      std::atexit([] {
        if (!hdf5_state_damaged.load()) H5close();
      });
    }
  });
}

}  // namespace

void mark_hdf5_state_damaged() noexcept {
  hdf5_state_damaged.store(true);
}

void quiet_hdf5_errors() {
  thread_local bool quiet = false;
  if (!quiet) {
    take_over_hdf5_shutdown();
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

using internal::element_count;
using internal::make_plist;
using internal::make_simple_space;
using internal::space_dims;

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
// Location

bool Location::has(const std::string& path) const {
  quiet_hdf5_errors();
  // H5Lexists fails on a missing intermediate group, so test each prefix in turn.
  std::string prefix;
  for (const auto& part : split(path, '/')) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (MBKIT_H5_CHECK(H5Lexists(id(), prefix.c_str(), H5P_DEFAULT)) <= 0) return false;
    // mbkit writes only hard links: following a soft or external one could loop or open
    // another file, so a file holding one is refused.
    H5L_info_t info{};
    MBKIT_H5_CHECK(H5Lget_info(id(), prefix.c_str(), &info, H5P_DEFAULT));
    if (info.type != H5L_TYPE_HARD) {
      data_error(cat(describe(), ": '", prefix, "' is ",
                     info.type == H5L_TYPE_EXTERNAL ? "an external" : "a soft",
                     " link; mbkit files hold none"));
    }
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
  std::vector<hsize_t> chunk = storage.chunk;
  // Checksums need chunks: a small dataset given none is one chunk (a scalar or an empty
  // dataset cannot be chunked and holds no chunk to check).
  const bool empty = std::find(dims.begin(), dims.end(), hsize_t{0}) != dims.end();
  if (chunk.empty() && !dims.empty() && !empty && storage.fletcher32) {
    chunk = dims;
    hsize_t row_values = 1;
    for (std::size_t d = 1; d < dims.size(); ++d) row_values *= dims[d];
    chunk[0] = std::clamp<hsize_t>((hsize_t{1} << 24) / std::max<hsize_t>(row_values, 1), 1,
                                   dims[0]);  // at most 128 MiB of 8-byte values
  }
  if (!chunk.empty()) {
    MBKIT_CHECK(chunk.size() == dims.size(), "chunk rank differs from dataset rank for ", name);
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
  // Fixed-length strings as wide as the longest, in one checksummed chunk.
  std::size_t width = 1;
  for (const auto& value : values) width = std::max(width, value.size());
  std::vector<char> packed(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::memcpy(packed.data() + i * width, values[i].data(), values[i].size());
  }
  Handle type = internal::make_fixed_string_type(width);
  Handle space = make_simple_space({values.size()}, {});
  Handle creation = make_plist(H5P_DATASET_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));
  if (!values.empty()) {
    const hsize_t chunk = values.size();
    MBKIT_H5_CHECK(H5Pset_chunk(creation.id(), 1, &chunk));
    MBKIT_H5_CHECK(H5Pset_fletcher32(creation.id()));
  }
  Dataset dataset(Handle(MBKIT_H5_CHECK(H5Dcreate2(id(), name.c_str(), type.id(), space.id(),
                                                   H5P_DEFAULT, creation.id(), H5P_DEFAULT)),
                         H5Dclose));
  if (!values.empty()) {
    MBKIT_H5_CHECK(H5Dwrite(dataset.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()));
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
  const int chunk_rank =
      MBKIT_H5_CHECK(H5Pget_chunk(creation.id(), static_cast<int>(rank), chunk.data()));
  if (chunk_rank != static_cast<int>(rank)) {
    data_error(cat(describe(), ": its chunks have ", chunk_rank, " dimensions, it has ", rank));
  }
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

void Dataset::flush() {
  MBKIT_H5_CHECK(H5Dflush(id()));
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
  const std::string what = describe();
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING) data_error(cat(what, ": not a string dataset"));
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  const hsize_t count =
      internal::checked_element_count(space.id(), 1, hsize_t{1} << 24, cat(what, ":"));
  check_complete();
  return internal::read_string_values(
      id(), type.id(), count, what, [&](hid_t memory_type, void* buffer) {
        if (H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer) < 0) {
          try {
            detail::h5_failed("H5Dread", MBKIT_HERE);
          } catch (const Error& error) {
            data_error(cat(what, ": cannot read: ", error.what()));
          }
        }
      });
}

void Dataset::check_element_class(bool integral) const {
  const H5T_class_t stored = type_class();
  if (stored != H5T_INTEGER && (integral || stored != H5T_FLOAT)) {
    data_error(cat(describe(), ": holds ", stored == H5T_FLOAT ? "floating-point" : "non-numeric",
                   " values where ", integral ? "integers" : "numbers", " are expected"));
  }
  const std::size_t size = type_size();
  if (size == 0 || size > 8) data_error(cat(describe(), ": holds ", size, "-byte numbers"));
}

}  // namespace mbkit::io
