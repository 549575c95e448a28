#include "mbkit/util/machine.hpp"

#include <fstream>
#include <string>

namespace mbkit::util {

namespace {

// The value after "key<tabs>: " on a /proc/cpuinfo line, or empty.
std::string value_of(const std::string& line, const std::string& key) {
  if (line.compare(0, key.size(), key) != 0) return {};
  const auto colon = line.find(':', key.size());
  if (colon == std::string::npos) return {};
  if (line.find_first_not_of(" \t", key.size()) != colon) return {};
  const auto start = line.find_first_not_of(' ', colon + 1);
  return start == std::string::npos ? std::string{} : line.substr(start);
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string name, family, model, line;
  while (std::getline(cpuinfo, line) && line != "") {
    if (name.empty()) name = value_of(line, "model name");
    if (family.empty()) family = value_of(line, "cpu family");
    if (model.empty()) model = value_of(line, "model");
  }
  if (name.empty()) return "unknown CPU";
  if (family.empty() || model.empty()) return name;
  return name + " (family " + family + " model " + model + ")";
}

}  // namespace mbkit::util
