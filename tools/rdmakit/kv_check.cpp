#include "kv_check.hpp"

#include "kv_values.hpp"

namespace rdmakit::tool::kv {

Writers::Writers(uint32_t first, uint32_t count, uint64_t keys)
    : first_(first),
      count_(count),
      issued_(std::make_unique<std::atomic<uint64_t>[]>(count)),
      deleted_(std::make_unique<std::atomic<bool>[]>(keys)) {}

History::History(Writers& writers, uint32_t index, uint64_t keys, uint32_t value_size)
    : writers_(writers),
      index_(index),
      value_size_(value_size),
      exclusive_(writers.count() == 1),
      keys_(keys) {}

uint64_t History::begin_write(uint64_t key, bool erase) noexcept {
  const uint64_t seq = ++seq_;
  KeyState& k = keys_[key];
  k.issued = seq;
  if (erase) {
    k.deleted = seq;
    writers_.deleted(key).store(true, std::memory_order_relaxed);
  }
  writers_.issued(index_).store(seq, std::memory_order_release);
  return make_stamp(writer(), seq);
}

void History::acknowledge(uint64_t key, uint64_t stamp, bool erase) noexcept {
  KeyState& k = keys_[key];
  const uint64_t seq = seq_of(stamp);
  if (seq > (k.acked >> 1)) k.acked = seq << 1 | (erase ? 1 : 0);
}

const char* History::check(uint64_t key, Ticket ticket,
                           std::optional<std::span<const std::byte>> value) const noexcept {
  const KeyState& k = keys_[key];
  const uint64_t acked_seq = ticket.acked >> 1;
  const bool acked_erase = (ticket.acked & 1) != 0;
  if (!value) {
    if (acked_seq != 0 && acked_erase) return nullptr;
    if (k.deleted > acked_seq) return nullptr;  // an own DELETE issued since
    if (!exclusive_ && writers_.deleted(key).load(std::memory_order_relaxed)) return nullptr;
    return "not found, but no DELETE of the key could have taken effect";
  }
  if (value->size() != value_size_) return "a value of the wrong size";
  const std::optional<uint64_t> stamp = value_stamp(key, *value);
  if (!stamp) return "bytes that are not a value of this key";
  const uint32_t w = writer_of(*stamp);
  const uint64_t seq = seq_of(*stamp);
  if (w == writer()) {
    if (seq == 0 || seq > k.issued) return "a value this client never wrote to the key";
    if (acked_seq != 0 && (seq < acked_seq || (seq == acked_seq && acked_erase)))
      return "a stale value, older than the client's last acknowledged write";
    return nullptr;
  }
  if (exclusive_) return "a value written by another writer";
  if (w < writers_.first() || w - writers_.first() >= writers_.count())
    return "a value from an unknown writer";
  if (seq == 0 || seq > writers_.issued(w - writers_.first()).load(std::memory_order_acquire))
    return "a value its writer never issued";
  return nullptr;
}

}  // namespace rdmakit::tool::kv
