// What a dataset stores, checked before it is read: the layout, element type and filter pipeline
// mbkit writes, and every chunk the extent declares, found by its coordinates. HDF5 reads a
// chunk missing from the index as fill values, and runs no filter (so no Fletcher-32) that a
// chunk's filter mask says was skipped: without these checks damage to the chunk index of a
// file in the HDF5 1.8 format (older mbkit's, which checksums no chunk index) reads as other
// numbers, silently. Files written now (1.10's format) checksum their chunk indexes as well.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "hdf5_internal.hpp"
#include "mbkit/io/hdf5.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::io {

namespace {

// ceil(a / b), saturating.
hsize_t chunks_along(hsize_t extent, hsize_t chunk) {
  return chunk == 0 ? 0 : extent / chunk + (extent % chunk != 0 ? 1 : 0);
}

std::string coordinates_text(const std::vector<hsize_t>& offset) {
  std::string text = "[";
  for (std::size_t d = 0; d < offset.size(); ++d) text += cat(d == 0 ? "" : ", ", offset[d]);
  return text + "]";
}

// The element types mbkit writes: little-endian standard integers, IEEE floats and strings.
// A type with another byte order, precision, bit offset or float layout would be converted to
// other numbers without a word (HDF5 converts whatever the file declares), so it is refused.
bool is_written_type(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      for (const hid_t written : {H5T_STD_U8LE, H5T_STD_I8LE, H5T_STD_U16LE, H5T_STD_I16LE,
                                  H5T_STD_U32LE, H5T_STD_I32LE, H5T_STD_U64LE, H5T_STD_I64LE}) {
        if (H5Tequal(type, written) > 0) return true;
      }
      return false;
    case H5T_FLOAT:
      return H5Tequal(type, H5T_IEEE_F32LE) > 0 || H5Tequal(type, H5T_IEEE_F64LE) > 0;
    case H5T_STRING:
      return true;  // read by read_strings, which checks them
    default:
      return false;
  }
}

// Layouts and filters as mbkit writes them: contiguous (no values, or a scalar) or chunked; no
// external files; Fletcher-32 first (so its checksum covers the values themselves), then
// shuffle with the element size, then deflate. Any other filter (n-bit, scale-offset) or
// parameter changes the values read.
void check_layout_and_filters(const Dataset& dataset, std::size_t element_size) {
  Handle creation(MBKIT_H5_CHECK(H5Dget_create_plist(dataset.id())), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(creation.id());
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED) {
    data_error(cat(dataset.describe(), ": stored in a layout mbkit does not write"));
  }
  if (MBKIT_H5_CHECK(H5Pget_external_count(creation.id())) != 0) {
    data_error(cat(dataset.describe(), ": its values are in external files"));
  }
  const int count = MBKIT_H5_CHECK(H5Pget_nfilters(creation.id()));
  int previous = -1;
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0, config = 0;
    unsigned values[4] = {};
    std::size_t value_count = std::size(values);
    const H5Z_filter_t filter =
        MBKIT_H5_CHECK(H5Pget_filter2(creation.id(), static_cast<unsigned>(i), &flags, &value_count,
                                      values, 0, nullptr, &config));
    // The position of each filter mbkit writes: a filter out of place or twice is not ours.
    int position = -1;
    bool parameters_ok = false;
    switch (filter) {
      case H5Z_FILTER_FLETCHER32:
        position = 0;
        parameters_ok = value_count == 0;
        break;
      case H5Z_FILTER_SHUFFLE:
        position = 1;
        parameters_ok = value_count == 1 && values[0] == element_size;
        break;
      case H5Z_FILTER_DEFLATE:
        position = 2;
        parameters_ok = value_count == 1 && values[0] <= 9;
        break;
      default:
        data_error(cat(dataset.describe(), ": filtered by HDF5 filter ", filter,
                       ", which mbkit does not write"));
    }
    if (position <= previous || (position == 0 && i != 0) || !parameters_ok) {
      data_error(cat(dataset.describe(), ": its filter pipeline is not one mbkit writes"));
    }
    previous = position;
  }
}

// The size of the file now: one a SWMR writer holds grows after it was opened, and HDF5's own
// idea of its end (H5Fget_filesize) stays what it was at open. HDF5 refuses to read past the
// end it knows of, so a file that cannot be looked at here is left to it.
hsize_t current_file_size(const Dataset& dataset) {
  std::error_code error;
  const auto size = std::filesystem::file_size(dataset.file_name(), error);
  return error ? std::numeric_limits<hsize_t>::max() : static_cast<hsize_t>(size);
}

struct StoredChunk {
  haddr_t address = HADDR_UNDEF;
  hsize_t size = 0;
};

