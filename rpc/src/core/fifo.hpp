// A growable circular FIFO: amortised allocation-free once it has reached its working size
// (std::deque allocates a block every few elements). Its capacity is a power of two.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace rdmakit::rpc::detail {

template <typename T>
class Fifo {
 public:
  bool empty() const noexcept { return count_ == 0; }
  size_t size() const noexcept { return count_; }
  void push(T value) {
    if (count_ == items_.size()) grow();
    items_[(first_ + count_) & (items_.size() - 1)] = std::move(value);
    ++count_;
  }
  T pop() noexcept {
    T value = std::move(items_[first_]);
    first_ = (first_ + 1) & (items_.size() - 1);
    --count_;
    return value;
  }
  /// Keeps the elements for which keep(element) is true, in order.
  template <typename Keep>
  void retain(Keep&& keep) {
    const size_t n = count_;
    for (size_t i = 0; i < n; ++i) {
      T value = pop();
      if (keep(value)) push(std::move(value));
    }
  }

 private:
  void grow() {
    std::vector<T> bigger(items_.empty() ? 16 : items_.size() * 2);
    for (size_t i = 0; i < count_; ++i) {
      bigger[i] = std::move(items_[(first_ + i) & (items_.size() - 1)]);
    }
    items_ = std::move(bigger);
    first_ = 0;
  }
  std::vector<T> items_;
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace rdmakit::rpc::detail
