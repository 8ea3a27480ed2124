// The bytes of an inline request, kept with its work request once the post returns (the
// application may reuse its buffer then). Most inline requests are small: their bytes stay
// in the record itself, where a heap allocation and its release per post to another host
// cost more than the rest of the record's bookkeeping.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace softrdma {

class InlineBytes {
 public:
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
  char held_[kHeld]{};
  std::vector<char> heap_;
};

}  // namespace softrdma
