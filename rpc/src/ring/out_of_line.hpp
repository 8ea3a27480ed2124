// Payloads too large for a ring travel out of line, in buffers the sender keeps and reuses:
// slots per ring, each holding one buffer that the peer maps (shm) or is handed (inproc) once,
// when it is announced. The consumer counts, per slot and in shared memory, the frames it has
// released; a buffer is reused once every frame sent with it is released, whatever the order
// (a request held for long pins only its own buffer). So steady large traffic costs a copy and
// no system call, page fault or allocation per message. There is a slot for every frame the
// peer may hold unreleased (its window, and two more), so an honest peer never leaves a reply
// without a buffer; a session keeps as many buffers as it once needed at the same time.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rdmakit::rpc::detail {

class RingPeer;

/// The frame header's out_of_line_tag: buffer slot, its generation, whether this frame
/// announces the slot's buffer (the peer takes it before reading the payload), and the ring
/// (request or response) the buffer belongs to.
struct OutOfLineTag {
  static constexpr uint32_t kMaxSlots = 0xffff;  // 16 bits of the tag
  uint32_t slot;
  uint8_t generation;  // a check that both sides agree which buffer a slot holds
  bool announce;
  uint8_t channel;  // 0 or 1, as Channel

  uint32_t encode() const noexcept {
    return slot | (uint32_t{generation} << 16) | (announce ? 1u << 24 : 0) |
           (uint32_t{channel} << 25);
  }
  static OutOfLineTag decode(uint32_t tag) noexcept {
    return {tag & 0xffff, static_cast<uint8_t>((tag >> 16) & 0xff), ((tag >> 24) & 1) != 0,
            static_cast<uint8_t>((tag >> 25) & 1)};
  }
};
/// Buffers come in powers of two of at least this, so that slightly different sizes reuse one.
inline constexpr size_t kSmallestOutOfLineBuffer = 64 * 1024;
/// The largest buffer a peer limited to `max_message_bytes` needs: a larger one is refused.
inline size_t largest_out_of_line_buffer(uint32_t max_message_bytes) noexcept {
  return std::bit_ceil(std::max<size_t>(max_message_bytes, kSmallestOutOfLineBuffer));
}
/// Slots for a peer that may hold `window` calls (and a liveness probe) unreleased.
inline size_t out_of_line_slots(uint32_t window) noexcept {
  return std::min<size_t>(size_t{window} + 2, OutOfLineTag::kMaxSlots);
}

class OutOfLineSender {
 public:
  /// `released`: the ring's counters of released frames per slot (written by the peer).
  OutOfLineSender(RingPeer& peer, uint8_t channel, uint32_t window,
                  const std::atomic<uint64_t>* released)
      : peer_(peer), channel_(channel), released_(released), slots_(out_of_line_slots(window)) {}
  ~OutOfLineSender();
  OutOfLineSender(const OutOfLineSender&) = delete;
  OutOfLineSender& operator=(const OutOfLineSender&) = delete;

  /// A buffer of at least `bytes` none of whose frames the peer still holds; nullptr when
  /// every slot is in use (the peer holds more frames than it may) or no memory could be had.
  std::byte* take(size_t bytes, uint32_t& tag, uint64_t& handle);
  /// The frame carrying the buffer taken last is committed; a new buffer is handed to the
  /// peer now, before the frame is published. False: it could not be.
  bool commit();

 private:
  struct Buffer {
    std::byte* data = nullptr;
    size_t bytes = 0;
    uint64_t handle = 0;
    uint64_t sent = 0;  // frames sent with this slot, all its buffers together
    uint8_t generation = 0;
  };
  bool idle(size_t slot) const noexcept {
    return released_[slot].load(std::memory_order_acquire) == slots_[slot].sent;
  }
  RingPeer& peer_;
  uint8_t channel_;
  const std::atomic<uint64_t>* released_;
  std::vector<Buffer> slots_;
  int taken_ = -1;
  bool announce_ = false;
};

class OutOfLineReceiver {
 public:
  /// `released`: the ring's counters of released frames per slot, which this side writes.
  OutOfLineReceiver(RingPeer& peer, uint8_t channel, uint32_t window,
                    std::atomic<uint64_t>* released)
      : peer_(peer), channel_(channel), released_(released), slots_(out_of_line_slots(window)) {}
  ~OutOfLineReceiver();
  OutOfLineReceiver(const OutOfLineReceiver&) = delete;
  OutOfLineReceiver& operator=(const OutOfLineReceiver&) = delete;

  /// The `bytes` of payload of an arrived frame, and its slot for close(); empty when the
  /// frame's tag does not name a buffer the peer announced (a protocol error). A slot whose
  /// buffer frames still use cannot be announced again.
  std::span<const std::byte> open(uint32_t tag, uint64_t handle, size_t bytes, uint32_t& slot);
  /// A frame opened on `slot` is released.
  void close(uint32_t slot) noexcept {
    Buffer& b = slots_[slot];
    --b.uses;
    released_[slot].store(++b.released, std::memory_order_release);
  }

 private:
  struct Buffer {
    std::span<const std::byte> data;
    uint8_t generation = 0;
    uint32_t uses = 0;      // frames received and not released
    uint64_t released = 0;  // frames released, all its buffers together
  };
  RingPeer& peer_;
  uint8_t channel_;
  std::atomic<uint64_t>* released_;
  std::vector<Buffer> slots_;
};

}  // namespace rdmakit::rpc::detail
