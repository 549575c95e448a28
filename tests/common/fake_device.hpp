// A "device" backend for tests: the CPU backend's kernels, but its buffers are not host memory
// as far as the rest of mbkit may know (host_accessible() is false) and are separate allocations
// it copies into and out of. A caller that uses a HostView, the counted copies and the backend's
// operations gets the CPU backend's bits; one that takes a host span of its buffers is refused
// (nn::Network) or caught by comparing copies. So a test that trains on it proves the code path
// reads no device memory as host memory. Its timer counts device time by the work given to it.
#pragma once

#include <cstdint>
#include <memory>

#include "mbkit/nn/backend.hpp"

namespace mbkit::test {

/// Its device timer (what the virtual clock counts on a device) charges each batch given to the
/// device this many seconds, and each optimizer update kFakeDeviceUpdateSeconds.
inline constexpr double kFakeDeviceBatchSeconds = 0.125;
inline constexpr double kFakeDeviceUpdateSeconds = 0.0625;

/// `threads` as make_cpu_backend's.
std::unique_ptr<nn::Backend> make_fake_device_backend(int threads);

/// A fake device that also records step graphs as a GPU does (Backend::begin_capture): while
/// recording, its kernels' passes and its operations are queued instead of run, and a replay
/// runs the queue again on the memory it was recorded with: labels from the loss kernel's own
/// copy (before_replay), the batch from the input's fixed copy (set_input_fixed). So the
/// Network's step graphs run, bit for bit, where no GPU is.
std::unique_ptr<nn::Backend> make_recording_fake_device_backend(int threads);
/// Makes a recording fake device's recordings stale, as a grown GPU workspace does: their next
/// replay() refuses.
void move_fake_device_memory(nn::Backend& backend);
/// Replays of recordings by every recording fake device so far (a test's check that a run
/// used them).
std::int64_t fake_device_replays();
/// From now on a recording fake device's end_capture fails (`fail`), as a failed instantiation.
void fail_fake_device_recordings(nn::Backend& backend, bool fail);

/// Whether `buffer` was made by a fake device backend (a test's check that nothing made device
/// buffers elsewhere).
bool is_fake_device_buffer(const nn::Buffer& buffer);

}  // namespace mbkit::test