// Every chunk the extent declares, each looked up by its coordinates (a B-tree or array
// lookup, O(n log n) for n chunks): present, with no filter skipped, of a size its filters can
// give, inside the file, and apart from every other chunk.
void check_every_chunk(const Dataset& dataset, const std::vector<hsize_t>& shape,
                       const std::vector<hsize_t>& chunk, hsize_t count, bool filtered,
                       std::size_t element_size, bool fixed_size_elements) {
  hsize_t chunk_bytes = element_size;
  for (const hsize_t extent : chunk) {
    if (chunk_bytes > (hsize_t{1} << 32) / extent) {
      data_error(cat(dataset.describe(), ": its chunks are larger than HDF5 allows"));
    }
    chunk_bytes *= extent;
  }
  // Deflate's worst case (zlib's compressBound) and Fletcher-32's 4 bytes, with room to spare.
  const hsize_t most_filtered = chunk_bytes + chunk_bytes / 1024 + 64;
  const hsize_t file_size = current_file_size(dataset);

  std::vector<StoredChunk> stored;
  stored.reserve(static_cast<std::size_t>(std::min<hsize_t>(count, hsize_t{1} << 20)));
  std::vector<hsize_t> offset(shape.size(), 0);
  for (hsize_t i = 0; i < count; ++i) {
    const auto where = [&] {
      return cat(dataset.describe(), ": the chunk at ", coordinates_text(offset));
    };
    unsigned filter_mask = 0;
    StoredChunk found;
    if (H5Dget_chunk_info_by_coord(dataset.id(), offset.data(), &filter_mask, &found.address,
                                   &found.size) < 0 ||
        found.address == HADDR_UNDEF) {
      H5Eclear2(H5E_DEFAULT);
      data_error(cat(where(), " is missing from its chunk index"));
    }
    if (filter_mask != 0) {
      data_error(cat(where(), " is marked as stored without some of its filters (mask ",
                     filter_mask, "), which mbkit never does"));
    }
    if (!filtered && fixed_size_elements && found.size != chunk_bytes) {
      data_error(cat(dataset.describe(), ": a chunk of ", chunk_bytes, " bytes is stored in ",
                     found.size, " bytes without a filter"));
    }
    if (found.size == 0 || (filtered && found.size > most_filtered)) {
      data_error(cat(where(), " is stored in ", found.size, " bytes, impossible for ", chunk_bytes,
                     " bytes of values"));
    }
    if (found.address > file_size || found.size > file_size - found.address) {
      data_error(cat(where(), " lies past the end of the file"));
    }
    stored.push_back(found);
    for (std::size_t d = offset.size(); d-- > 0;) {  // the next chunk, last dimension fastest
      offset[d] += chunk[d];
      if (offset[d] < shape[d]) break;
      offset[d] = 0;
    }
  }
  // Two index entries pointing at one stored chunk would both pass its checksum.
  std::sort(stored.begin(), stored.end(),
            [](const StoredChunk& a, const StoredChunk& b) { return a.address < b.address; });
  for (std::size_t i = 1; i < stored.size(); ++i) {
    if (stored[i - 1].address + stored[i - 1].size > stored[i].address) {
      data_error(cat(dataset.describe(), ": two of its chunks overlap in the file"));
    }
  }
}

}  // namespace

void Dataset::check_complete() const {
  Handle type(MBKIT_H5_CHECK(H5Dget_type(id())), H5Tclose);
  if (!is_written_type(type.id())) {
    data_error(cat(describe(), ": its values are of a type mbkit does not write"));
  }
  // A variable-length string's size here is its size in memory, not in the file.
  const bool fixed_size_elements = MBKIT_H5_CHECK(H5Tis_variable_str(type.id())) == 0;
  const std::size_t element_size = H5Tget_size(type.id());
  check_layout_and_filters(*this, element_size);

  const auto shape = dims();
  hsize_t values = 1;
  for (const hsize_t extent : shape) {
    if (extent != 0 && values > std::numeric_limits<hsize_t>::max() / extent) {
      data_error(cat(describe(), ": declares more values than can exist"));
    }
    values *= extent;
  }
  const auto chunk = chunk_dims();
  if (chunk.empty()) {
    if (values == 0) return;
    const hsize_t stored = H5Dget_storage_size(id());
    if (fixed_size_elements && stored != values * element_size) {
      data_error(cat(describe(), ": declares ", values, " values but stores ", stored, " bytes"));
    }
    const haddr_t address = H5Dget_offset(id());
    const hsize_t file_size = current_file_size(*this);
    if (address == HADDR_UNDEF || address > file_size || stored > file_size - address) {
      H5Eclear2(H5E_DEFAULT);
      data_error(cat(describe(), ": its values lie outside the file"));
    }
    return;
  }
  // Our chunks never exceed a fixed dataset; HDF5 1.10 overruns its buffers on one that does.
  const bool fixed = max_dims() == shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (chunk[d] == 0 || (fixed && chunk[d] > std::max<hsize_t>(shape[d], 1))) {
      data_error(cat(describe(), ": its chunk shape does not fit its extent"));
    }
  }
  hsize_t expected = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const hsize_t along = chunks_along(shape[d], chunk[d]);
    if (along != 0 && expected > std::numeric_limits<hsize_t>::max() / along) {
      data_error(cat(describe(), ": declares more chunks than can exist"));
    }
    expected *= along;
  }
  hsize_t stored = 0;
  Handle space(MBKIT_H5_CHECK(H5Dget_space(id())), H5Sclose);
  MBKIT_H5_CHECK(H5Dget_num_chunks(id(), space.id(), &stored));
  if (stored != expected) {
    data_error(cat(describe(), ": declares ", expected, " chunks but stores ", stored));
  }
  if (expected == 0) return;
  check_every_chunk(*this, shape, chunk, expected, !filters().empty(), element_size,
                    fixed_size_elements);
}

}  // namespace mbkit::io
