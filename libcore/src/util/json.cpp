#include "mbkit/util/json.hpp"

#include <charconv>
#include <cmath>

#include "mbkit/util/check.hpp"

namespace mbkit {

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += strprintf("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
  return out;
}

JsonWriter::~JsonWriter() {
  if (has_elements_.empty() && pretty_) out_.flush();
}

void JsonWriter::newline() {
  if (!pretty_) return;
  out_ << '\n';
  for (std::size_t i = 0; i < has_elements_.size(); ++i) out_ << "  ";
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_elements_.empty()) {
    if (has_elements_.back()) out_ << ',';
    has_elements_.back() = true;
    newline();
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ << '{';
  has_elements_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  MBKIT_CHECK(!has_elements_.empty(), "JSON: end_object without begin_object");
  const bool had = has_elements_.back();
  has_elements_.pop_back();
  if (had) newline();
  out_ << '}';
  if (has_elements_.empty() && pretty_) out_ << '\n';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ << '[';
  has_elements_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  MBKIT_CHECK(!has_elements_.empty(), "JSON: end_array without begin_array");
  const bool had = has_elements_.back();
  has_elements_.pop_back();
  if (had) newline();
  out_ << ']';
  if (has_elements_.empty() && pretty_) out_ << '\n';
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_value();
  out_ << json_quote(name) << (pretty_ ? ": " : ":");
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  out_ << json_quote(text);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  out_ << (flag ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  before_value();
  out_ << number;
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  before_value();
  out_ << number;
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  if (!std::isfinite(number)) {
    out_ << "null";
    return *this;
  }
  char buffer[64];
  // Shortest text that reads back to the same double.
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, number);
  out_.write(buffer, end - buffer);
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ << "null";
  return *this;
}

}  // namespace mbkit
