// The bytes of an inline request, kept with its work request once the post returns (the
// application may reuse its buffer then). Most inline requests are small: their bytes stay
// in the record itself, where a heap allocation and its release per post to another host
// cost more than the rest of the record's bookkeeping.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

namespace softrdma {

class InlineBytes {
 public:
  // Copied and moved only as far as bytes are held: a kept request moves into the send
  // queue's lists.
  InlineBytes() = default;
  InlineBytes(const InlineBytes& other) : size_(other.size_), heap_(other.heap_) {
    if (size_ <= kHeld) std::memcpy(held_, other.held_, size_);
  }
  InlineBytes(InlineBytes&& other) noexcept : size_(other.size_), heap_(std::move(other.heap_)) {
    if (size_ <= kHeld) std::memcpy(held_, other.held_, size_);
  }
  InlineBytes& operator=(const InlineBytes& other) {
    if (this != &other) *this = InlineBytes(other);
    return *this;
  }
  InlineBytes& operator=(InlineBytes&& other) noexcept {
    if (this == &other) return *this;
    size_ = other.size_;
    heap_ = std::move(other.heap_);
    if (size_ <= kHeld) std::memcpy(held_, other.held_, size_);
    return *this;
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const char* data() const { return size_ <= kHeld ? held_ : heap_.data(); }

  /// Copies the bytes `count` SGEs point at (the application's, during its post).
  void assign(const ibv_sge* sge, int count) {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += sge[i].length;
    if (total > kHeld) heap_.resize(total);
    char* into = total <= kHeld ? held_ : heap_.data();
    for (int i = 0; i < count; ++i) {
      if (sge[i].length == 0) continue;  // its address may be anything, null included
      std::memcpy(into, reinterpret_cast<const void*>(sge[i].addr), sge[i].length);
      into += sge[i].length;
    }
    size_ = total;
  }

 private:
  static constexpr size_t kHeld = 64;
  size_t size_ = 0;
  char held_[kHeld];  // the first size_ bytes, when size_ <= kHeld
  std::vector<char> heap_;
};

}  // namespace softrdma
