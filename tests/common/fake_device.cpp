#include "fake_device.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <span>
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

class FakeDevice;

std::atomic<std::int64_t> replays{0};

/// A recorded step: the queued calls, replayed in order while the memory they read is where it
/// was when they were recorded.
class FakeGraph final : public nn::StepGraph {
 public:
  FakeGraph(std::vector<std::function<void()>> calls, const std::uint64_t& generation)
      : calls_(std::move(calls)), generation_(generation), recorded_at_(generation) {}
  bool replay() override {
    if (generation_ != recorded_at_) return false;
    ++replays;
    for (const auto& call : calls_) call();
    return true;
  }

 private:
  std::vector<std::function<void()>> calls_;
  const std::uint64_t& generation_;
  std::uint64_t recorded_at_;
};

/// A CPU kernel on a recording fake device: runs its passes, or queues them while the device
/// records. Like the CUDA kernels, the loss reads its labels and dropout its seed from copies of
/// their own, which before_replay refreshes, and the loss hands its totals over in after_replay.
class RecordingKernel final : public nn::Kernel {
 public:
  RecordingKernel(std::unique_ptr<nn::Kernel> inner, const nn::Node& node,
                  std::vector<std::function<void()>>*& tape)
      : inner_(std::move(inner)), node_(node), tape_(tape) {}

  void prepare(int batch, std::span<nn::Tensor* const> inputs, nn::Tensor& output) override {
    inner_->prepare(batch, inputs, output);
  }
  void prepare_backward(int batch, std::span<nn::Tensor* const> input_grads) override {
    inner_->prepare_backward(batch, input_grads);
  }
  void forward(nn::KernelArgs& args) override { run(args, true); }
  void backward(nn::KernelArgs& args) override { run(args, false); }
  void before_replay(nn::KernelArgs& args) override { stage(args); }
  void after_replay(nn::KernelArgs& args) override {
    args.loss_sum = loss_sum_;
    args.correct = correct_;
  }

 private:
  void stage(const nn::KernelArgs& args) {
    seed_ = args.seed;
    if (node_.op == nn::Op::kSoftmaxCrossEntropy)
      labels_.assign(args.labels, args.labels + args.batch);
  }
  void run(nn::KernelArgs& args, bool forward) {
    if (tape_ == nullptr) {
      forward ? inner_->forward(args) : inner_->backward(args);
      return;
    }
    if (forward) stage(args);
    tape_->push_back([this, recorded = args, forward]() mutable {
      if (node_.op == nn::Op::kSoftmaxCrossEntropy) recorded.labels = labels_.data();
      recorded.seed = seed_;  // as the CUDA dropout kernel reads it from device memory
      forward ? inner_->forward(recorded) : inner_->backward(recorded);
      if (forward) {
        loss_sum_ = recorded.loss_sum;
        correct_ = recorded.correct;
      }
    });
  }

  std::unique_ptr<nn::Kernel> inner_;
  const nn::Node& node_;
  std::vector<std::function<void()>>*& tape_;  ///< the device's recording, null when none
  std::vector<std::int32_t> labels_;
  std::uint64_t seed_ = 0;
  double loss_sum_ = 0;
  std::int64_t correct_ = 0;
};

class FakeDevice final : public nn::Backend {
 public:
  explicit FakeDevice(int threads, bool records = false)
      : cpu_(backend::make_cpu_backend(threads)), records_(records) {}

  // Step graphs (make_recording_fake_device_backend).
  bool can_capture() const override { return records_; }
  void begin_capture() override {
    MBKIT_CHECK(records_ && tape_ == nullptr, "fake device: begin_capture");
    recording_.clear();
    tape_ = &recording_;
  }
  std::unique_ptr<nn::StepGraph> end_capture(std::string* why_not) override {
    MBKIT_CHECK(tape_ != nullptr, "fake device: end_capture without begin_capture");
    tape_ = nullptr;
    if (fail_) {
      if (why_not != nullptr) *why_not = "fake device: recordings fail";
      return nullptr;
    }
    return std::make_unique<FakeGraph>(std::move(recording_), generation_);
  }
  void set_input_fixed(nn::Tensor& input, const float* images) override {
    std::vector<float>& fixed = fixed_inputs_[&input];
    fixed.assign(images, images + static_cast<std::size_t>(input.batch()) *
                                      static_cast<std::size_t>(input.dims().size()));
    ++batches_;
    cpu_->set_input(input, fixed.data());
  }
  void synchronize() override {
    MBKIT_CHECK(tape_ == nullptr, "fake device: synchronize while recording");
  }
  void move_memory() { ++generation_; }
  void fail_recordings(bool fail) { fail_ = fail; }

  std::string description() const override { return "fake device over " + cpu_->description(); }
  int threads() const override { return cpu_->threads(); }
  bool supports(nn::Op op) const override { return cpu_->supports(op); }
  std::unique_ptr<nn::Kernel> make_kernel(const nn::Graph& graph, int node) override {
    if (!records_) return cpu_->make_kernel(graph, node);
    return std::make_unique<RecordingKernel>(cpu_->make_kernel(graph, node), graph.node(node),
                                             tape_);
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
    if (tape_ != nullptr) {
      tape_->push_back([this, &destination, &source] { cpu_->accumulate(destination, source); });
      return;
    }
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
    MBKIT_CHECK(tape_ == nullptr, "fake device: fill while recording");
    cpu_->fill(buffer, offset, count, value);
  }
  void add(nn::Buffer& destination, const nn::Buffer& source, std::size_t count) override {
    mine(destination);
    mine(source);
    if (tape_ != nullptr) {
      tape_->push_back(
          [this, &destination, &source, count] { cpu_->add(destination, source, count); });
      return;
    }
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
  bool records_ = false, fail_ = false;
  std::vector<std::function<void()>>* tape_ = nullptr;  ///< recording_ while recording
  std::vector<std::function<void()>> recording_;
  std::uint64_t generation_ = 0;
  std::map<const nn::Tensor*, std::vector<float>> fixed_inputs_;
  std::int64_t batches_ = 0;
  std::int64_t updates_ = 0;
};

FakeDevice& recording_fake(nn::Backend& backend) {
  auto* device = dynamic_cast<FakeDevice*>(&backend);
  MBKIT_CHECK(device != nullptr && device->can_capture(), "not a recording fake device");
  return *device;
}

}  // namespace

std::unique_ptr<nn::Backend> make_fake_device_backend(int threads) {
  return std::make_unique<FakeDevice>(threads);
}

std::unique_ptr<nn::Backend> make_recording_fake_device_backend(int threads) {
  return std::make_unique<FakeDevice>(threads, true);
}

std::int64_t fake_device_replays() {
  return replays.load();
}

void move_fake_device_memory(nn::Backend& backend) {
  recording_fake(backend).move_memory();
}

void fail_fake_device_recordings(nn::Backend& backend, bool fail) {
  recording_fake(backend).fail_recordings(fail);
}

bool is_fake_device_buffer(const nn::Buffer& buffer) {
  return dynamic_cast<const DeviceBuffer*>(&buffer) != nullptr;
}

}  // namespace mbkit::test
