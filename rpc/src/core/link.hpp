// The internal transport interface: one Link per session, one Listener per server. The core
// (sessions, calls, handles, timeouts) knows nothing else of a transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "core/frame.hpp"

namespace rdmakit::rpc::detail {

/// Requests and responses travel in separate send spaces where the transport has them (the
/// rings of shm and inproc), so that requests pinned by the receiver never hold up replies.
enum class Channel : uint8_t { request, response };

/// Receives the frames a link takes in. `cookie` identifies the frame to Link::release().
class FrameSink {
 public:
  virtual void on_frame(const FrameHeader& header, std::span<const std::byte> payload,
                        uint64_t cookie) = 0;

 protected:
  ~FrameSink() = default;
};

/// What both sides agreed on when the session was set up.
struct LinkLimits {
  uint32_t window = 0;             // calls in flight per direction
  uint32_t max_message_bytes = 0;  // largest payload either side may send
};

class Link {
 public:
  virtual ~Link() = default;

  // --- sending: frames are appended, then flush() hands them to the peer together.
  /// Room for a frame with header.length payload bytes: writes the header, returns where the
  /// payload goes (exactly header.length bytes), or nullptr when the send space is full now.
  virtual std::byte* begin(Channel channel, FrameHeader& header) = 0;
  /// The frame begun last on `channel` is complete.
  virtual void commit(Channel channel) = 0;
  /// Makes committed frames visible to the peer. Returns whether notify() is needed.
  virtual bool flush() = 0;
  /// After flush() and publish_fence() (core/publish_order.hpp): wakes the peer if it sleeps,
  /// marks its session ready. One fence serves every session flushed in a round.
  virtual void notify() {}

  // --- receiving
  /// Hands up to `budget` arrived frames to `sink`, in arrival order. Returns how many.
  virtual int receive(FrameSink& sink, int budget) = 0;
  /// The frame's bytes may be reused. Responses are released in arrival order, requests in
  /// any order.
  virtual void release(Channel channel, uint64_t cookie) = 0;

  // --- response space, reserved by the caller at call time
  /// Bytes of this side's incoming response space that a reply of `max_response` takes.
  virtual size_t reservation(uint32_t max_response) const = 0;
  /// Total incoming response space (SIZE_MAX: not bounded by the transport).
  virtual size_t response_capacity() const = 0;

  // --- liveness and sleeping
  /// The session can no longer carry traffic (peer gone, protocol error): why.
  virtual std::error_code failure() const = 0;
  /// Looks for a dead peer with a system call (the engine rate-limits it).
  virtual void check_alive() = 0;
  /// A descriptor that becomes readable when this link has input or its peer is gone (-1:
  /// the transport wakes the endpoint through its shared wake-up instead).
  virtual int wait_fd() const = 0;
  /// Blocking mode: ask the peer to signal us after its next flush (true) or not (false).
  virtual void set_sleeping(bool sleeping) = 0;
  /// Arrived frames wait to be received (a cheap look, used before sleeping).
  virtual bool has_input() const = 0;
  /// The engine gave this link's session `index`. A link that returns true marks its peer's
  /// session ready in the peer endpoint's doorbell whenever it publishes, so this side's
  /// engine visits the session only when marked (inproc); false: it is scanned every poll.
  virtual bool attach(uint32_t index) {
    (void)index;
    return false;
  }
  /// The session is closed: tell the peer now (the link's memory stays until it is destroyed,
  /// as the application may still hold requests in it).
  virtual void shut_down() = 0;

  /// Bytes allocated for this session on this side, if the transport reports it.
  virtual size_t memory_bytes() const noexcept { return 0; }

  const LinkLimits& limits() const noexcept { return limits_; }

 protected:
  LinkLimits limits_;
};

/// A server's source of new sessions.
class Listener {
 public:
  virtual ~Listener() = default;
  /// A newly connected session, or nullptr when none waits. Never blocks.
  virtual std::unique_ptr<Link> accept() = 0;
  /// Readable when a connection waits (-1: see Link::wait_fd()).
  virtual int wait_fd() const = 0;
  /// The URL clients connect to.
  virtual const std::string& url() const = 0;
};

}  // namespace rdmakit::rpc::detail
