// A session over one TCP connection (tcp_transport.cpp sets it up). Both channels share the
// byte stream, in commit order, as the same frames the ring transports carry, payloads
// always inline. Frames are built in a growing send buffer and written by flush() with one
// send(); what the socket does not take stays for the next flush (or receive()). Arriving
// frames are validated (the peer may be buggy or hostile) and handed out where they were
// read, in receive chunks that stay until their frames are released (see
// receive_chunks.hpp). The engine waits for input only; a link with output the socket did
// not take also wakes its sleeping endpoint when the socket has room again.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <system_error>
#include <vector>

#include "core/link.hpp"
#include "tcp/receive_chunks.hpp"

namespace rdmakit::rpc::detail {

/// What each side sends first on a connection (see tcp_transport.cpp).
struct TcpHello {
  uint64_t magic;
  uint32_t version;
  uint32_t window;
  uint32_t max_message_bytes;
  uint32_t reserved;  // zero
};
static_assert(sizeof(TcpHello) == 24, "the hello's size is part of the protocol");
inline constexpr uint64_t kTcpHelloMagic = 0x317063722d6b72;  // "rk-rpc1" in little-endian bytes
inline constexpr uint32_t kTcpHelloVersion = 1;

/// The peer speaks this protocol, in this version.
inline bool compatible(const TcpHello& peer) noexcept {
  return peer.magic == kTcpHelloMagic && peer.version == kTcpHelloVersion;
}

class TcpLink final : public Link {
 public:
  /// The session of `fd`, a connected non-blocking socket whose own hello is sent (the link
  /// takes it, and closes it on failure). `awaits_hello`: the peer's hello has not been
  /// read; the link reads and checks it before any frame.
  static std::unique_ptr<Link> open(int fd, LinkLimits limits, bool awaits_hello,
                                    std::error_code& error);
  TcpLink(int fd, int wake_fd, LinkLimits limits, bool awaits_hello);
  ~TcpLink() override;
  TcpLink(const TcpLink&) = delete;
  TcpLink& operator=(const TcpLink&) = delete;

  std::byte* begin(Channel channel, FrameHeader& header) override;
  void commit(Channel channel) override;
  bool flush() override {
    send_pending();
    return false;  // the peer's socket wakes it
  }
  int receive(FrameSink& sink, int budget) override;
  void release(Channel channel, uint64_t cookie) override;
  size_t reservation(uint32_t max_response) const override { return frame_bytes(max_response); }
  /// Not bounded: a reply's buffer grows as needed (the window bounds the total).
  size_t response_capacity() const override { return SIZE_MAX; }
  std::error_code failure() const override;
  /// receive() sees the connection end (recv() returns 0 or an error): nothing to add.
  void check_alive() override {}
  int wait_fd() const override { return wake_fd_; }
  /// Arriving data wakes a sleeping endpoint; so does room for output the socket did not
  /// take, which only this side can send.
  void set_sleeping(bool sleeping) override;
  bool has_input() const override;
  void shut_down() override;

 private:
  void send_pending();
  /// The peer broke the protocol.
  void refuse_peer();
  bool read_hello();
  int deliver(FrameSink& sink, int budget);
  bool read_some();

  int fd_;
  int wake_fd_;  // an epoll set of the socket: readable, or writable while output waits
  bool waking_for_room_ = false;
  std::array<std::byte, sizeof(TcpHello)> hello_{};
  size_t hello_missing_;  // bytes of the peer's hello not read yet
  std::vector<std::byte> out_;
  size_t sent_ = 0;       // out_[0, sent_) went out
  size_t committed_ = 0;  // out_[0, committed_) is complete frames
  ReceiveChunks in_;
  // The connection ended (EOF, reset, failed send): reported once the frames that arrived
  // before it are handed out.
  std::error_code closed_;
  std::error_code failure_;  // a protocol error: reported at once
};

}  // namespace rdmakit::rpc::detail
