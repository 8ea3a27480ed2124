// The frame every transport carries: a 32-byte header, then the payload padded to 16
// bytes, so that a 32-byte RPC is one cache line and payloads are 16-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmakit::rpc::detail {

enum class FrameKind : uint8_t {
  request = 1,
  response = 2,
  ping = 3,  // liveness probe; answered with pong
  pong = 4,
};

enum FrameFlags : uint16_t {
  kOutOfLine = 1,  // the payload is in a separate buffer (see the transport), not after the header
};

struct FrameHeader {
  uint32_t length;  // payload bytes
  FrameKind kind;
  uint8_t status;  // responses: a Code
  uint16_t flags;
  uint32_t call_id;          // the caller's slot and generation (see call_slab.hpp)
  uint32_t method;           // requests: the method
  uint32_t max_response;     // requests: the reply space the caller reserved
  uint32_t out_of_line_tag;  // out-of-line payloads: which buffer (see ring/out_of_line.hpp)
  uint64_t out_of_line;      // out-of-line payloads: the transport's handle of the buffer
};
static_assert(sizeof(FrameHeader) == 32, "a 32-byte RPC must fit one 64-byte cache line");

inline constexpr size_t kFrameAlign = 16;
static_assert(sizeof(FrameHeader) % kFrameAlign == 0, "payloads start aligned");

constexpr size_t padded(size_t n) noexcept {
  return (n + kFrameAlign - 1) & ~(kFrameAlign - 1);
}
/// Bytes a frame with `payload` inline bytes occupies.
constexpr size_t frame_bytes(size_t payload) noexcept {
  return sizeof(FrameHeader) + padded(payload);
}

/// Reads a header from memory that another process may be writing: one copy, then only the
/// copy is looked at.
inline FrameHeader read_header(const std::byte* at) noexcept {
  FrameHeader h;
  std::memcpy(&h, at, sizeof h);
  return h;
}

inline bool valid_kind(FrameKind kind) noexcept {
  return kind >= FrameKind::request && kind <= FrameKind::pong;
}

}  // namespace rdmakit::rpc::detail
