#include "fake_device.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mbkit/backend/cpu.hpp"
#include "mbkit/util/check.hpp"

namespace mbkit::test {
namespace {

class DeviceBuffer final : public nn::Buffer {
 public:
  explicit DeviceBuffer(std::vector<float> memory)
      : nn::Buffer(memory.data(), memory.size()), memory_(std::move(memory)) {}

 private:
  std::vector<float> memory_;  // moving a vector keeps its data pointer
};

/// The fake device's clock: every batch it is given takes kBatchSeconds of device time, every
/// optimizer update kUpdateSeconds (whatever the host's CPU does meanwhile).
class FakeTimer final : public nn::DeviceTimer {
 public:
  FakeTimer(const std::int64_t& batches, const std::int64_t& updates)
      : batches_(batches), updates_(updates) {}
  void start() override {
    batches_at_start_ = batches_;
    updates_at_start_ = updates_;
  }
  double seconds() override {
    return static_cast<double>(batches_ - batches_at_start_) * kFakeDeviceBatchSeconds +
           static_cast<double>(updates_ - updates_at_start_) * kFakeDeviceUpdateSeconds;
  }

 private:
  const std::int64_t& batches_;
  const std::int64_t& updates_;
  std::int64_t batches_at_start_ = 0;
  std::int64_t updates_at_start_ = 0;
};

class FakeDevice final : public nn::Backend {
 public:
  explicit FakeDevice(int threads) : cpu_(backend::make_cpu_backend(threads)) {}

  std::string description() const override { return "fake device over " + cpu_->description(); }
  int threads() const override { return cpu_->threads(); }
  bool supports(nn::Op op) const override { return cpu_->supports(op); }
  std::unique_ptr<nn::Kernel> make_kernel(const nn::Graph& graph, int node) override {
    return cpu_->make_kernel(graph, node);
  }
  std::unique_ptr<nn::Tensor> make_tensor(int batch, nn::Dims dims) override {
    return cpu_->make_tensor(batch, dims);
  }
  std::unique_ptr<nn::Tensor> make_tensor_like(const nn::Tensor& like) override {
    return cpu_->make_tensor_like(like);
  }
  void set_input(nn::Tensor& input, const float* images) override {
    ++batches_;
    cpu_->set_input(input, images);
  }
  std::unique_ptr<nn::DeviceTimer> make_device_timer() override {
    return std::make_unique<FakeTimer>(batches_, updates_);
  }
  void read(const nn::Tensor& tensor, float* host) const override { cpu_->read(tensor, host); }
  void write(nn::Tensor& tensor, const float* host) override { cpu_->write(tensor, host); }
  void accumulate(nn::Tensor& destination, const nn::Tensor& source) override {
    cpu_->accumulate(destination, source);
  }

  std::unique_ptr<nn::Buffer> make_buffer(std::size_t floats) override {
    return std::make_unique<DeviceBuffer>(std::vector<float>(floats, 0.0f));
  }
  bool host_accessible() const override { return false; }
  // The operations run where the buffers are (the CPU backend's code on their memory), and
  // only on this backend's buffers, as a device's would.
  void copy(const nn::Buffer& source, std::size_t from, nn::Buffer& destination, std::size_t to,
            std::size_t count) override {
    mine(source);
    mine(destination);
    cpu_->copy(source, from, destination, to, count);
  }
  void fill(nn::Buffer& buffer, std::size_t offset, std::size_t count, float value) override {
    mine(buffer);
    cpu_->fill(buffer, offset, count, value);
  }
  void add(nn::Buffer& destination, const nn::Buffer& source, std::size_t count) override {
    mine(destination);
    mine(source);
    cpu_->add(destination, source, count);
  }
  void optimizer_step(const nn::OptimizerUpdate& update) override {
    ++updates_;
    cpu_->optimizer_step(update);
  }

 protected:
  void read_buffer(const nn::Buffer& source, std::size_t offset, std::span<float> host) override {
    mine(source);
    std::memcpy(host.data(), source.data() + offset, host.size() * sizeof(float));
  }
  void write_buffer(std::span<const float> host, nn::Buffer& destination,
                    std::size_t offset) override {
    mine(destination);
    std::memcpy(destination.data() + offset, host.data(), host.size() * sizeof(float));
  }

 private:
  static void mine(const nn::Buffer& buffer) {
    MBKIT_CHECK(is_fake_device_buffer(buffer), "fake device: a buffer it did not make");
  }

  std::unique_ptr<nn::Backend> cpu_;
  std::int64_t batches_ = 0;
  std::int64_t updates_ = 0;
};

}  // namespace

std::unique_ptr<nn::Backend> make_fake_device_backend(int threads) {
  return std::make_unique<FakeDevice>(threads);
}

bool is_fake_device_buffer(const nn::Buffer& buffer) {
  return dynamic_cast<const DeviceBuffer*>(&buffer) != nullptr;
}

}  // namespace mbkit::test
