// A run's stored configuration as flat key -> text pairs, for labelling runs by what differs
// between them. Logs keep every resolved option as a JSON object (root attribute "config");
// mbkit has a JSON writer but no reader, and plotting needs only this much of one.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace mbkit::plot {

/// Flat view of a JSON object: nested objects become dotted keys ("optimizer.name"), strings
/// are unescaped, numbers keep their text ("0.1", "1e-08"), booleans read "true"/"false",
/// null reads "" and arrays their compact JSON text ("[80,120]").
using FlatConfig = std::map<std::string, std::string>;

/// Parses a JSON object. Anything else, or malformed JSON, is a data error whose message
/// starts with `what` (the log and attribute it came from).
FlatConfig flatten_json_object(std::string_view json, const std::string& what);

}  // namespace mbkit::plot
