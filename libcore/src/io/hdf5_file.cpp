// Files: opening for reading (checked metadata, bounded SWMR retries, no FIFOs or links),
// creating in the checksummed formats.
#include "hdf5_internal.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::io {

using internal::make_plist;

namespace {

// See set_format_bounds.
constexpr H5F_libver_t kChecksummedLow = H5F_LIBVER_V110;

}  // namespace

namespace {

// 1.8's format (H5F_LIBVER_V18) checksums the superblock, object headers and heaps but not a
// chunk index (a version 1 B-tree): damage there moved chunks or skipped their Fletcher-32
// unseen. 1.10's (H5F_LIBVER_V110) checksums its chunk indexes too (a single chunk's in the
// layout message, fixed and extensible arrays), costs nothing measurable in size or time, and
// is the newest we allow: Debian 12's h5py/h5dump (HDF5 1.10.8) read it. SWMR needs it. A
// flipped byte in such metadata fails its checksum at read instead of pointing the library at
// garbage. Files written in 1.8's format are still read (Dataset::check_complete).
void set_format_bounds(hid_t access, File::Format format) {
  const H5F_libver_t low = format == File::Format::kLatest ? H5F_LIBVER_V110 : kChecksummedLow;
  MBKIT_H5_CHECK(H5Pset_libver_bounds(access, low, H5F_LIBVER_V110));
}

// A SWMR reader retries a metadata read whose checksum fails, in case it raced the writer, with
// a doubling sleep from 1 ns: HDF5's default of 100 attempts never ends on a damaged file.
// 20 attempts sleep about 1 ms in all, plenty for a torn read of a live writer's flush.
constexpr unsigned kSwmrReadAttempts = 20;

hid_t open_file(const std::string& path, unsigned flags, hid_t access, std::string* error) {
  const hid_t id = H5Fopen(path.c_str(), flags, access);
  if (id < 0) {
    try {
      detail::h5_failed("H5Fopen", MBKIT_HERE);
    } catch (const Error& failure) {
      *error = failure.what();
    }
  }
  return id;
}

// Touches every piece of metadata of the file under `location`: each link (only hard links
// allowed), each object header and attribute, and each dataset's chunk index, so that a
// damaged one fails its checksum at open rather than when (or if) it is used.
herr_t check_link(hid_t location, const char* name, const H5L_info_t* link, void* data) {
  auto* problem = static_cast<std::string*>(data);
  if (link->type != H5L_TYPE_HARD) {
    *problem = cat("'", name, "' is ", link->type == H5L_TYPE_EXTERNAL ? "an external" : "a soft",
                   " link; mbkit files hold none");
    return -1;
  }
  // All fields: the header and the storage of its attributes, free-space managers included.
  H5O_info_t info{};
  if (H5Oget_info_by_name2(location, name, &info, H5O_INFO_ALL, H5P_DEFAULT) < 0) return -1;
  if (internal::decode_attributes(location, name, info) < 0) return -1;
  if (info.type == H5O_TYPE_DATASET) {
    const hid_t dataset = H5Dopen2(location, name, H5P_DEFAULT);
    if (dataset < 0) return -1;
    H5Dget_storage_size(dataset);  // walks the chunk index
    H5Dclose(dataset);
  }
  return 0;
}

void check_metadata(hid_t file, const std::string& path) {
  std::string problem;
  H5O_info_t root{};
  if (H5Oget_info2(file, &root, H5O_INFO_ALL) < 0 ||
      internal::decode_attributes(file, ".", root) < 0 ||
      H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, check_link, &problem) < 0) {
    if (!problem.empty()) {
      H5Eclear2(H5E_DEFAULT);
      data_error(cat(path, ": ", problem));
    }
    try {
      detail::h5_failed("H5Lvisit", MBKIT_HERE);
    } catch (const Error& error) {
      data_error(cat(path, ": damaged file: ", error.what()));
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace

File File::open(const std::string& path, Mode mode) {
  quiet_hdf5_errors();
  if (!fs::exists(path)) data_error(cat(path, ": no such file"));
  if (fs::is_directory(path)) data_error(cat(path, ": is a directory"));
  // A FIFO or device would block or never end; mbkit reads files only.
  if (!fs::is_regular_file(path)) data_error(cat(path, ": not a regular file"));
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
      MBKIT_H5_CHECK(H5Pset_metadata_read_attempts(access.id(), kSwmrReadAttempts));
      break;
    case Mode::kSwmrWrite:
      flags = H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE;
      set_format_bounds(access.id(), Format::kLatest);
      break;
  }
  std::string error;
  hid_t id = -1;
  if (mode == Mode::kSwmrRead) {
    // A file no writer holds opens without SWMR: a bad checksum then fails at once. One that a
    // writer holds (or left, killed) refuses that, and is followed with SWMR.
    Handle plain = make_plist(H5P_FILE_ACCESS);
    id = open_file(path, H5F_ACC_RDONLY, plain.id(), &error);
    std::string swmr_error;
    if (id < 0) id = open_file(path, flags, access.id(), &swmr_error);
  } else {
    id = open_file(path, flags, access.id(), &error);
  }
  if (id < 0) data_error(cat(path, ": cannot open: ", error));
  File file(Handle(id, H5Fclose), path);
  // Every mode: a damaged object met later by a writer would fail as an internal error (exit 1),
  // not as the damaged input it is (exit 3).
  check_metadata(file.id(), path);
  return file;
}

File File::create(const std::string& path, Format format) {
  quiet_hdf5_errors();
  Handle creation = make_plist(H5P_FILE_CREATE);
  MBKIT_H5_CHECK(H5Pset_obj_track_times(creation.id(), false));  // root group too
  Handle access = make_plist(H5P_FILE_ACCESS);
  set_format_bounds(access.id(), format);
  // Closing the file closes what is still open in it: after a failed write (a full disk) an
  // object left open kept the file open, and HDF5 crashed closing it at exit.
  MBKIT_H5_CHECK(H5Pset_fclose_degree(access.id(), H5F_CLOSE_STRONG));
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
  try {
    MBKIT_H5_CHECK(H5Fflush(id(), H5F_SCOPE_LOCAL));
  } catch (const Error& error) {
    // As a failed close: HDF5 would crash at exit flushing this file's cache again.
    mark_hdf5_state_damaged();
    fail(cat("cannot write ", path_, ": ", error.what()));
  }
}

void File::close() {
  try {
    handle_.close();
  } catch (const Error& error) {
    mark_hdf5_state_damaged();
    fail(cat("cannot write ", path_, ": ", error.what()));
  }
}

}  // namespace mbkit::io
