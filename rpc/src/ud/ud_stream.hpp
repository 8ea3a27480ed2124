// A ud:// session's byte stream (see ud_wire.hpp for the protocol). Outgoing bytes are cut
// into datagrams in a registered window of kPacketWindow slots, each kept until the peer
// acknowledges it; after a timeout without progress every unacknowledged datagram is sent
// again, oldest first (go-back-N), with the timeout doubling up to a bound, and a peer that
// acknowledges nothing for Options::peer_timeout is declared gone. Arriving data datagrams
// are taken only in order; they stay in the device's receive buffers until read() copies
// them into the link's chunks, and only then are they acknowledged and the buffers posted
// again, so a session never holds more receive buffers than its reserved share.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "rdmakit/allocator.hpp"
#include "stream/byte_stream.hpp"
#include "ud/ud_device.hpp"

namespace rdmakit::rpc::detail::ud {

class UdStream final : public ByteStream, private UdDevice::Receiver {
 public:
  /// Attaches to `device` (nullptr with Errc::too_many_sessions when it admits no more
  /// sessions). `silence`: how long unacknowledged data may wait before the peer is gone.
  static std::unique_ptr<UdStream> open(std::shared_ptr<UdDevice> device,
                                        std::chrono::milliseconds silence, std::error_code& error);
  UdStream(std::shared_ptr<UdDevice> device, std::chrono::milliseconds silence);
  ~UdStream() override;
  UdStream(const UdStream&) = delete;
  UdStream& operator=(const UdStream&) = delete;

  /// This side's session number, for the hello.
  uint32_t session() const noexcept { return session_; }
  /// Where the peer is, from its hello. Nothing is sent before.
  void connect(const Hello& peer);

  size_t write(std::span<const std::byte> bytes) override;
  size_t read(std::span<std::byte> space) override;
  std::error_code ended() const override;
  void shut_down() override;
  void progress() override;
  bool readable() const override;
  int wait_fd() const override { return wait_fd_; }
  void set_sleeping(bool sleeping, bool output_waiting) override;
  size_t memory_bytes() const noexcept override;

 private:
  struct SentSlot {
    uint32_t bytes = 0;      // header and data
    uint64_t last_post = 0;  // the device's number of its latest retransmission
  };
  struct Arrived {
    uint32_t slot;  // the device's receive buffer
    std::span<const std::byte> data;
    size_t read = 0;  // bytes of data already copied out
  };

  bool on_packet(const PacketHeader& header, std::span<const std::byte> data,
                 uint32_t slot) override;
  bool post(uint32_t seq, bool retransmission);
  void send_control(Kind kind);
  std::byte* slot_at(uint32_t seq) const noexcept;
  uint32_t consumed() const noexcept { return expected_ - static_cast<uint32_t>(arrived_.size()); }

  std::shared_ptr<UdDevice> device_;
  std::chrono::milliseconds silence_;
  uint32_t session_ = 0;
  bool attached_ = false;
  uint32_t peer_session_ = 0;
  uint32_t max_payload_ = 0;  // towards the peer
  std::optional<AddressHandle> peer_;
  RawRegion window_;  // kPacketWindow slots of outgoing datagrams
  uint32_t slot_bytes_ = 0;
  std::array<SentSlot, kPacketWindow> sent_{};
  uint32_t next_seq_ = 0;  // the next data datagram's number
  uint32_t acked_ = 0;     // the oldest not acknowledged
  Clock::duration rto_;
  Clock::time_point retransmit_at_{};
  Clock::time_point last_progress_{};
  Clock::time_point now_{};
  uint32_t expected_ = 0;  // the next data datagram we take
  std::deque<Arrived> arrived_;
  uint32_t ack_told_ = 0;  // the acknowledgement we last sent
  // An acknowledgement was owed at the previous progress(): what we read is acknowledged
  // by a pure ack only if no data of ours has carried it by the next progress(), so a call
  // costs two datagrams, not four.
  bool ack_owed_ = false;
  bool ack_due_ = false;  // a duplicate or a gap arrived: the peer needs our position again
  bool peer_closed_ = false;
  bool shut_ = false;
  std::error_code ended_;
  int wait_fd_ = -1;
};

}  // namespace rdmakit::rpc::detail::ud
