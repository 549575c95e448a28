#include "mbkit/data/loader.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "mbkit/data/dataset_file.hpp"
#include "mbkit/util/check.hpp"
#include "mbkit/util/random.hpp"
#include "mbkit/util/timer.hpp"

namespace mbkit::data {
namespace {

// The tag of the order streams (augmentation has its own, mbkit/data/augment.hpp).
constexpr std::uint64_t kOrderStream = 0x6f72646572;  // "order"

/// A stream id that depends on every part and on their order.
std::uint64_t mix_stream(std::uint64_t tag, std::initializer_list<std::uint64_t> parts) {
  std::uint64_t state = tag;
  std::uint64_t hash = splitmix64(state);
  for (const std::uint64_t part : parts) {
    state = hash ^ part;
    hash = splitmix64(state);
  }
  return hash;
}

// Set by tests only; each loader takes a copy at construction, so threads never share it.
std::mutex installed_fault_hook_mutex;
detail::LoaderFaultHook installed_fault_hook;

struct Position {
  std::int64_t epoch = 0;
  std::int64_t index = 0;
};

}  // namespace

namespace detail {
void set_loader_fault_hook(LoaderFaultHook hook) {
  const std::lock_guard lock(installed_fault_hook_mutex);
  installed_fault_hook = std::move(hook);
}
}  // namespace detail

struct DataLoader::Impl {
  LoaderOptions options;
  DatasetInfo info;
  ImageShape shape;
  std::size_t pixels = 0;
  std::uint64_t rows = 0;
  std::uint64_t first_row = 0;  ///< this loader's first row in the split
  std::int64_t batches_per_epoch = 0;
  /// The rows this loader reads: the shared split (options.rows), or its own slice's.
  std::shared_ptr<const SplitRows> held_rows;
  const std::uint8_t* images = nullptr;  ///< this loader's first row in held_rows
  const std::int32_t* labels = nullptr;
  const float* normalised = nullptr;
  detail::LoaderFaultHook fault_hook;

  // Consumer side (the caller's thread).
  std::shared_ptr<Batch> current;
  Position inline_position;                  ///< next batch to prepare when prefetch == 0
  std::shared_ptr<EpochOrder> inline_order;  ///< options.order_buffer, or its own
  bool prepared_ahead = false;  ///< prepare_next() filled `current` with inline_position's batch
  Position consumed;  ///< the batch the next call to next() returns, with or without prefetch

  // The prefetch ring, guarded by mutex.
  std::mutex mutex;
  std::condition_variable wake_producer;
  std::condition_variable wake_consumer;
  std::deque<std::shared_ptr<Batch>> ready;
  std::vector<std::shared_ptr<Batch>> spare;  ///< buffers to reuse: no allocation per batch
  Position produce_position;
  std::uint64_t generation = 0;  ///< bumped by seek(): batches started before it are stale
  std::exception_ptr error;      ///< the producer's failure at produce_position, until seek()
  bool stopping = false;
  std::thread producer;
  /// The producer's CPU seconds preparing batches, and how many it prepared (mb-bench-
  /// partitions' load_ms: under a CPU quota this thread spends the worker's budget).
  double producer_cpu_seconds = 0;
  std::int64_t produced = 0;

  explicit Impl(LoaderOptions loader_options);
  ~Impl();

