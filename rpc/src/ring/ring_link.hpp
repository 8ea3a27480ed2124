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

  /// A buffer of `bytes` for an out-of-line payload; `ref` goes into the frame.
  virtual std::byte* allocate_out_of_line(size_t bytes, uint64_t& ref) = 0;
  /// The frame carrying `ref` is committed: hand the buffer over (before it is published).
  virtual bool send_out_of_line(uint64_t ref, std::byte* buffer, size_t bytes) = 0;
  /// Receiver: the payload of an arrived frame (empty: the reference is not valid).
  virtual std::span<const std::byte> open_out_of_line(uint64_t ref, size_t bytes) = 0;
  /// Receiver: the payload opened by open_out_of_line() is released.
  virtual void close_out_of_line(std::span<const std::byte> payload) = 0;
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
    std::byte* begun_out_of_line = nullptr;
    uint64_t begun_ref = 0;
    size_t begun_length = 0;
  };
  // Frames received and not yet released, in arrival order: a doubly linked list through a
  // fixed table (the peer's window bounds it), so a release anywhere costs O(1).
  struct Held {
    uint64_t start = 0;  // ring position of the frame
    std::span<const std::byte> out_of_line;
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
  };

  void fail(std::error_code error) noexcept;
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
