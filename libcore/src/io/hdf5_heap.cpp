// Variable-length strings (what older mbkit wrote, and h5py writes), checked before HDF5 reads
// them. HDF5 1.10 copies a string out of the global heap trusting the heap's own record of its
// size (H5HG_read), and no HDF5 file format checksums the global heap: a damaged record
// overruns HDF5's buffer. So the strings' references are read first as stored (a conversion to
// an opaque type that keeps the bytes), and each is checked against the heap collection it
// points into, read from the file here, before HDF5 is asked for the strings.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "hdf5_internal.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::io::internal {
namespace {

// Names the opaque type a stored reference converts to; only our conversion produces it.
constexpr const char* kRawReferenceTag = "mbkit: stored variable-length reference";

// Stored references convert to the opaque type unchanged: same size, same bytes.
herr_t keep_stored_bytes(hid_t source, hid_t target, H5T_cdata_t* data, std::size_t, std::size_t,
                         std::size_t, void*, void*, hid_t) {
  if (data->command != H5T_CONV_INIT) return 0;
  if (H5Tis_variable_str(source) <= 0 || H5Tget_size(source) != H5Tget_size(target)) return -1;
  char* tag = H5Tget_tag(target);
  const bool ours = tag != nullptr && std::strcmp(tag, kRawReferenceTag) == 0;
  H5free_memory(tag);
  if (!ours) return -1;  // another opaque type: leave the path to HDF5
  data->need_bkg = H5T_BKG_NO;
  return 0;
}

void register_raw_conversion() {
  static std::once_flag once;
  std::call_once(once, [] {
    Handle source = make_variable_string_type();
    Handle target(MBKIT_H5_CHECK(H5Tcreate(H5T_OPAQUE, 16)), H5Tclose);
    MBKIT_H5_CHECK(H5Tset_tag(target.id(), kRawReferenceTag));
    MBKIT_H5_CHECK(H5Tregister(H5T_PERS_SOFT, "mbkit_stored_vlen", source.id(), target.id(),
                               keep_stored_bytes));
  });
}

std::uint64_t decode(const unsigned char* at, std::size_t size) {
  std::uint64_t value = 0;
  for (std::size_t i = size; i-- > 0;) value = (value << 8) | at[i];  // little-endian
  return value;
}

// HDF5's layout of a global heap collection ("GCOL", version 1, then its size) and of each
// object in it (index, reference count, reserved, size, then the data padded to 8 bytes).
constexpr std::size_t kCollectionMinimum = 4096;
constexpr std::size_t kCollectionMaximum = std::size_t{1} << 30;

class HeapCheck {
 public:
  HeapCheck(hid_t object, std::string what) : what_(std::move(what)) {
    file_ = Handle(MBKIT_H5_CHECK(H5Iget_file_id(object)), H5Fclose);
    Handle creation(MBKIT_H5_CHECK(H5Fget_create_plist(file_.id())), H5Pclose);
    MBKIT_H5_CHECK(H5Pget_sizes(creation.id(), &address_size_, &length_size_));
    hsize_t user_block = 0;
    MBKIT_H5_CHECK(H5Pget_userblock(creation.id(), &user_block));
    base_ = user_block;
    if (address_size_ < 2 || address_size_ > 8 || length_size_ < 2 || length_size_ > 8) {
      data_error(cat(what_, ": its file declares ", address_size_, "-byte addresses"));
    }
    Handle access(MBKIT_H5_CHECK(H5Fget_access_plist(file_.id())), H5Pclose);
    if (H5Pget_driver(access.id()) != H5FD_SEC2) {
      data_error(cat(what_, ": variable-length strings are read from plain files only"));
    }
    void* handle = nullptr;
    MBKIT_H5_CHECK(H5Fget_vfd_handle(file_.id(), access.id(), &handle));
    fd_ = *static_cast<int*>(handle);
    struct stat status {};
    MBKIT_SYS_CHECK(::fstat(fd_, &status), "fstat");
    file_size_ = static_cast<std::uint64_t>(status.st_size);
  }

  hid_t file() const { return file_.id(); }
  std::size_t reference_size() const { return 4 + address_size_ + 4; }

  // One stored reference: the string's length, the collection's address, the object's index.
  void check(const unsigned char* reference) {
    const std::uint64_t length = decode(reference, 4);
    const std::uint64_t address = decode(reference + 4, address_size_);
    const std::uint64_t index = decode(reference + 4 + address_size_, 4);
    if (address == 0) return;  // a null string: HDF5 reads nothing
    if (length > kMaxStringBytes) data_error(cat(what_, ": a string declares ", length, " bytes"));
    const auto& objects = collection(address);
    const auto found = objects.find(index);
    if (found == objects.end()) {
      data_error(cat(what_, ": a string refers to object ", index,
                     " missing from its global heap (damaged file)"));
    }
    if (found->second != length) {
      data_error(cat(what_, ": a string of ", length, " bytes is stored as ", found->second,
                     " bytes in the global heap (damaged file)"));
    }
  }

