// What StreamLink (stream_link.hpp) needs from the transport under it: an ordered, reliable
// byte stream to one peer. tcp:// gives it a socket (tcp/socket_stream.hpp); ud:// builds
// one from datagrams with sequence numbers, acknowledgements and retransmission
// (ud/ud_stream.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <system_error>

namespace rdmakit::rpc::detail {

class ByteStream {
 public:
  virtual ~ByteStream() = default;

  /// Hands the leading bytes of `bytes` to the peer: how many it took (the rest finds no room
  /// now and is offered again later).
  virtual size_t write(std::span<const std::byte> bytes) = 0;
  /// Reads into `space`: how many bytes arrived (0: none now, or the stream ended).
  virtual size_t read(std::span<std::byte> space) = 0;
  /// Why the stream can carry no more bytes once it ended (Errc::session_closed), else empty.
  virtual std::error_code ended() const = 0;
  /// Ends the stream and tells the peer.
  virtual void shut_down() = 0;

  /// Work the stream does on its own between reads and writes (acknowledgements,
  /// retransmissions); called at every receive() of the link.
  virtual void progress() {}
  /// Bytes wait to be read that wait_fd() may not announce again.
  virtual bool readable() const { return false; }
  /// Readable when bytes arrive or the stream ends (or it needs progress()).
  virtual int wait_fd() const = 0;
  /// The endpoint goes to sleep (true) or woke up (false); `output_waiting`: write() left
  /// bytes that only this side can send, so room for them must wake it too.
  virtual void set_sleeping(bool sleeping, bool output_waiting) = 0;
  /// Bytes allocated for this stream on this side.
  virtual size_t memory_bytes() const noexcept { return 0; }
};

}  // namespace rdmakit::rpc::detail
