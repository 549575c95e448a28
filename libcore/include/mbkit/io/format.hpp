// The root attributes every mbkit HDF5 file carries, and what a reader checks of them.
#pragma once

#include <string_view>

#include "mbkit/io/hdf5.hpp"

namespace mbkit::io {

/// Checks that `file` says it is `format` (its "format" attribute) in a version this mbkit
/// reads: 1 to `newest_version` ("format_version"). Returns that version. Otherwise throws a
/// data error naming the file and calling it "an mbkit <what>" ("dataset", "checkpoint", ...).
int check_format(const File& file, std::string_view format, int newest_version,
                 std::string_view what);

}  // namespace mbkit::io
