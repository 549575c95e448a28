#include "mbkit/io/format.hpp"

#include "mbkit/util/check.hpp"

namespace mbkit::io {

int check_format(const File& file, std::string_view format, int newest_version,
                 std::string_view what) {
  const std::string& path = file.path();
  if (!file.has_attribute("format")) {
    data_error(cat(path, ": not an mbkit ", what, " (no 'format' attribute at the root)"));
  }
  const std::string found = file.string_attribute("format");
  if (found != format) {
    data_error(cat(path, ": not an mbkit ", what, " (format is '", found, "')"));
  }
  const std::int64_t version = file.int_attribute("format_version");
  if (version > newest_version) {
    data_error(cat(path, ": ", what, " format version ", version,
                   " is newer than this mbkit reads (", newest_version, "); upgrade mbkit"));
  }
  if (version < 1) data_error(cat(path, ": invalid format_version ", version));
  return static_cast<int>(version);
}

}  // namespace mbkit::io