 private:
  // The sizes of the objects of the collection at `address`, by index, once every object is
  // found to lie inside it (what HDF5 assumes when it reads one).
  const std::map<std::uint64_t, std::uint64_t>& collection(std::uint64_t address) {
    if (const auto known = collections_.find(address); known != collections_.end()) {
      return known->second;
    }
    const std::size_t header_size = 8 + length_size_;
    const std::size_t object_header = 8 + length_size_;
    const std::uint64_t at = base_ + address;
    if (address > file_size_ || at > file_size_ || file_size_ - at < header_size) {
      damaged("a string refers to a global heap outside the file");
    }
    std::vector<unsigned char> header(header_size);
    read_at(header.data(), header.size(), at);
    if (std::memcmp(header.data(), "GCOL", 4) != 0 || header[4] != 1) {
      damaged("a string refers to something that is not a global heap");
    }
    const std::uint64_t size = decode(header.data() + 8, length_size_);
    if (size < kCollectionMinimum || size > kCollectionMaximum || size > file_size_ - at) {
      damaged(cat("its global heap declares ", size, " bytes"));
    }
    std::vector<unsigned char> bytes(size);
    read_at(bytes.data(), bytes.size(), at);
    std::map<std::uint64_t, std::uint64_t> objects;
    // The walk HDF5 makes when it loads the collection, with the bounds it does not check.
    std::size_t offset = header_size;
    while (offset < size && size - offset >= object_header) {
      const std::uint64_t index = decode(bytes.data() + offset, 2);
      const std::uint64_t object_size = decode(bytes.data() + offset + 8, length_size_);
      std::uint64_t extent = 0;
      if (index == 0) {  // the free space, its header included
        extent = object_size;
        if (extent < object_header) damaged("its global heap's free space is damaged");
      } else {
        if (object_size > size) damaged("a global heap object overruns its collection");
        extent = object_header + (object_size + 7) / 8 * 8;
        if (!objects.emplace(index, object_size).second) {
          damaged(cat("its global heap holds object ", index, " twice"));
        }
      }
      if (extent > size - offset) damaged("a global heap object overruns its collection");
      offset += extent;
    }
    return collections_.emplace(address, std::move(objects)).first->second;
  }

  void read_at(unsigned char* out, std::size_t size, std::uint64_t offset) const {
    std::size_t done = 0;
    while (done < size) {
      const ssize_t got = ::pread(fd_, out + done, size - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      MBKIT_SYS_CHECK(got < 0 ? -1 : 0, "pread");
      if (got == 0) damaged("its global heap is cut short");
      done += static_cast<std::size_t>(got);
    }
  }

  [[noreturn]] void damaged(const std::string& problem) const {
    data_error(cat(what_, ": ", problem, " (damaged file)"));
  }

  std::string what_;
  Handle file_;
  std::size_t address_size_ = 0, length_size_ = 0;
  std::uint64_t base_ = 0, file_size_ = 0;
  int fd_ = -1;
  std::map<std::uint64_t, std::map<std::uint64_t, std::uint64_t>> collections_;
};

// mbkit writes fixed-length strings only since it writes checksummed files; a file whose root
// "format" is one was written so, and a variable-length string in it is damage.
void refuse_in_fixed_string_file(hid_t file, const std::string& what) {
  if (H5Aexists_by_name(file, "/", "format", H5P_DEFAULT) <= 0) return;
  Handle format(MBKIT_H5_CHECK(H5Aopen_by_name(file, "/", "format", H5P_DEFAULT, H5P_DEFAULT)),
                H5Aclose);
  Handle type(MBKIT_H5_CHECK(H5Aget_type(format.id())), H5Tclose);
  if (H5Tget_class(type.id()) == H5T_STRING && H5Tis_variable_str(type.id()) == 0) {
    data_error(cat(what, ": a variable-length string in a file written with fixed-length ones",
                   " (damaged file)"));
  }
}

}  // namespace

void check_variable_strings(hid_t object, hsize_t count, const std::string& what,
                            const std::function<void(hid_t, void*)>& read) {
  register_raw_conversion();
  HeapCheck heap(object, what);
  refuse_in_fixed_string_file(heap.file(), what);
  const std::size_t size = heap.reference_size();
  Handle raw_type(MBKIT_H5_CHECK(H5Tcreate(H5T_OPAQUE, size)), H5Tclose);
  MBKIT_H5_CHECK(H5Tset_tag(raw_type.id(), kRawReferenceTag));
  std::vector<unsigned char> references(size * count);
  read(raw_type.id(), references.data());
  for (hsize_t i = 0; i < count; ++i) heap.check(references.data() + i * size);
}

}  // namespace mbkit::io::internal
