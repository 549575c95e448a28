// Flat float buffers a backend owns: a network's parameters, gradients and state, and an
// optimizer's state arrays. Their memory is the backend's (host memory on the CPU, device
// memory on a GPU): only the backend and its kernels dereference data(); a host reads or writes
// a buffer through Backend::copy_to_host / copy_from_host (counted), or through a HostView.
//
//   auto params = backend.make_buffer(n);         // n floats, zero
//   backend.copy_from_host(host_values, *params, 0);
//   nn::HostView view(backend, *params, 0, n);    // CPU: a view; GPU: a counted staged copy
//   view.values()[0] = 1;  view.write_back();     // GPU: copied back (counted); CPU: nothing
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <vector>

namespace mbkit::nn {

class Backend;

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::size_t size() const { return size_; }
  /// Backend memory (a device pointer on a GPU): for kernels and backend operations only.
  float* data() { return data_; }
  const float* data() const { return data_; }

 protected:
  Buffer(float* data, std::size_t size) : data_(data), size_(size) {}

 private:
  float* data_;
  std::size_t size_;
};

/// A buffer in host memory: owned (the CPU backend's buffers), or over memory someone else keeps
/// alive (a shared-memory window the gradients were moved into).
class HostBuffer final : public Buffer {
 public:
  /// `floats` zeros. calloc, not a zeroed vector: a large buffer comes as fresh zero pages from
  /// the kernel, touched only when written (a vgg16's parameters and gradients, 1.1 GB, cost
  /// 2.5 s of memset and page faults where only the primitives' plan was wanted).
  explicit HostBuffer(std::size_t floats)
      : HostBuffer(Owned(static_cast<float*>(std::calloc(floats == 0 ? 1 : floats, sizeof(float)))),
                   floats) {}
  explicit HostBuffer(std::span<float> external) : Buffer(external.data(), external.size()) {}

 private:
  struct Free {
    void operator()(float* data) const { std::free(data); }
  };
  using Owned = std::unique_ptr<float[], Free>;
  HostBuffer(Owned owned, std::size_t floats)
      : Buffer(owned.get(), floats), owned_(std::move(owned)) {
    if (owned_ == nullptr) throw std::bad_alloc();
  }
  Owned owned_;
};

/// Bytes a backend has copied between its buffers and host memory, each way.
struct CopyCounts {
  std::uint64_t to_host = 0;
  std::uint64_t from_host = 0;
  std::uint64_t total() const { return to_host + from_host; }
  CopyCounts operator-(const CopyCounts& earlier) const {
    return {to_host - earlier.to_host, from_host - earlier.from_host};
  }
};

/// Host access to a range of a buffer, by name: on a host-accessible backend values() is the
/// buffer's own memory (no copy, writes land at once); on a device backend it is a staged copy
/// (counted) and write_back() copies it back (counted). Code written against a HostView is
/// correct on both; write_back() is needed after writes, and harmless on the CPU.
class HostView {
 public:
  HostView(Backend& backend, Buffer& buffer, std::size_t offset, std::size_t count);
  HostView(HostView&&) = default;
  HostView& operator=(HostView&&) = default;

  std::span<float> values() { return values_; }
  std::span<const float> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  /// Whether values() is a staged copy rather than the buffer itself.
  bool staged() const { return staged_; }
  /// Copies values() back into the buffer (a device backend; nothing on a host one).
  void write_back();

 private:
  Backend* backend_;
  Buffer* buffer_;
  std::size_t offset_;
  std::vector<float> staging_;
  std::span<float> values_;
  bool staged_ = false;
};

/// One optimizer update over `count` floats of the flat buffers, each pointer backend memory
/// (optim/optimizer.hpp gives the rules). The optimizer computes the scalars once (in double,
/// then rounded), so that every backend applies the same floats and the CPU results stay bit
/// for bit; a backend only runs the elementwise loop (a fused kernel on a GPU).
struct OptimizerUpdate {
  enum class Rule { kSgd, kMomentum, kNesterov, kRmsProp, kAdam };
  Rule rule = Rule::kSgd;
  std::size_t count = 0;
  float* params = nullptr;
  const float* grads = nullptr;
  /// momentum: {a}; rmsprop: {ms, mom}; adam: {m, v}; sgd: none.
  std::array<float*, 2> state = {nullptr, nullptr};
  float lr = 0;  ///< adam: lr with both bias corrections folded in
  float weight_decay = 0;
  float momentum = 0;                    ///< momentum's m; rmsprop's mu
  float beta1 = 0, one_minus_beta1 = 0;  ///< adam's first moment
  float beta2 = 0, one_minus_beta2 = 0;  ///< adam's second moment; rmsprop's decay d, 1 - d
  float epsilon = 0;                     ///< rmsprop (inside the root), adam (outside)
};

}  // namespace mbkit::nn
