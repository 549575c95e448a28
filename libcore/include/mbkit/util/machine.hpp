// What machine a measurement was taken on: the CPU as /proc/cpuinfo names it.
#pragma once

#include <string>

namespace mbkit::util {

/// "AMD EPYC (family 26 model 2)", or "unknown CPU" where /proc/cpuinfo is missing. The family
/// and model are added because virtual machines often name only the vendor.
std::string cpu_model_name();

}  // namespace mbkit::util
