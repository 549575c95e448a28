// Helpers shared by the HDF5 layer's sources (hdf5.cpp, hdf5_object.cpp); not a public API.
#pragma once

#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "mbkit/io/hdf5.hpp"

namespace mbkit::io::internal {

Handle make_plist(hid_t plist_class);
/// A scalar space for empty `dims`, else a simple one (extendible where max_dims say so).
Handle make_simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& max_dims);
/// Fixed-length UTF-8 strings of `size` bytes, NUL padded: no global heap, whose damaged
/// records crashed HDF5's readers (H5HG_read).
Handle make_fixed_string_type(std::size_t size);
/// Variable-length UTF-8 strings: only to read what older mbkit and h5py wrote.
Handle make_variable_string_type();
std::vector<hsize_t> space_dims(hid_t space);
hsize_t element_count(hid_t space);
/// Throws a data error naming `what` unless `space` is scalar or simple with at most
/// `max_rank` dimensions and at most `max_elements` elements. Returns the element count.
hsize_t checked_element_count(hid_t space, int max_rank, hsize_t max_elements,
                              const std::string& what);
/// Strings of an attribute or dataset `object` stored variable- or fixed-length; `read` fills a
/// buffer of the memory type it is given. `what` names the object for messages.
std::vector<std::string> read_string_values(hid_t object, hid_t stored_type, hsize_t count,
                                            const std::string& what,
                                            const std::function<void(hid_t, void*)>& read);
/// Throws a data error naming `what` unless every variable-length string of `object` (`count`
/// of them, read as stored through `read`) lies where the file's global heap says it does:
/// HDF5 copies them out trusting the heap, which no checksum protects (hdf5_heap.cpp).
void check_variable_strings(hid_t object, hsize_t count, const std::string& what,
                            const std::function<void(hid_t, void*)>& read);

/// Decodes every attribute message of the object `name` under `location` (`info`: its
/// H5O_INFO_META_SIZE at least), so HDF5's own checks run on each, without the table of
/// attributes that HDF5 1.10 crashes releasing after a damaged one (hdf5_object.cpp). Returns
/// HDF5's status: negative for a damaged attribute, the error stack saying why.
herr_t decode_attributes(hid_t location, const char* name, const H5O_info_t& info);

/// The longest string we write or read (an attribute holding a run's whole configuration is a
/// few KiB); a larger declared size is damage.
inline constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;

}  // namespace mbkit::io::internal
