#include "mbkit/util/error.hpp"

namespace mbkit {

Error::Error(const std::string& message, ExitCode code, std::string where)
    : std::runtime_error(message), code_(code), where_(std::move(where)) {}

void usage_error(const std::string& message) {
  throw Error(message, ExitCode::kUsage);
}
void data_error(const std::string& message) {
  throw Error(message, ExitCode::kBadData);
}
void communication_error(const std::string& message) {
  throw Error(message, ExitCode::kCommunication);
}
void fail(const std::string& message) {
  throw Error(message, ExitCode::kFailure);
}

}  // namespace mbkit
