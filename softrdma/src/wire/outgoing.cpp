#include "wire/outgoing.hpp"

#include <algorithm>

namespace softrdma::wire {

Outgoing::Outgoing(const iovec* iov, int count, size_t offset, int first_borrowed) {
  for (int i = 0; i < count; ++i) {
    const size_t skip = std::min(offset, iov[i].iov_len);
    offset -= skip;
    const char* base = static_cast<const char*>(iov[i].iov_base) + skip;
    const size_t length = iov[i].iov_len - skip;
    if (length == 0) continue;
    if (i >= first_borrowed)
      borrowed_.push_back(iovec{const_cast<char*>(base), length});
    else
      owned_.insert(owned_.end(), base, base + length);
  }
}

int Outgoing::unsent(iovec* out, int max) const {
  int n = 0;
  if (owned_sent_ < owned_.size() && n < max)
    out[n++] = iovec{const_cast<char*>(owned_.data() + owned_sent_), owned_.size() - owned_sent_};
  for (size_t i = 0; i < borrowed_.size() && n < max; ++i) out[n++] = borrowed_[i];
  return n;
}

void Outgoing::advance(size_t n) {
  const size_t from_owned = std::min(n, owned_.size() - owned_sent_);
  owned_sent_ += from_owned;
  n -= from_owned;
  size_t done = 0;
  for (; done < borrowed_.size() && n >= borrowed_[done].iov_len; ++done)
    n -= borrowed_[done].iov_len;
  borrowed_.erase(borrowed_.begin(), borrowed_.begin() + static_cast<std::ptrdiff_t>(done));
  if (n > 0) {
    borrowed_.front().iov_base = static_cast<char*>(borrowed_.front().iov_base) + n;
    borrowed_.front().iov_len -= n;
  }
}

void Outgoing::own_the_rest() {
  for (const iovec& range : borrowed_) {
    const char* base = static_cast<const char*>(range.iov_base);
    owned_.insert(owned_.end(), base, base + range.iov_len);
  }
  borrowed_.clear();
}

}  // namespace softrdma::wire
