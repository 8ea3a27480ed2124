// What ud:// puts on the wire: the hello each side sends over the TCP connection that sets a
// session up (where its UD queue pair is, its session number, its limits), and the header
// of every datagram.
//
// A session's bytes form one ordered stream per direction (stream/stream_link.hpp carries
// frames on it), cut into datagrams of at most the path MTU. Each data datagram has a
// sequence number; the receiver takes only the next one in order (go-back-N: a gap drops
// what follows, the sender resends from the oldest unacknowledged datagram after a
// timeout), so a duplicate is never taken twice and every request runs once. Every datagram
// carries the sender's acknowledgement: the sequence number of the next data datagram it
// expects, all before it consumed and their receive buffers posted again.
#pragma once

#include <cstdint>

namespace rdmakit::rpc::detail::ud {

inline constexpr uint32_t kMagic = 0x31647572;  // "rud1" in little-endian bytes
inline constexpr uint32_t kVersion = 1;

/// Sent by each side over the setup connection, the client first.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint8_t gid[16];  // the endpoint's UD queue pair
  uint32_t qpn;
  uint32_t qkey;
  uint32_t session;  // the sender's session number: the peer puts it in every datagram
  uint32_t window;
  uint32_t max_message_bytes;
  uint32_t max_payload;  // data bytes per datagram the sender can receive
  uint32_t status;       // server: 0 admitted, else the Errc that refuses the client
  uint32_t reserved;     // zero
};
static_assert(sizeof(Hello) == 56, "the hello's size is part of the protocol");

enum class Kind : uint8_t {
  data = 1,     // stream bytes, numbered
  ack = 2,      // only the acknowledgement
  closing = 3,  // the sender closed the session
};

struct PacketHeader {
  uint32_t session;  // the receiver's session number
  uint32_t seq;      // data: this datagram's number
  uint32_t ack;      // the next data datagram the sender of this one expects
  uint16_t bytes;    // data bytes after the header
  Kind kind;
  uint8_t reserved;  // zero
};
static_assert(sizeof(PacketHeader) == 16);

/// Sequence numbers wrap: a is before b.
constexpr bool before(uint32_t a, uint32_t b) noexcept {
  return static_cast<int32_t>(a - b) < 0;
}
static_assert(before(0xffffffffu, 0) && !before(0, 0xffffffffu) && !before(5, 5));

}  // namespace rdmakit::rpc::detail::ud
