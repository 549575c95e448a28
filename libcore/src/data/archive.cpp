#include "mbkit/data/archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <memory>

#include "mbkit/util/check.hpp"
#include "mbkit/util/fs.hpp"

namespace mbkit::data {

bool is_gzip(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> compressed,
                                 const std::string& name) {
  if (!is_gzip(compressed)) data_error(cat(name, ": not in gzip format"));
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip wrapper (header and CRC-32 trailer are checked by zlib).
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail(cat(name, ": cannot initialise zlib"));
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);

  std::vector<std::uint8_t> out;
  // IDX files compress about 2:1; start there and grow.
  out.resize(std::max<std::size_t>(compressed.size() * 2, 1 << 16));
  std::size_t input_done = 0;
  std::size_t output_done = 0;
  while (true) {
    // zlib counts in 32-bit units: feed at most 1 GiB per call.
    const std::size_t input_chunk = std::min<std::size_t>(compressed.size() - input_done, 1u << 30);
    stream.next_in = const_cast<Bytef*>(compressed.data() + input_done);
    stream.avail_in = static_cast<uInt>(input_chunk);
    if (output_done == out.size()) out.resize(out.size() * 2);
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
      break;
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
  out.resize(output_done);
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
