#include "ring/out_of_line.hpp"

#include <algorithm>
#include <bit>

#include "ring/ring_link.hpp"

namespace rdmakit::rpc::detail {
OutOfLineSender::~OutOfLineSender() {
  for (Buffer& b : slots_) {
    if (b.data != nullptr) peer_.destroy_buffer(b.data, b.bytes, b.handle);
  }
}

std::byte* OutOfLineSender::take(size_t bytes, uint32_t& tag, uint64_t& handle) {
  int fits = -1, replaceable = -1;
  // Linear, but only for payloads too large for a ring, each copied in full anyway.
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Buffer& b = slots_[i];
    if (b.data != nullptr && !idle(i)) continue;  // the peer still holds a frame of it
    if (b.data != nullptr && b.bytes >= bytes) {
      fits = i;
      break;
    }
    if (replaceable < 0 || b.data == nullptr) replaceable = i;
  }
  const int slot = fits >= 0 ? fits : replaceable;
  if (slot < 0) return nullptr;
  Buffer& b = slots_[slot];
  announce_ = fits < 0;
  if (announce_) {  // a new buffer for this slot, replacing a free one too small
    if (b.data != nullptr) peer_.destroy_buffer(b.data, b.bytes, b.handle);
    const size_t size = std::bit_ceil(std::max(bytes, kSmallestOutOfLineBuffer));
    b.data = peer_.create_buffer(size, b.handle);
    if (b.data == nullptr) {
      b.bytes = 0;  // `sent` stays: the peer's released count is cumulative
      return nullptr;
    }
    b.bytes = size;
    ++b.generation;
  }
  taken_ = slot;
  tag = OutOfLineTag{static_cast<uint32_t>(slot), b.generation, announce_, channel_}.encode();
  handle = b.handle;
  return b.data;
}

bool OutOfLineSender::commit() {
  Buffer& b = slots_[taken_];
  ++b.sent;
  taken_ = -1;
  if (!announce_) return true;
  return peer_.announce_buffer(b.handle, OutOfLineTag{static_cast<uint32_t>(&b - slots_.data()),
                                                      b.generation, true, channel_}
                                             .encode());
}

OutOfLineReceiver::~OutOfLineReceiver() {
  for (Buffer& b : slots_) {
    if (!b.data.empty()) peer_.drop_buffer(b.data);
  }
}

std::span<const std::byte> OutOfLineReceiver::open(uint32_t tag, uint64_t handle, size_t bytes,
                                                   uint32_t& slot) {
  const OutOfLineTag t = OutOfLineTag::decode(tag);
  if (t.slot >= slots_.size() || t.channel != channel_) return {};
  Buffer& b = slots_[t.slot];
  if (t.announce) {
    // Replacing a buffer that frames still use would pull memory from under them.
    if (b.uses != 0) return {};
    if (!b.data.empty()) peer_.drop_buffer(b.data);
    b.data = peer_.adopt_buffer(tag, handle, bytes);
    b.generation = t.generation;
    if (b.data.empty()) return {};
  }
  if (b.data.empty() || b.generation != t.generation || b.data.size() < bytes) return {};
  ++b.uses;
  slot = t.slot;
  return b.data.first(bytes);
}

}  // namespace rdmakit::rpc::detail