  void load();
  Position following(Position position) const;
  const std::uint64_t* order_of(std::int64_t epoch, EpochOrder& order) const;
  void prepare(Position position, Batch& batch, EpochOrder& order) const;
  void normalise_image(const std::uint8_t* source, float* target) const;
  std::shared_ptr<Batch> take_spare();
  void produce_loop();
};

DataLoader::Impl::Impl(LoaderOptions loader_options) : options(std::move(loader_options)) {
  if (options.batch_size < 1) {
    usage_error(cat("--batch-size ", options.batch_size, " must be at least 1"));
  }
  if (options.prefetch < 0) {
    usage_error(cat("--prefetch ", options.prefetch, " must not be negative"));
  }
  MBKIT_CHECK(!options.batch_buffer || options.prefetch == 0,
              "a shared batch buffer is filled inline: prefetch 0");
  current = options.batch_buffer;
  MBKIT_CHECK(!options.order_buffer || options.prefetch == 0,
              "a shared order buffer is drawn inline: prefetch 0");
  inline_order = options.order_buffer ? options.order_buffer : std::make_shared<EpochOrder>();
  if (options.slice_count < 1) {
    usage_error(cat("--slice-count ", options.slice_count, " must be at least 1"));
  }
  if (options.slice_index < 0 || options.slice_index >= options.slice_count) {
    usage_error(
        cat("--slice-index ", options.slice_index, " is outside [0, ", options.slice_count, ")"));
  }
  {
    const std::lock_guard lock(installed_fault_hook_mutex);
    fault_hook = installed_fault_hook;
  }
  load();
  if (options.prefetch > 0) producer = std::thread([this] { produce_loop(); });
}

DataLoader::Impl::~Impl() {
  {
    const std::lock_guard lock(mutex);
    stopping = true;
  }
  wake_producer.notify_all();
  if (producer.joinable()) producer.join();
}

namespace {

/// Checks the labels of `count` rows from `first` of a split and fills the normalisation table.
void finish_rows(SplitRows& rows, std::uint64_t first) {
  for (std::size_t row = 0; row < rows.labels.size(); ++row) {
    if (rows.labels[row] < 0 || rows.labels[row] >= rows.info.num_classes) {
      data_error(cat(rows.path, ": ", rows.split, " label ", rows.labels[row], " at row ",
                     first + row, " is outside [0, ", rows.info.num_classes, ")"));
    }
  }
  const auto channels = static_cast<std::size_t>(rows.shape.channels);
  rows.normalised.resize(channels * 256);
  for (std::size_t c = 0; c < channels; ++c) {
    const double stddev = rows.info.std[c] == 0.0 ? 1.0 : rows.info.std[c];
    for (int x = 0; x < 256; ++x) {
      rows.normalised[c * 256 + static_cast<std::size_t>(x)] =
          static_cast<float>((x / 255.0 - rows.info.mean[c]) / stddev);
    }
  }
}

/// The split's summary, or a usage error naming the splits there are; its rows after `limit`.
const SplitSummary& find_split(const DatasetInfo& info, const std::string& path,
                               const std::string& split) {
  const auto found = std::find_if(info.splits.begin(), info.splits.end(),
                                  [&](const SplitSummary& s) { return s.name == split; });
  if (found == info.splits.end()) {
    usage_error(
        cat("--split '", split, "': ", path, " has splits '", kTrain, "' and '", kTest, "'"));
  }
  return *found;
}

std::uint64_t limited_rows(const SplitSummary& split, std::uint64_t limit) {
  return limit > 0 ? std::min(split.count, limit) : split.count;
}

}  // namespace

std::shared_ptr<const SplitRows> load_split_rows(const std::string& path, const std::string& split,
                                                 std::uint64_t split_limit) {
  const DatasetFile file = DatasetFile::open(path);
  auto rows = std::make_shared<SplitRows>();
  rows->path = path;
  rows->split = split;
  rows->info = file.info();
  const SplitSummary& summary = find_split(rows->info, path, split);
  rows->shape = summary.shape;
  rows->count = limited_rows(summary, split_limit);
  rows->images.resize(rows->count * rows->shape.pixels());
  rows->labels.resize(rows->count);
  file.read_images(split, 0, rows->count, rows->images.data());
  file.read_labels(split, 0, rows->count, rows->labels.data());
  finish_rows(*rows, 0);
  return rows;
}

void DataLoader::Impl::load() {
  std::optional<DatasetFile> file;
  if (options.rows) {
    MBKIT_CHECK(options.rows->path == options.path && options.rows->split == options.split,
                "a loader of ", options.path, " (", options.split, ") on the rows of ",
                options.rows->path, " (", options.rows->split, ")");
    info = options.rows->info;
  } else {
    file.emplace(DatasetFile::open(options.path));
    info = file->info();
  }
  const SplitSummary& split = find_split(info, options.path, options.split);
  const std::uint64_t split_rows =
      options.rows ? options.rows->count : limited_rows(split, options.split_limit);
  const auto slice_count = static_cast<std::uint64_t>(options.slice_count);
  const auto slice_index = static_cast<std::uint64_t>(options.slice_index);
  if (split_rows == 0) {
    data_error(cat(options.path, ": the ", options.split, " split has no rows"));
  }
  if (slice_count > split_rows) {
    // The slices are the ranks of a distributed run (mpirun -n), or its emulated workers.
    usage_error(cat(options.path, " has only ", split_rows, " ", options.split, " rows for ",
                    slice_count, options.rows ? " workers" : " ranks (mpirun -n)"));
  }
  // floor(i N / n) without overflowing i N.
  const auto slice_start = [&](std::uint64_t i) {
    return split_rows / slice_count * i + split_rows % slice_count * i / slice_count;
  };
  const std::uint64_t first = slice_start(slice_index);
  first_row = first;
  rows = slice_start(slice_index + 1) - first;
  if (options.limit > 0) rows = std::min(rows, options.limit);

  const auto batch_size = static_cast<std::uint64_t>(options.batch_size);
  batches_per_epoch = static_cast<std::int64_t>(
      options.drop_last ? rows / batch_size : (rows + batch_size - 1) / batch_size);
  if (batches_per_epoch == 0) {
    usage_error(cat("--batch-size ", options.batch_size, " with drop_last: ", options.path,
                    " gives this loader only ", rows, " ", options.split,
                    " rows, not one full batch"));
  }

  shape = split.shape;
  pixels = shape.pixels();
  if (options.rows) {
    held_rows = options.rows;
    images = held_rows->images.data() + first * pixels;
    labels = held_rows->labels.data() + first;
  } else {
    auto own = std::make_shared<SplitRows>();
    own->path = options.path;
    own->split = options.split;
    own->info = info;
    own->shape = shape;
    own->count = rows;
    own->images.resize(rows * pixels);
    own->labels.resize(rows);
    file->read_images(options.split, first, rows, own->images.data());
    file->read_labels(options.split, first, rows, own->labels.data());
    finish_rows(*own, first);
    held_rows = std::move(own);
    images = held_rows->images.data();
    labels = held_rows->labels.data();
  }
  normalised = held_rows->normalised.data();
}

Position DataLoader::Impl::following(Position position) const {
  if (++position.index == batches_per_epoch) {
    position.index = 0;
    ++position.epoch;
  }
  return position;
}

const std::uint64_t* DataLoader::Impl::order_of(std::int64_t epoch, EpochOrder& order) const {
  if (!options.shuffle) return nullptr;
  if (order.epoch != epoch || order.seed != options.seed ||
      order.slice_index != options.slice_index || order.rows.size() != rows) {
    order.rows.resize(rows);
    std::iota(order.rows.begin(), order.rows.end(), std::uint64_t{0});
    Rng rng(options.seed, mix_stream(kOrderStream, {static_cast<std::uint64_t>(options.slice_index),
                                                    static_cast<std::uint64_t>(epoch)}));
    rng.shuffle(order.rows.begin(), order.rows.end());
    order.seed = options.seed;
    order.slice_index = options.slice_index;
    order.epoch = epoch;
  }
  return order.rows.data();
}

void DataLoader::Impl::prepare(Position position, Batch& batch, EpochOrder& order) const {
  if (fault_hook) fault_hook(position.epoch, position.index);
  const auto batch_size = static_cast<std::uint64_t>(options.batch_size);
  const std::uint64_t first = static_cast<std::uint64_t>(position.index) * batch_size;
  const std::uint64_t count = std::min(batch_size, rows - first);
  const std::uint64_t* order_rows = order_of(position.epoch, order);
  const bool augment = options.augment.enabled();
  std::vector<float> scratch(options.augment.shift > 0 ? pixels : 0);
  batch.size = static_cast<int>(count);
  batch.epoch = position.epoch;
  batch.index = position.index;
  batch.images.resize(count * pixels);
  batch.labels.resize(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t row = order_rows ? order_rows[first + i] : first + i;
    batch.labels[i] = labels[row];
    const std::uint8_t* image = images + row * pixels;
    float* target = batch.images.data() + i * pixels;
    if (augment) {
      Rng rng = augment_rng(options.seed, position.epoch, first_row + row);
      const AugmentDraw draw = draw_augmentation(options.augment, shape, rng);
      augment_image(options.augment, draw, shape, image, normalised, scratch.data(), target);
    } else {
      normalise_image(image, target);
    }
  }
}

void DataLoader::Impl::normalise_image(const std::uint8_t* source, float* target) const {
  const std::size_t plane = pixels / static_cast<std::size_t>(shape.channels);
  for (std::size_t c = 0; c < static_cast<std::size_t>(shape.channels); ++c) {
    const float* table = normalised + c * 256;
    const std::uint8_t* in = source + c * plane;
    float* out = target + c * plane;
    for (std::size_t i = 0; i < plane; ++i) out[i] = table[in[i]];
  }
}

std::shared_ptr<Batch> DataLoader::Impl::take_spare() {
  if (spare.empty()) return std::make_shared<Batch>();
  auto batch = std::move(spare.back());
  spare.pop_back();
  return batch;
}

void DataLoader::Impl::produce_loop() {
  EpochOrder order;
  const auto capacity = static_cast<std::size_t>(options.prefetch);
  std::unique_lock lock(mutex);
  while (true) {
    wake_producer.wait(lock, [&] { return stopping || (!error && ready.size() < capacity); });
    if (stopping) return;
    const Position position = produce_position;
    const std::uint64_t started_generation = generation;
    auto batch = take_spare();
    lock.unlock();
    std::exception_ptr failure;
    const double cpu_before = thread_cpu_seconds();
    try {
      prepare(position, *batch, order);
    } catch (...) {
      failure = std::current_exception();
    }
    const double cpu = thread_cpu_seconds() - cpu_before;
    lock.lock();
    producer_cpu_seconds += cpu;
    ++produced;
    if (generation != started_generation || failure) {
      spare.push_back(std::move(batch));
      // A failure after a seek belongs to a position nobody asks for any more.
      if (generation == started_generation) error = failure;
    } else {
      ready.push_back(std::move(batch));
      produce_position = following(position);
    }
    wake_consumer.notify_one();
  }
}

DataLoader::DataLoader(LoaderOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

DataLoader::~DataLoader() = default;

const DatasetInfo& DataLoader::info() const {
  return impl_->info;
}
const LoaderOptions& DataLoader::options() const {
  return impl_->options;
}
ImageShape DataLoader::shape() const {
  return impl_->shape;
}
std::uint64_t DataLoader::rows() const {
  return impl_->rows;
}
std::int64_t DataLoader::batches_per_epoch() const {
  return impl_->batches_per_epoch;
}

void DataLoader::seek(std::int64_t epoch, std::int64_t index) {
  Impl& impl = *impl_;
  MBKIT_CHECK(epoch >= 0 && index >= 0 && index < impl.batches_per_epoch, "seek to batch ", index,
              " of epoch ", epoch, ": an epoch has ", impl.batches_per_epoch, " batches");
  impl.consumed = {epoch, index};
  if (impl.options.prefetch == 0) {
    impl.inline_position = {epoch, index};
    impl.prepared_ahead = false;
    return;
  }
  {
    const std::lock_guard lock(impl.mutex);
    ++impl.generation;
    for (auto& batch : impl.ready) impl.spare.push_back(std::move(batch));
    impl.ready.clear();
    if (impl.current) impl.spare.push_back(std::move(impl.current));
    impl.error = nullptr;
    impl.produce_position = {epoch, index};
  }
  impl.wake_producer.notify_one();
}

const Batch& DataLoader::next() {
  Impl& impl = *impl_;
  impl.consumed = impl.following(impl.consumed);
  if (impl.options.prefetch == 0) {
    prepare_next();  // unless a helper thread did already
    impl.prepared_ahead = false;
    impl.inline_position = impl.following(impl.inline_position);
    return *impl.current;
  }
  std::unique_lock lock(impl.mutex);
  impl.wake_consumer.wait(lock, [&] { return !impl.ready.empty() || impl.error; });
  if (impl.ready.empty()) std::rethrow_exception(impl.error);
  if (impl.current) impl.spare.push_back(std::move(impl.current));
  impl.current = std::move(impl.ready.front());
  impl.ready.pop_front();
  lock.unlock();
  impl.wake_producer.notify_one();
  return *impl.current;
}

void DataLoader::prepare_next() {
  Impl& impl = *impl_;
  MBKIT_CHECK(impl.options.prefetch == 0, "prepare_next() of a loader that prefetches");
  if (impl.prepared_ahead) return;
  if (!impl.current) impl.current = std::make_shared<Batch>();
  impl.prepare(impl.inline_position, *impl.current, *impl.inline_order);
  impl.prepared_ahead = true;
}

int DataLoader::next_batch_size() const {
  const Impl& impl = *impl_;
  MBKIT_CHECK(impl.options.prefetch == 0, "next_batch_size() of a loader that prefetches");
  const auto batch_size = static_cast<std::uint64_t>(impl.options.batch_size);
  const std::uint64_t first = static_cast<std::uint64_t>(impl.inline_position.index) * batch_size;
  return static_cast<int>(std::min(batch_size, impl.rows - first));
}

DataLoader::ProducerCpu DataLoader::producer_cpu() const {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mutex);
  return {impl.producer_cpu_seconds, impl.produced};
}

int DataLoader::batch_size_ahead(std::int64_t ahead) const {
  const Impl& impl = *impl_;
  MBKIT_CHECK(ahead >= 0, "the size of the batch ", ahead, " batches ahead");
  const std::int64_t index = (impl.consumed.index + ahead) % impl.batches_per_epoch;
  const auto batch_size = static_cast<std::uint64_t>(impl.options.batch_size);
  return static_cast<int>(
      std::min(batch_size, impl.rows - static_cast<std::uint64_t>(index) * batch_size));
}

}  // namespace mbkit::data
