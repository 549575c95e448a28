// A small streaming JSON writer for --json outputs (no JSON library is in the dependency list).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace mbkit {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out, bool pretty = true) : out_(out), pretty_(pretty) {}
  ~JsonWriter();

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  /// The key of the next value inside an object.
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag);
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  /// Non-finite numbers are written as null (JSON has no NaN).
  JsonWriter& value(double number);
  JsonWriter& null();

  template <class T>
  JsonWriter& array(const std::vector<T>& values) {
    begin_array();
    for (const auto& v : values) value(v);
    return end_array();
  }

 private:
  void before_value();
  void newline();
  std::ostream& out_;
  bool pretty_;
  // One entry per open container: true once it holds an element (a comma is needed next).
  std::vector<bool> has_elements_;
  bool after_key_ = false;
};

/// JSON string literal for `text` (quotes included).
std::string json_quote(std::string_view text);

}  // namespace mbkit
