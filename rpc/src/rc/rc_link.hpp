// A session over one RC queue pair (rc_transport.cpp sets it up; rc_wire.hpp has the wire
// format). Each side has two receive rings (requests, responses) that the peer fills with
// RDMA WRITE_WITH_IMM, one work request per contiguous span of whole frames, all spans of a
// flush posted together. Frames are built in a local staging ring at the positions they take
// in the peer's ring, so a flush is a copy by the device, never by the CPU. A frame never
// crosses the end of a ring: the sender skips to the start and says so in the immediate.
//
// Credits are ring space: the receiver releases frames (requests in any order, a ring's
// space returns up to its oldest held frame) and returns its released position in the
// immediate of its own traffic in the other direction, or, when none flows, by an RDMA
// WRITE into the sender's control block.
//
// Payloads larger than a quarter of a ring go out of line: the frame carries the address
// and the rkey of a grant (rdmakit's GrantTable) over the sender's buffer, the receiver pulls
// the payload with one RDMA READ into registered memory of its own, delivers the frame, and
// tells the sender, which revokes the grant. A grant also expires after the call timeout
// (revoked at the next liveness check). Payload buffers on both sides come from the
// endpoint's PayloadPool, registered once and reused.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "core/link.hpp"
#include "rc/rc_device.hpp"
#include "rc/rc_wire.hpp"
#include "rdmakit/allocator.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/grant.hpp"

namespace rdmakit::rpc::detail::rc {

class RcLink final : public Link, private RcDevice::Client {
 public:
  struct Setup {
    LinkLimits limits;
    uint32_t ring_bytes = 0;       // our receive rings, each
    uint32_t peer_ring_bytes = 0;  // the peer's
    std::chrono::milliseconds grant_lifetime{30'000};
  };
  /// Takes a connected QP attached to `device`'s shared receive queue, allocates the rings
  /// and SENDs the hello. nullptr with `error` set on failure.
  static std::unique_ptr<RcLink> open(std::shared_ptr<RcDevice> device, Connection connection,
                                      const Setup& setup, std::error_code& error);
  /// Waits for the peer's hello (the connecting side, whose connect() may block): frames
  /// committed before it would wait for this side's next poll. False at the deadline or on
  /// failure.
  bool await_peer(std::chrono::steady_clock::time_point deadline);
  RcLink(std::shared_ptr<RcDevice> device, Connection connection, const Setup& setup);
  ~RcLink() override;
  RcLink(const RcLink&) = delete;
  RcLink& operator=(const RcLink&) = delete;

  std::byte* begin(Channel channel, FrameHeader& header) override;
  void commit(Channel channel) override;
  bool flush() override;
  int receive(FrameSink& sink, int budget) override;
  void release(Channel channel, uint64_t cookie) override;
  size_t reservation(uint32_t max_response) const override;
  size_t response_capacity() const override;
  std::error_code failure() const override;
  void check_alive() override;
  int wait_fd() const override { return wait_fd_; }
  void set_sleeping(bool sleeping) override;
  bool has_input() const override;
  void shut_down() override;

  /// Bytes registered for this session on this side (rings, control block).
  size_t memory_bytes() const noexcept override;

 private:
  struct Grant {
    uint64_t id = 0;
    RawRegion payload;  // from the device's payload pool
  };
  struct Out {
    uint64_t released = 0;   // how far the peer has released this ring, as we know it
    uint64_t pending = 0;    // end of the committed frames
    uint64_t published = 0;  // end of what was written to the peer
    // Within [published, pending): where the data before a skip to the next ring start ends.
    std::optional<uint64_t> skip_from;
    struct Begun {
      uint64_t at = 0;
      uint64_t bytes = 0;
      Grant grant;
    };
    std::optional<Begun> begun;
    std::deque<Grant> grants;  // out-of-line payloads sent, oldest first
    uint32_t pulls_unsent = 0;
  };
  struct Held {
    uint64_t start = 0;
    bool released = false;
    RawRegion pulled;  // an out-of-line payload, read into our memory (the payload pool)
  };
  struct In {
    uint64_t head = 0;                                // the next frame to hand out starts here
    uint64_t arrived = 0;                             // end of the data that arrived
    std::deque<std::pair<uint64_t, uint64_t>> skips;  // (from, to): jumps to a ring start
    std::deque<Held> held;    // frames handed out, oldest first; cookie = sequence number
    uint64_t first_held = 0;  // the sequence number of held.front()
    uint64_t released = 0;    // the released prefix
    uint64_t released_told = 0;
    // An out-of-line payload being pulled: the frame waits (frames are handed out in order).
    bool pulling = false;
    bool pulled = false;
    RawRegion pull_buffer;
    FrameHeader pull_header{};
    uint32_t pulls_done = 0;  // pulls to tell the peer about
  };

  void on_completion(const ibv_wc& wc, std::span<const std::byte> sent) override;
  void on_hello(std::span<const std::byte> sent);
  void on_span(Channel channel, uint32_t imm, uint32_t bytes);
  void on_pulled(Channel channel, uint32_t count);
  void fail(std::error_code why) noexcept;
  void withdraw(Grant& grant) noexcept;
  int deliver(Channel channel, FrameSink& sink, int budget);
  bool start_pull(In& in, const FrameHeader& h);
  void advance_released(In& in) noexcept;
  /// Posts committed spans, and with `with_credits` our released positions if no span
  /// carries them. False when nothing could be posted now.
  bool write_pending(bool with_credits);
  void refresh_released(Channel channel) noexcept;
  std::byte* ring(std::byte* base, Channel channel, uint32_t ring_bytes) const noexcept;

  std::shared_ptr<RcDevice> device_;
  Setup setup_;
  uint32_t inline_max_;
  GrantTable grants_;
  RawRegion receive_;  // our two receive rings, then the control block the peer writes
  RawRegion staging_;  // the frames we send, at the offsets they take in the peer's rings
  Out out_[2];         // by Channel
  In in_[2];           // by Channel
  uint32_t qpn_ = 0;
  uint32_t send_depth_ = 0;
  uint32_t inline_size_ = 0;
  uint32_t sends_outstanding_ = 0;  // work requests not known complete
  uint32_t unsignalled_ = 0;
  std::optional<Hello> peer_;  // where we write; until the peer's hello arrives we wait
  int wait_fd_ = -1;
  bool peer_closed_ = false;
  std::error_code failure_;
  Connection connection_;  // last: its QP goes first, before the memory it points into
};

}  // namespace rdmakit::rpc::detail::rc
