// A minimal recursive-descent JSON reader that flattens one object (see config.hpp).
#include "mbkit/plot/config.hpp"

#include <cctype>
#include <cstdint>

#include "mbkit/util/error.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::plot {
namespace {

class Reader {
 public:
  Reader(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  FlatConfig object_at_top() {
    FlatConfig flat;
    skip_blanks();
    if (peek() != '{') error("not a JSON object");
    read_object("", flat);
    skip_blanks();
    if (pos_ != text_.size()) error("text after the JSON object");
    return flat;
  }

 private:
  [[noreturn]] void error(const std::string& detail) const {
    data_error(cat(what_, ": ", detail, " (at character ", pos_, ")"));
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_blanks() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }

  void expect(char c) {
    skip_blanks();
    if (peek() != c) error(cat("expected '", c, "'"));
    ++pos_;
  }

  // Reads any value: objects are flattened into `flat` under `key`, others stored as text.
  void read_value(const std::string& key, FlatConfig& flat) {
    skip_blanks();
    const char c = peek();
    if (c == '{') {
      read_object(key, flat);
    } else {
      flat[key] = read_scalar_or_array_text();
    }
  }

  void read_object(const std::string& prefix, FlatConfig& flat) {
    expect('{');
    skip_blanks();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_blanks();
      if (peek() != '"') error("expected a key");
      const std::string key = read_string();
      expect(':');
      read_value(prefix.empty() ? key : prefix + "." + key, flat);
      skip_blanks();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return;
      }
      error("expected ',' or '}'");
    }
  }

  // A value other than an object, as the text a label shows: strings unescaped, arrays as
  // their compact JSON.
  std::string read_scalar_or_array_text() {
    skip_blanks();
    const char c = peek();
    if (c == '"') return read_string();
    if (c == '[') return read_array_text();
    if (c == '{') error("nested object inside an array");
    for (const std::string_view word : {"true", "false", "null"}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return word == "null" ? std::string() : std::string(word);
      }
    }
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) != 0 || text_[pos_] == '.' ||
            text_[pos_] == 'e' || text_[pos_] == 'E' || text_[pos_] == '+' || text_[pos_] == '-')) {
      ++pos_;
    }
    if (pos_ == start || (pos_ == start + 1 && text_[start] == '-')) error("expected a value");
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string read_array_text() {
    expect('[');
    std::string text = "[";
    skip_blanks();
    if (peek() == ']') {
      ++pos_;
      return "[]";
    }
    while (true) {
      skip_blanks();
      const bool quoted = peek() == '"';
      const std::string item = read_scalar_or_array_text();
      text += quoted ? "\"" + item + "\"" : item;
      skip_blanks();
      if (peek() == ',') {
        ++pos_;
        text += ",";
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return text + "]";
      }
      error("expected ',' or ']'");
    }
  }

  static void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::uint32_t read_hex4() {
    if (pos_ + 4 > text_.size()) error("short \\u escape");
    std::uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') {
        code |= static_cast<std::uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        code |= static_cast<std::uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        code |= static_cast<std::uint32_t>(h - 'A' + 10);
      } else {
        error("bad \\u escape");
      }
    }
    return code;
  }

  std::string read_string() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t code = read_hex4();
          if (code >= 0xD800 && code < 0xDC00 && text_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            const std::uint32_t low = read_hex4();
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          error(cat("bad escape '\\", e, "'"));
      }
    }
  }

  std::string_view text_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

}  // namespace

FlatConfig flatten_json_object(std::string_view json, const std::string& what) {
  return Reader(json, what).object_at_top();
}

}  // namespace mbkit::plot
