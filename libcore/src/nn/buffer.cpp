#include "mbkit/nn/buffer.hpp"

#include "mbkit/nn/backend.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/strings.hpp"

namespace mbkit::nn {

namespace {

void check_range(const Buffer& buffer, std::size_t offset, std::size_t count, const char* what) {
  MBKIT_CHECK(offset <= buffer.size() && count <= buffer.size() - offset, what, " of ", count,
              " floats at ", offset, " in a buffer of ", buffer.size());
}

}  // namespace

void Backend::copy_to_host(const Buffer& source, std::size_t offset, std::span<float> host) {
  check_range(source, offset, host.size(), "copy_to_host");
  if (host.empty()) return;
  read_buffer(source, offset, host);
  to_host_bytes_ += host.size() * sizeof(float);
}

void Backend::copy_from_host(std::span<const float> host, Buffer& destination, std::size_t offset) {
  check_range(destination, offset, host.size(), "copy_from_host");
  if (host.empty()) return;
  write_buffer(host, destination, offset);
  from_host_bytes_ += host.size() * sizeof(float);
}

void Backend::begin_capture() {
  fail(cat("begin_capture on the ", description(), " backend, which records nothing"));
}

std::unique_ptr<StepGraph> Backend::end_capture(std::string* why_not) {
  if (why_not != nullptr) *why_not = cat("the ", description(), " backend records nothing");
  return nullptr;
}

HostView::HostView(Backend& backend, Buffer& buffer, std::size_t offset, std::size_t count)
    : backend_(&backend), buffer_(&buffer), offset_(offset) {
  check_range(buffer, offset, count, "HostView");
  if (backend.host_accessible()) {
    values_ = std::span<float>(buffer.data() + offset, count);
  } else {
    staging_.resize(count);
    backend.copy_to_host(buffer, offset, staging_);
    values_ = staging_;
    staged_ = true;
  }
}

void HostView::write_back() {
  if (staged_) backend_->copy_from_host(values_, *buffer_, offset_);
}

}  // namespace mbkit::nn
