// One per endpoint for the UD transport: the device, one UD queue pair that every session
// of the endpoint sends and receives on, its completion queue (with a completion channel for
// sleeping), the receive buffers posted on it, and the routing of arriving datagrams to the
// sessions by session number.
//
// Receive buffers are shared, but each admitted session has its own share reserved: a
// session may have at most kPacketWindow data datagrams unacknowledged towards us, and each
// of them draws at most one acknowledgement from us, so a session never holds more than
// 2 * kPacketWindow of our receive buffers and sessions are admitted only while every one of
// them has its share. Responses to an incast are then never dropped for lack of buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <system_error>
#include <vector>

#include "rdmakit/allocator.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/rpc/options.hpp"
#include "ud/ud_wire.hpp"

namespace rdmakit::rpc::detail::ud {

/// Data datagrams a session may have unacknowledged (its credits).
inline constexpr uint32_t kPacketWindow = 16;
/// Receive buffers each admitted session has reserved.
inline constexpr uint32_t kReservedPerSession = 2 * kPacketWindow;

class UdDevice {
 public:
  /// What a session implements to get its datagrams.
  class Receiver {
   public:
    /// A datagram for this session. Returns true when the session keeps receive buffer
    /// `slot` (`data` points into it) until it calls repost(slot).
    virtual bool on_packet(const PacketHeader& header, std::span<const std::byte> data,
                           uint32_t slot) = 0;

   protected:
    ~Receiver() = default;
  };

  /// Opens the device (RDMAKIT_DEVICE or the first active one).
  static std::shared_ptr<UdDevice> open(std::error_code& error);
  explicit UdDevice(std::shared_ptr<Resources> resources);
  ~UdDevice();
  UdDevice(const UdDevice&) = delete;
  UdDevice& operator=(const UdDevice&) = delete;

  const Resources& resources() const noexcept { return *resources_; }
  /// The endpoint's UD queue pair as peers address it.
  QpAddress address() const { return qp_.address(); }
  /// Data bytes per datagram this endpoint can receive (the path MTU less the header).
  uint32_t max_payload() const noexcept { return max_payload_; }
  /// Bytes of one receive buffer.
  uint32_t receive_slot_bytes() const noexcept { return slot_bytes_; }

  /// A session number for `receiver`, or nothing with Errc::too_many_sessions when the
  /// receive buffers reserved for the sessions admitted already leave no share for another.
  std::optional<uint32_t> attach(Receiver* receiver, std::error_code& error);
  void detach(uint32_t session) noexcept;

  /// Posts one datagram (`packet` in memory registered with `lkey`, or inline when it is
  /// small). `retransmission`: its buffer was posted before, so the post is followed to
  /// completion (see sends_completed_through()). False when the send queue is full now.
  /// The post's number goes to `post` (0: nothing will read the buffer).
  bool send(const AddressHandle& to, std::span<const std::byte> packet, uint32_t lkey,
            bool retransmission, uint64_t& post);
  /// Every post up to this number has completed: its buffer may be reused.
  uint64_t sends_completed_through() const noexcept { return completed_; }

  /// Takes every completion waiting and hands datagrams to their sessions.
  void poll();
  void repost(uint32_t slot);

  /// Sleeping: the channel fires on the next completion, and the timer at the earliest
  /// `wake_at` of the sessions (one that waits for acknowledgements must retransmit even
  /// when nothing arrives).
  void arm(std::optional<Clock::time_point> wake_at);
  void disarm();
  /// An epoll set of the completion channel and the timer.
  int wake_fd() const noexcept { return wake_fd_; }

 private:
  struct Entry {
    Receiver* receiver = nullptr;
    uint16_t generation = 0;
  };
  void post_receives(std::span<const uint32_t> slots);
  bool dropped_by_fault_injection();

  std::shared_ptr<Resources> resources_;
  QueuePair qp_;
  uint32_t slot_bytes_ = 0;  // the 40-byte GRH, then up to the MTU
  uint32_t max_payload_ = 0;
  uint32_t receives_ = 0;
  RawRegion receive_slots_;
  std::vector<Entry> sessions_;  // by the session number's low 16 bits
  std::vector<uint16_t> free_entries_;
  uint32_t admitted_ = 0;
  std::vector<uint32_t> to_repost_;
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
  uint32_t unsignalled_ = 0;
  uint32_t send_depth_ = 0;
  int timer_fd_ = -1;
  int wake_fd_ = -1;
  bool armed_ = false;
  std::optional<Clock::time_point> timer_at_;  // the earliest wake-up a session asked for
  double loss_ = 0;  // RDMAKIT_UD_LOSS: the fraction of datagrams dropped on purpose (tests)
  std::minstd_rand random_{12345};
};

}  // namespace rdmakit::rpc::detail::ud
