// Objects whose memory is reused once nothing holds them: an emulated run makes a parameter set
// or a gradient of the model's size every round, and a new one would be faulted in (and zeroed)
// each time. take() hands out a spare (or a new) object in a shared_ptr whose deleter puts it
// back, so a set is found again without a scan of the many still held.
//
//   SparePool<Computed> pool(16);
//   std::shared_ptr<Computed> result = pool.take();  // back in the pool when the last copy goes
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace mbkit::train {

template <typename T>
class SparePool {
 public:
  /// Keeps at most `kept` spares; more are freed.
  explicit SparePool(std::size_t kept) : spares_(std::make_shared<Spares>()) {
    spares_->limit = kept;
  }

  /// A spare object (its values those it was given back with) or a new one.
  std::shared_ptr<T> take() {
    std::unique_ptr<T> object;
    {
      const std::lock_guard guard(spares_->lock);
      if (!spares_->kept.empty()) {
        object = std::move(spares_->kept.back());
        spares_->kept.pop_back();
      }
    }
    if (!object) object = std::make_unique<T>();
    // The pool's spares outlive the pool while an object is out (it may go on another thread).
    return std::shared_ptr<T>(object.release(), [spares = spares_](T* released) {
      std::unique_ptr<T> owned(released);
      const std::lock_guard guard(spares->lock);
      if (spares->kept.size() < spares->limit) spares->kept.push_back(std::move(owned));
    });
  }

 private:
  struct Spares {
    std::mutex lock;
    std::size_t limit = 0;
    std::vector<std::unique_ptr<T>> kept;
  };
  std::shared_ptr<Spares> spares_;
};

}  // namespace mbkit::train
