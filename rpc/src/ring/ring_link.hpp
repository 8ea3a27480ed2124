// A session over four single-producer/single-consumer rings in shared memory (see
// segment.hpp), used by the shm and inproc transports. Frames are written in place at the
// producer's position and published once per flush with one release store; the consumer
// validates every position and header it reads (the peer may be another, buggy or hostile
// process) and releases requests in any order: a ring's space returns only for its
// released prefix, so a pinned request is never overwritten.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/link.hpp"
#include "ring/out_of_line.hpp"
#include "ring/segment.hpp"

namespace rdmakit::rpc::detail {

/// What differs between the ring transports: waking the peer, detecting its death, and
/// payloads too large for a ring (carried out of line).
class RingPeer {
 public:
  virtual ~RingPeer() = default;
  /// Called after a flush published frames; `peer_sleeping`: the peer asked for a signal.
  virtual void published(bool peer_sleeping) = 0;
  /// An error once the peer is gone (beyond the segment's closed flag).
  virtual std::error_code check_alive() = 0;
  virtual int wait_fd() const = 0;
  /// Sleeping ends: drop pending wake-up signals.
  virtual void woke() {}
  /// See Link::attach().
  virtual bool attach(uint32_t index) {
    (void)index;
    return false;
  }

  // Buffers of out-of-line payloads (see out_of_line.hpp).
  /// Sender: a new buffer of `bytes`; `handle` identifies it to the transport. nullptr on
  /// failure.
  virtual std::byte* create_buffer(size_t bytes, uint64_t& handle) = 0;
  /// Sender: the buffer is no longer used by this side.
  virtual void destroy_buffer(std::byte* data, size_t bytes, uint64_t handle) = 0;
  /// Sender: hand the buffer to the peer, under `tag`, before the frame announcing it is
  /// published. False on failure.
  virtual bool announce_buffer(uint64_t handle, uint32_t tag) = 0;
  /// Receiver: the buffer the peer announced under `tag` (`handle` from the frame), checked
  /// to hold at least `min_bytes`; empty when the peer announced no such buffer.
  virtual std::span<const std::byte> adopt_buffer(uint32_t tag, uint64_t handle,
                                                  size_t min_bytes) = 0;
  /// Receiver: an adopted buffer is no longer used by this side.
  virtual void drop_buffer(std::span<const std::byte> buffer) = 0;
};

class RingLink final : public Link {
 public:
  /// `side`: 0 for the connecting endpoint, 1 for the accepting one.
  RingLink(Segment segment, int side, std::unique_ptr<RingPeer> peer);
  ~RingLink() override;

  std::byte* begin(Channel channel, FrameHeader& header) override;
  void commit(Channel channel) override;
  bool flush() override;
  void notify() override;
  int receive(FrameSink& sink, int budget) override;
  void release(Channel channel, uint64_t cookie) override;
  size_t reservation(uint32_t max_response) const override;
  size_t response_capacity() const override { return ring_bytes_; }
  std::error_code failure() const override { return failure_; }
  void check_alive() override;
  int wait_fd() const override { return peer_->wait_fd(); }
  void set_sleeping(bool sleeping) override;
  bool has_input() const override;
  void shut_down() override;
  bool attach(uint32_t index) override { return peer_->attach(index); }

  /// Payloads up to this size travel inside the ring.
  size_t inline_max() const noexcept { return ring_bytes_ / 4; }

 private:
  struct Out {
    std::byte* base = nullptr;
    SharedWord* tail = nullptr;            // ours to write
    const SharedWord* released = nullptr;  // the peer's
    uint64_t pending = 0;                  // committed, not yet published
    uint64_t published = 0;
    uint64_t released_seen = 0;
    uint64_t begun_bytes = 0;  // size of the frame begun last (0: none)
    bool begun_out_of_line = false;
    std::unique_ptr<OutOfLineSender> out_of_line;
  };
  // Frames received and not yet released, in arrival order: a doubly linked list through a
  // fixed table (the peer's window bounds it), so a release anywhere costs O(1).
  struct Held {
    uint64_t start = 0;                 // ring position of the frame
    uint32_t out_of_line_slot = kNone;  // its payload's buffer slot, if out of line
    uint32_t previous = kNone;
    uint32_t next = kNone;
  };
  static constexpr uint32_t kNone = UINT32_MAX;
  struct In {
    std::byte* base = nullptr;
    const SharedWord* tail = nullptr;  // the peer's
    SharedWord* released = nullptr;    // ours to write
    uint64_t head = 0;
    uint64_t released_position = 0;  // as last published
    std::vector<Held> held;
    uint32_t oldest = kNone;
    uint32_t newest = kNone;
    uint32_t free = kNone;
    std::unique_ptr<OutOfLineReceiver> out_of_line;
  };

  void fail(std::error_code error) noexcept;
  /// Reads the peer's released position of `o`, checking it (false: protocol error).
  bool refresh_released(Out& o);
  bool receive_ring(In& in, Channel channel, FrameSink& sink, int& budget);
  void publish_released(In& in);

  Segment segment_;
  int side_;
  std::unique_ptr<RingPeer> peer_;
  uint32_t ring_bytes_;
  Out out_[2];  // by Channel
  In in_[2];    // by Channel
  std::error_code failure_;
  bool receiving_ = false;  // releases inside receive() are published once, at its end
};

}  // namespace rdmakit::rpc::detail
