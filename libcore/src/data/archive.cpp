#include "mbkit/data/archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <new>
#include <stdexcept>

#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::data {

bool is_gzip(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

namespace {

// Inflates into `out` from its start. With `grow`, `out` doubles whenever it is full and the
// whole stream is inflated; without, inflating stops once `out` is full (the rest unchecked).
// Returns the bytes written.
std::size_t inflate_gzip(std::span<const std::uint8_t> compressed, const std::string& name,
                         std::vector<std::uint8_t>& out, bool grow) {
  if (!is_gzip(compressed)) data_error(cat(name, ": not in gzip format"));
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip wrapper (header and CRC-32 trailer are checked by zlib).
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail(cat(name, ": cannot initialise zlib"));
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);

  std::size_t input_done = 0;
  std::size_t output_done = 0;
  while (true) {
    // zlib counts in 32-bit units: feed at most 1 GiB per call.
    const std::size_t input_chunk = std::min<std::size_t>(compressed.size() - input_done, 1u << 30);
    stream.next_in = const_cast<Bytef*>(compressed.data() + input_done);
    stream.avail_in = static_cast<uInt>(input_chunk);
    if (output_done == out.size()) {
      if (!grow) return output_done;
      out.resize(std::max<std::size_t>(out.size() * 2, 1 << 16));
    }
    const std::size_t output_room = std::min<std::size_t>(out.size() - output_done, 1u << 30);
    stream.next_out = out.data() + output_done;
    stream.avail_out = static_cast<uInt>(output_room);
    const int status = inflate(&stream, Z_NO_FLUSH);
    input_done += input_chunk - stream.avail_in;
    output_done += output_room - stream.avail_out;
    if (status == Z_STREAM_END) {
      // Another gzip member may follow (concatenated .gz files are valid gzip).
      if (input_done < compressed.size() && is_gzip(compressed.subspan(input_done))) {
        if (inflateReset(&stream) != Z_OK) fail(cat(name, ": zlib reset failed"));
        continue;
      }
      if (input_done < compressed.size()) {
        data_error(cat(name, ": ", compressed.size() - input_done,
                       " bytes of garbage after the gzip data"));
      }
      return output_done;
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR && input_done == compressed.size() && stream.avail_out > 0) {
      data_error(cat(name, ": truncated gzip data (the file ends inside the compressed stream)"));
    }
    if (status == Z_BUF_ERROR) continue;  // needs more output room
    if (status == Z_DATA_ERROR) {
      data_error(cat(name, ": corrupt gzip data: ", stream.msg ? stream.msg : "invalid stream"));
    }
    if (status == Z_MEM_ERROR) fail(cat(name, ": out of memory while decompressing"));
    fail(cat(name, ": zlib inflate failed with status ", status));
  }
}

}  // namespace

std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> compressed,
                                 const std::string& name) {
  // IDX files compress about 2:1; start there and grow.
  std::vector<std::uint8_t> out(std::max<std::size_t>(compressed.size() * 2, 1 << 16));
  out.resize(inflate_gzip(compressed, name, out, true));
  return out;
}

std::vector<std::uint8_t> gunzip_prefix(std::span<const std::uint8_t> compressed, std::size_t limit,
                                        const std::string& name) {
  std::vector<std::uint8_t> out(limit);
  out.resize(inflate_gzip(compressed, name, out, false));
  return out;
}

std::vector<std::uint8_t> gunzip_exact(std::span<const std::uint8_t> compressed,
                                       std::uint64_t expected_size, const std::string& name,
                                       const std::string& what) {
  std::vector<std::uint8_t> out;
  try {
    // One byte more than expected shows a stream that holds more, without inflating it all.
    out.resize(static_cast<std::size_t>(expected_size) + 1);
  } catch (const std::bad_alloc&) {
    fail(cat(name, ": out of memory: cannot allocate ", human_bytes(double(expected_size)),
             " to decompress ", what));
  } catch (const std::length_error&) {
    fail(cat(name, ": out of memory: cannot allocate ", human_bytes(double(expected_size)),
             " to decompress ", what));
  }
  const std::size_t got = inflate_gzip(compressed, name, out, false);
  if (got > expected_size) {
    data_error(cat(name, ": the gzip data hold more than the ", expected_size, " bytes of ", what));
  }
  out.resize(got);
  return out;
}

std::vector<std::uint8_t> read_maybe_gzipped(const std::string& path) {
  auto bytes = fs::read_file(path);
  if (is_gzip(bytes)) return gunzip(bytes, fs::base_name(path));
  return bytes;
}

std::map<std::string, std::vector<std::uint8_t>> read_tar_members(
    const std::string& path, const std::set<std::string>& wanted) {
  if (!fs::is_regular_file(path)) data_error(cat(path, ": no such file"));
  std::unique_ptr<archive, int (*)(archive*)> reader(archive_read_new(), archive_read_free);
  if (!reader) fail("libarchive: out of memory");
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  const std::string name = fs::base_name(path);
  if (archive_read_open_filename(reader.get(), path.c_str(), 1 << 20) != ARCHIVE_OK) {
    data_error(cat(name, ": cannot read as a tar archive: ", archive_error_string(reader.get())));
  }
  std::map<std::string, std::vector<std::uint8_t>> members;
  archive_entry* entry = nullptr;
  while (true) {
    const int status = archive_read_next_header(reader.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status != ARCHIVE_OK && status != ARCHIVE_WARN) {
      data_error(cat(name, ": damaged tar archive: ", archive_error_string(reader.get())));
    }
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const std::string member = fs::base_name(archive_entry_pathname(entry));
    if (!wanted.contains(member)) continue;
    const la_int64_t size = archive_entry_size(entry);
    std::vector<std::uint8_t> bytes;
    if (size > 0) bytes.reserve(static_cast<std::size_t>(size));
    std::uint8_t block[1 << 16];
    while (true) {
      const la_ssize_t got = archive_read_data(reader.get(), block, sizeof block);
      if (got == 0) break;
      if (got < 0) {
        data_error(cat(name, ": damaged tar archive while reading ", member, ": ",
                       archive_error_string(reader.get())));
      }
      bytes.insert(bytes.end(), block, block + got);
    }
    if (size >= 0 && bytes.size() != static_cast<std::size_t>(size)) {
      data_error(cat(name, ": member ", member, " is truncated"));
    }
    members[member] = std::move(bytes);
  }
  return members;
}

}  // namespace mbkit::data
