// A small RAII layer over the HDF5 C API: files, groups, chunked and compressed datasets,
// extendible 1-D columns for append-only logs, and attributes. Every call is checked; errors
// name the file and object they concern.
//
// Files written here use little-endian standard types and no modification times, so the same
// inputs give the same bytes (the output of `mb-dataset fetch` can be compared by checksum).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mbkit::io {

/// Owns one HDF5 identifier and closes it with the matching H5xclose.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) noexcept : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t id() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }
  /// Closes without checking (destructor path).
  void reset() noexcept;
  /// Closes and throws if HDF5 reports an error (e.g. a write that failed at flush).
  void close();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

/// Memory and file types for the element types mbkit stores.
template <class T>
struct TypeOf;
template <>
struct TypeOf<std::uint8_t> {
  static hid_t memory() { return H5T_NATIVE_UINT8; }
  static hid_t file() { return H5T_STD_U8LE; }
};
template <>
struct TypeOf<std::int32_t> {
  static hid_t memory() { return H5T_NATIVE_INT32; }
  static hid_t file() { return H5T_STD_I32LE; }
};
template <>
struct TypeOf<std::uint32_t> {
  static hid_t memory() { return H5T_NATIVE_UINT32; }
  static hid_t file() { return H5T_STD_U32LE; }
};
template <>
struct TypeOf<std::int64_t> {
  static hid_t memory() { return H5T_NATIVE_INT64; }
  static hid_t file() { return H5T_STD_I64LE; }
};
template <>
struct TypeOf<std::uint64_t> {
  static hid_t memory() { return H5T_NATIVE_UINT64; }
  static hid_t file() { return H5T_STD_U64LE; }
};
template <>
struct TypeOf<float> {
  static hid_t memory() { return H5T_NATIVE_FLOAT; }
  static hid_t file() { return H5T_IEEE_F32LE; }
};
template <>
struct TypeOf<double> {
  static hid_t memory() { return H5T_NATIVE_DOUBLE; }
  static hid_t file() { return H5T_IEEE_F64LE; }
};

/// How a dataset is stored. Chunking is required for compression, checksums and extension.
struct StorageOptions {
  std::vector<hsize_t> chunk;  ///< chunk shape; empty = contiguous
  int deflate_level = -1;      ///< 0..9; -1 = no compression
  bool shuffle = false;        ///< byte shuffle before deflate (helps multi-byte types)
  /// Per-chunk checksum verified on every read: on for every dataset mbkit writes (one with
  /// no chunk shape is then stored as one chunk, unless scalar or empty).
  bool fletcher32 = true;
  std::vector<hsize_t> max_dims;  ///< empty = fixed; H5S_UNLIMITED entries make it extendible
};

/// Anything that can carry attributes: files (the root group), groups and datasets.
class Object {
 public:
  hid_t id() const noexcept { return handle_.id(); }
  /// "file.h5:/train/images", for messages.
  std::string describe() const;
  /// The file this object lives in.
  std::string file_name() const;

  bool has_attribute(const std::string& name) const;
  std::vector<std::string> attribute_names() const;
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, const char* value) {
    set_attribute(name, std::string(value));
  }
  void set_attribute(const std::string& name, std::int64_t value);
  void set_attribute(const std::string& name, int value) {
    set_attribute(name, static_cast<std::int64_t>(value));
  }
  void set_attribute(const std::string& name, std::uint64_t value);
  void set_attribute(const std::string& name, double value);
  void set_attribute(const std::string& name, const std::vector<std::int64_t>& values);
  void set_attribute(const std::string& name, const std::vector<double>& values);
  void set_attribute(const std::string& name, const std::vector<std::string>& values);

  // Readers throw a data error naming the object when the attribute is missing or of another
  // kind. Integer and floating readers accept any integer/floating stored type.
  std::string string_attribute(const std::string& name) const;
  std::int64_t int_attribute(const std::string& name) const;
  /// Any non-negative integer (seeds are stored unsigned).
  std::uint64_t uint_attribute(const std::string& name) const;
  double double_attribute(const std::string& name) const;
  std::vector<std::int64_t> int_array_attribute(const std::string& name) const;
  std::vector<double> double_array_attribute(const std::string& name) const;
  std::vector<std::string> string_array_attribute(const std::string& name) const;
  /// Number of elements of an attribute (1 for a scalar).
  hsize_t attribute_size(const std::string& name) const;
  /// H5T_INTEGER, H5T_FLOAT, H5T_STRING...
  H5T_class_t attribute_class(const std::string& name) const;

 protected:
  Object() = default;
  explicit Object(Handle handle) : handle_(std::move(handle)) {}
  Handle handle_;

 private:
  Handle open_attribute(const std::string& name) const;
};

class Dataset;

