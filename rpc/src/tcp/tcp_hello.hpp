// What each side of a tcp:// connection sends first (see tcp_transport.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace rdmakit::rpc::detail {

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
/// The same for a hello still in bytes (StreamLink's check of the server's hello).
inline bool compatible_hello(std::span<const std::byte> bytes) noexcept {
  TcpHello peer;
  if (bytes.size() != sizeof peer) return false;
  std::memcpy(&peer, bytes.data(), sizeof peer);
  return compatible(peer);
}

}  // namespace rdmakit::rpc::detail