/// A file or a group: holds groups and datasets.
class Location : public Object {
 public:
  /// True when `path` (relative, may contain '/') names an existing link.
  bool has(const std::string& path) const;
  /// Names of the direct members, in name order.
  std::vector<std::string> member_names() const;

  class Group create_group(const std::string& name);
  class Group open_group(const std::string& name) const;
  /// Opens `name`, creating it when missing.
  class Group require_group(const std::string& name);

  /// A dataset of element type T with shape `dims`.
  template <class T>
  Dataset create_dataset(const std::string& name, const std::vector<hsize_t>& dims,
                         const StorageOptions& storage = {});
  /// A 1-D dataset of variable-length UTF-8 strings.
  Dataset create_string_dataset(const std::string& name, const std::vector<std::string>& values);
  Dataset open_dataset(const std::string& name) const;
  void remove(const std::string& name);

 protected:
  Location() = default;
  explicit Location(Handle handle) : Object(std::move(handle)) {}

 private:
  Dataset create_dataset_of_type(const std::string& name, hid_t file_type,
                                 const std::vector<hsize_t>& dims, const StorageOptions& storage);
};

class Group : public Location {
 public:
  Group() = default;
  explicit Group(Handle handle) : Location(std::move(handle)) {}
};

class File : public Location {
 public:
  enum class Mode {
    kRead,
    kReadWrite,
    /// Single-writer/multiple-reader access (HDF5 SWMR): reads a file that a writer holds open
    /// in kSwmrWrite, or that such a writer left behind when it was killed (a plain kRead
    /// refuses both: "file is already open for write"). Also reads any other file. A file no
    /// writer holds is opened without SWMR, and SWMR's retries of a failed checksum are
    /// bounded, so a damaged file is an error at once, not a hang.
    kSwmrRead,
    /// Appends to a file created with Format::kLatest while kSwmrRead readers follow it. Only
    /// dataset extents and values may change; no objects or attributes may be added.
    kSwmrWrite,
  };
  /// The oldest HDF5 version whose file format the file may use: both 1.10's, which checksums
  /// all metadata, chunk indexes included (older mbkit wrote 1.8's; still read).
  enum class Format {
    kChecksummed,  ///< HDF5 1.10 format: metadata and chunk index checksums
    kLatest,       ///< HDF5 1.10 format, for files opened in kSwmrWrite
  };
  /// Opens an existing file. A missing file, one that is not a regular file or not HDF5, or
  /// one whose metadata fail their checksums, is a data error naming it.
  static File open(const std::string& path, Mode mode = Mode::kRead);
  /// Creates (truncates) a file, normally an AtomicOutput's temporary.
  static File create(const std::string& path, Format format = Format::kChecksummed);

  File() = default;
  const std::string& path() const { return path_; }
  void flush();
  /// Checked close: a write error that only surfaces when data is flushed is reported here.
  void close();

 private:
  File(Handle handle, std::string path) : Location(std::move(handle)), path_(std::move(path)) {}
  std::string path_;
};

class Dataset : public Object {
 public:
  Dataset() = default;
  explicit Dataset(Handle handle) : Object(std::move(handle)) {}

  std::vector<hsize_t> dims() const;
  std::vector<hsize_t> max_dims() const;
  std::vector<hsize_t> chunk_dims() const;  ///< empty when contiguous
  H5T_class_t type_class() const;
  std::size_t type_size() const;
  bool type_is_signed() const;
  /// Filters applied, by HDF5 filter id (H5Z_FILTER_DEFLATE, H5Z_FILTER_FLETCHER32...).
  std::vector<int> filters() const;
  /// Number of elements in one row (product of all dimensions but the first).
  hsize_t row_size() const;

  /// Throws a data error naming the dataset unless it is stored as mbkit stores datasets: an
  /// element type mbkit writes (little-endian standard integers, IEEE floats, strings), a
  /// contiguous or chunked layout in this file, only the filters mbkit writes with their
  /// parameters, and every chunk (or the contiguous block) that the extent declares present at
  /// its coordinates, inside the file, apart from the others, of a possible size, with no filter
  /// skipped. HDF5 would read a missing chunk as fill values and a chunk whose filter mask says
  /// Fletcher-32 was skipped unchecked. Metadata only: the values are checked when read.
  void check_complete() const;
  /// Throws a data error unless the stored values are integers (integral) or numbers.
  void check_element_class(bool integral) const;

  /// Grows (or shrinks) an extendible dataset.
  void set_extent(const std::vector<hsize_t>& dims);
  /// For readers following a SWMR writer: picks up what it flushed since the dataset was
  /// opened (or last refreshed). Harmless on other files.
  void refresh();
  /// Writes what HDF5 holds of this dataset in memory (its chunk cache) to the file now, so
  /// that a later write can be known to follow it (a metric log's committed row counts).
  void flush();

  template <class T>
  void write(std::span<const T> values);
  /// Writes rows [first, first + count) along the first dimension; values holds count rows.
  template <class T>
  void write_rows(hsize_t first, hsize_t count, const T* values);
  /// The whole dataset, after check_element_class and check_complete.
  template <class T>
  std::vector<T> read() const;
  /// Reads rows [first, first + count) along the first dimension into out (count rows).
  template <class T>
  void read_rows(hsize_t first, hsize_t count, T* out) const;
  /// A 1-D dataset of strings (variable- or fixed-length), after check_complete.
  std::vector<std::string> read_strings() const;

 private:
  /// Throws unless `count` equals the number of elements of the dataset.
  void check_element_count(std::size_t count) const;
  void write_raw(hid_t memory_type, hsize_t first, hsize_t count, const void* values);
  void read_raw(hid_t memory_type, hsize_t first, hsize_t count, void* out) const;
};

/// An append-only 1-D column (a metric log's `/steps/loss`, ...): values are buffered and
/// written in chunks by flush(); size() counts buffered values too.
template <class T>
class Column {
 public:
  static Column create(Location& parent, const std::string& name, hsize_t chunk = 1024,
                       int deflate_level = 4);
  /// Opens an existing column to append to it (resume).
  static Column open(Location& parent, const std::string& name);

  void append(T value) { buffer_.push_back(value); }
  void append(std::span<const T> values) {
    buffer_.insert(buffer_.end(), values.begin(), values.end());
  }
  hsize_t size() const { return stored_ + buffer_.size(); }
  /// Writes buffered values to the file, their chunks included (the file's metadata, the new
  /// extent among them, is flushed by File::flush).
  void flush();

 private:
  explicit Column(Dataset dataset);
  Dataset dataset_;
  hsize_t stored_ = 0;
  std::vector<T> buffer_;
};

/// Disables HDF5's printing of error stacks for the calling thread (mbkit reports them itself).
/// The first call also takes over HDF5's shutdown at exit (see mark_hdf5_state_damaged).
void quiet_hdf5_errors();
/// After a file failed to close: HDF5's shutdown at exit would crash on it, so it is skipped.
void mark_hdf5_state_damaged() noexcept;

/// For use inside a catch block while reading `path`: rethrows the current exception, turning
/// a failed HDF5 call (an Error with exit code 1) into a data error naming the file. On a file
/// that opened fine such a failure means damaged metadata (a checksum mismatch, a bad address).
[[noreturn]] void rethrow_as_damaged_file(const std::string& path);

// --------------------------------------------------------------------------------------------
// Template definitions.

template <class T>
Dataset Location::create_dataset(const std::string& name, const std::vector<hsize_t>& dims,
                                 const StorageOptions& storage) {
  return create_dataset_of_type(name, TypeOf<T>::file(), dims, storage);
}

template <class T>
void Dataset::write(std::span<const T> values) {
  check_element_count(values.size());
  const auto shape = dims();
  write_raw(TypeOf<T>::memory(), 0, shape.empty() ? 1 : shape[0], values.data());
}

template <class T>
void Dataset::write_rows(hsize_t first, hsize_t count, const T* values) {
  write_raw(TypeOf<T>::memory(), first, count, values);
}

template <class T>
std::vector<T> Dataset::read() const {
  check_element_class(std::is_integral_v<T>);
  const auto shape = dims();
  // A dataset must store what it declares; a damaged extent or chunk index would otherwise ask
  // for more memory than the machine has, or read fill values as data.
  check_complete();
  hsize_t total = 1;
  for (auto d : shape) total *= d;
  std::vector<T> values(total);
  if (total > 0) read_raw(TypeOf<T>::memory(), 0, shape.empty() ? 1 : shape[0], values.data());
  return values;
}

template <class T>
void Dataset::read_rows(hsize_t first, hsize_t count, T* out) const {
  read_raw(TypeOf<T>::memory(), first, count, out);
}

template <class T>
Column<T> Column<T>::create(Location& parent, const std::string& name, hsize_t chunk,
                            int deflate_level) {
  StorageOptions storage;
  storage.chunk = {chunk};
  storage.deflate_level = deflate_level;
  storage.shuffle = sizeof(T) > 1;
  storage.fletcher32 = true;
  storage.max_dims = {H5S_UNLIMITED};
  return Column(parent.create_dataset<T>(name, {0}, storage));
}

template <class T>
Column<T> Column<T>::open(Location& parent, const std::string& name) {
  return Column(parent.open_dataset(name));
}

template <class T>
Column<T>::Column(Dataset dataset) : dataset_(std::move(dataset)) {
  stored_ = dataset_.dims().at(0);
}

template <class T>
void Column<T>::flush() {
  if (buffer_.empty()) return;
  const hsize_t count = buffer_.size();
  dataset_.set_extent({stored_ + count});
  dataset_.write_rows(stored_, count, buffer_.data());
  dataset_.flush();
  stored_ += count;
  buffer_.clear();
}

}  // namespace mbkit::io
